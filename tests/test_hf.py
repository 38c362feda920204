"""costmodel.hf without transformers: the mapping's semantics on hand-derived cases, the errors,
import-hf's YAML, config.json accepted wherever a spec is, and import(export(spec)) round trips."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel import catalog, hf
from costmodel.analysis import analyze, count_params
from costmodel.catalog import load_spec
from costmodel.cli import app
from costmodel.spec import LayerKind, Position, spec_from_dict
from tests.hf_configs import CLASS_SIZES, CONFIGS

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
L, G = LayerKind.local, LayerKind.global_


def cfg(model_type: str, **fields) -> dict:
    """A config of this type: the class's default sizes (which a config must state), and these fields."""
    return {"model_type": model_type, **CLASS_SIZES[model_type], **fields}


def write(tmp_path: Path, config: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


# --- semantics, hand-derived -------------------------------------------------------------------

OPT_125M = dict(model_type="opt", vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                num_attention_heads=12, max_position_embeddings=2048, do_layer_norm_before=True,
                activation_function="relu", dropout=0.1, attention_dropout=0.0, enable_bias=True,
                word_embed_proj_dim=768, architectures=["OPTForCausalLM"], _name_or_path="facebook/opt-125m")


def test_opt_keeps_two_extra_position_rows():
    """OPT-125m: 125,239,296 parameters (Zhang et al. 2022), with a (2048 + 2) x 768 position table.

    By hand: tokens 50272*768 = 38,608,896; positions 2050*768 = 1,574,400; per layer
    4*(768^2 + 768) + (768*3072 + 3072) + (3072*768 + 768) + 2*2*768 = 7,087,872, times 12;
    final LayerNorm 1,536.
    """
    spec = hf.spec_from_hf(OPT_125M)
    assert spec.position_offset == 2 and spec.position_rows == 2050
    assert count_params(spec) == 38_608_896 + 1_574_400 + 12 * 7_087_872 + 1_536 == 125_239_296
    assert spec.name == "opt-125m"
    assert spec.dropout == 0.1 and spec.attention_dropout == 0.0 and spec.embedding_dropout == 0.0


def test_pythia_parallel_block_has_two_norms_and_quarter_rotary():
    """Pythia-70M (GPT-NeoX): 70,426,624 parameters (Biderman et al. 2023, Table 1); RoPE on 16 of 64 dims."""
    config = dict(model_type="gpt_neox", vocab_size=50304, hidden_size=512, num_hidden_layers=6,
                  num_attention_heads=8, intermediate_size=2048, rotary_pct=0.25, use_parallel_residual=True,
                  max_position_embeddings=2048)
    spec = hf.spec_from_hf(config)
    assert (spec.block.value, spec.shared_norm, spec.rotary_dims) == ("parallel", False, 16)
    assert count_params(spec) == 70_426_624


def test_t5_small_tied_head_is_scaled():
    """t5-small: 60,506,624 parameters (tied head); the decoder output is scaled before the head."""
    config = dict(model_type="t5", d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                  vocab_size=32128,
                  feed_forward_proj="relu", dropout_rate=0.0, n_positions=512)
    spec = hf.spec_from_hf(config)
    assert spec.head_scale and spec.tied_embeddings and spec.relative_buckets == 32
    assert count_params(spec) == 60_506_624


def test_released_gptj_config_with_its_legacy_keys():
    """EleutherAI/gpt-j-6b's config.json as released: 6,050,882,784 tensors (the bundled spec's exact)."""
    config = {"activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "attn_pdrop": 0.0,
              "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256,
              "gradient_checkpointing": False,
              "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gptj", "n_embd": 4096,
              "n_head": 16, "n_inner": None, "n_layer": 28, "n_positions": 2048, "resid_pdrop": 0.0,
              "rotary": True, "rotary_dim": 64, "scale_attn_weights": True, "summary_activation": None,
              "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
              "summary_use_proj": True, "tie_word_embeddings": False, "tokenizer_class": "GPT2Tokenizer",
              "transformers_version": "4.18.0.dev0", "use_cache": True, "vocab_size": 50400}
    spec = hf.spec_from_hf(config)
    assert count_params(spec) == 6_050_882_784 and spec.rotary_dims == 64


def test_gemma2_slides_on_even_layers_with_default_caps():
    spec = hf.spec_from_hf(cfg("gemma2", num_hidden_layers=5))
    assert spec.layer_kinds() == [L, G, L, G, L] and spec.window == 4096
    assert (spec.attn_softcap, spec.final_softcap) == (50.0, 30.0)
    assert spec.embedding_scale and spec.norm_position.value == "sandwich" and spec.head_dim == 256


def test_gemma3_every_sixth_layer_is_global():
    spec = hf.spec_from_hf(cfg("gemma3_text", num_hidden_layers=62, sliding_window=1024))
    assert spec.layer_pattern == (L, L, L, L, L, G)
    assert spec.kind_counts() == {L: 52, G: 10}  # 62 // 6 = 10 global layers
    assert spec.qk_norm.value == "head" and spec.attn_softcap is None


def test_layer_types_win_over_the_pattern():
    types = ["full_attention", "sliding_attention", "sliding_attention"]
    spec = hf.spec_from_hf(cfg("gemma3_text", num_hidden_layers=3, layer_types=types))
    assert spec.layer_kinds() == [G, L, L]


def test_qwen2_slides_from_max_window_layers_on():
    base = cfg("qwen2", num_hidden_layers=6, sliding_window=512, max_window_layers=4)
    assert hf.spec_from_hf({**base, "use_sliding_window": True}).layer_kinds() == [G, G, G, G, L, L]
    off = hf.spec_from_hf({**base, "use_sliding_window": False})
    assert off.window is None and off.layer_kinds() == [G] * 6
    assert off.bias.qkv and not off.bias.attn_out and not off.bias.ffn


def test_mistral_window_null_versus_absent():
    assert hf.spec_from_hf(cfg("mistral", sliding_window=None)).window is None
    assert hf.spec_from_hf(cfg("mistral")).window == 4096  # MistralConfig's default


def test_cohere2_full_layers_carry_no_positions():
    spec = hf.spec_from_hf(cfg("cohere2", num_hidden_layers=8))
    assert spec.layer_pattern == (L, L, L, G) and spec.global_nope and spec.logit_scale == 0.0625
    none = hf.spec_from_hf(cfg("cohere2", num_hidden_layers=8, sliding_window=None))
    assert none.position is Position.none and none.window is None


def test_falcon_variants():
    old = hf.spec_from_hf(cfg("falcon"))
    assert (old.n_kv_heads, old.block.value, old.shared_norm) == (1, "parallel", True)
    new = hf.spec_from_hf(cfg("falcon", new_decoder_architecture=True, num_kv_heads=71))
    assert (new.n_kv_heads, new.shared_norm) == (71, False)
    serial = hf.spec_from_hf(cfg("falcon", parallel_attn=False, alibi=True))
    assert (serial.block.value, serial.position) == ("serial", Position.alibi)


# --- spec extensions: hand-derived costs -------------------------------------------------------

TINY = dict(name="tiny", d_model=8, n_layers=1, n_heads=2, d_ff=16, vocab_size=10, max_seq_len=16,
            norm="rmsnorm", activation="swiglu", position="rope")


def test_head_scale_and_logit_scale_cost_one_multiply_per_element():
    """B*S*d multiplies before the head, B*S*V after it (B=2, S=4, d=8, V=10)."""
    plain = analyze(spec_from_dict(TINY), "prefill", 2, 4, "fp32")
    scaled = analyze(spec_from_dict({**TINY, "head_scale": True, "logit_scale": 0.25}), "prefill", 2, 4,
                     "fp32")
    assert scaled.total("head_scale").flops_other == 2 * 4 * 8
    assert scaled.total("logit_scale").flops_other == 2 * 4 * 10
    assert scaled.total().flops_other - plain.total().flops_other == 64 + 80


def test_dropout_rates_per_site():
    """Attention-probability dropout alone: 2 FLOPs per probability, B*h*S*S of them; no other site."""
    spec = spec_from_dict({**TINY, "attention_dropout": 0.1})
    a = analyze(spec, "train", 1, 4, "fp32")
    drops = {r.path: r.flops_other for r in a.rows if r.path.endswith("dropout")}
    assert drops == {"layers/attention/dropout": 3 * 2 * (1 * 2 * 4 * 4)}  # train: 3 x forward
    emb_only = analyze(spec_from_dict({**TINY, "embedding_dropout": 0.1}), "train", 1, 4, "fp32")
    assert [r.path for r in emb_only.rows if r.path.endswith("dropout")] == ["embedding/dropout"]


def test_t5_dropout_at_every_site():
    """T5's one dropout_rate covers the FFN hidden activations and each stack's final-norm output
    too: per decoder-only-free stack, B*S*f and B*S*d more elements (2 FLOPs each, x3 in training)."""
    base = dict(model_type="t5", vocab_size=10, d_model=8, d_kv=4, d_ff=12, num_layers=1,
                num_decoder_layers=1, num_heads=2, feed_forward_proj="relu", n_positions=16)
    dry = hf.spec_from_hf({**base, "dropout_rate": 0.0}, "t5")
    wet = hf.spec_from_hf({**base, "dropout_rate": 0.1}, "t5")
    assert (wet.dropout, wet.ffn_dropout, wet.final_dropout) == (0.1, 0.1, 0.1)
    B, S, d, f = 1, 4, 8, 12
    a = analyze(wet, "train", B, S, enc_seq=S)
    assert a.total("encoder/final_dropout").flops_other == 3 * 2 * B * S * d
    # FFN: the output (S*d) and the hidden activations (S*f)
    assert a.total("encoder/layers/ffn/dropout").flops_other == 3 * 2 * B * S * (d + f)
    assert analyze(dry, "train", B, S, enc_seq=S).total().flops_other < a.total().flops_other


def test_position_offset_only_with_learned_positions(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in {**TINY, "position_offset": 2}.items()))
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}:11: position_offset: only for position: learned"


# --- errors: one line, exit 2 -------------------------------------------------------------------

ERRORS = [
    ({"model_type": "dbrx"}, "d_model: required for model_type dbrx (no default is taken for a size)"),
    ({**CONFIGS["dbrx"][0], "model_type": "dbrx", "attn_config": {"kv_n_heads": 3}},
     "attn_config.kv_n_heads: 4 query heads are not a multiple of 3 key/value heads"),
    ({**CONFIGS["dbrx"][0], "model_type": "dbrx",
      "ffn_config": {"ffn_hidden_size": 48, "moe_num_experts": 8, "moe_top_k": 2,
                     "moe_normalize_expert_weights": 2.0, "moe_jitter_eps": 0.01}},
     "ffn_config.moe_normalize_expert_weights: 2.0 is not supported: dividing the top-k weights by a p-norm "
     "other than p = 1 is not modelled; ffn_config.moe_jitter_eps: 0.01 is not supported"),
    ({"model_type": "jamba", "attn_layer_period": 8},
     "attn_layer_period: 8: jamba is not supported: one layer in attn_layer_period attends; the others are "
     "Mamba (state-space) layers"),
    ({"model_type": "nemotron_h"}, "layers_block_type: nemotron_h is not supported: its \"mamba\" blocks"),
    ({"model_type": "granitemoe"}, "residual_multiplier: granitemoe is not supported: scales the embeddings"),
    ({"model_type": "phimoe"}, "num_experts_per_tok: phimoe is not supported: PhiMoE routes by SparseMixer"),
    ({"model_type": "ernie4_5_moe"},
     "model_type: ernie4_5_moe is a mixture-of-experts model whose mapping is not written yet"),
    (cfg("llama", num_local_experts=8), "num_local_experts: 8: a mixture-of-experts llama is not supported"),
    ({"model_type": "xlnet"}, "model_type: \"xlnet\" is not supported; supported: bert, roberta, gpt2, gptj"),
    ({"hidden_size": 8}, "model_type: required, one of bert, roberta, gpt2"),
    (cfg("llama", quantization_config={"bits": 4}),
     "quantization_config: quantised weights are not modelled"),
    (cfg("llama", architectures=["LlamaForSequenceClassification"]),
     "architectures: LlamaForSequenceClassification has a head other than the language-model head"),
    (cfg("opt", word_embed_proj_dim=512, hidden_size=1024, num_attention_heads=16),
     "word_embed_proj_dim: 512 != hidden_size 1024: the project_in and project_out matrices"),
    (cfg("gpt2", scale_attn_by_inverse_layer_idx=True),
     "scale_attn_by_inverse_layer_idx: true is not supported"),
    (cfg("llama", hidden_size="4096"), 'hidden_size: should be a positive integer (got "4096")'),
    (cfg("llama", partial_rotary_factor=0.5), "partial_rotary_factor: llama rotates the whole head"),
    (cfg("gpt2", activation_function="silu"),
     'activation_function: "silu" in a two-matrix FFN is not supported'),
    (cfg("mistral", layer_types=["full_attention"] * 32), "layer_types: MistralForCausalLM ignores it"),
    (cfg("falcon", hidden_dropout=0.1), "hidden_dropout: Falcon's dropout sites differ"),
    (cfg("cohere2", head_dim=64), "head_dim: cohere2 always uses hidden_size / heads = 128"),
    (cfg("gemma2", layer_types=["chunked_attention"] * 26),
     'layer_types: layer type "chunked_attention" is not supported'),
    (cfg("gpt_oss", quantization_config={"quant_method": "gptq"}),
     "quantization_config: quantised weights are not modelled"),
    (cfg("llama4_text", layer_types=["sliding_attention"] * 48),
     "layer_types: should give chunked_attention or full_attention for each of the 48 layers"),
    (cfg("llama4_text", attention_chunk_size=None, layer_types=["chunked_attention"] * 48),
     "attention_chunk_size: null, but layer_types has chunked_attention layers"),
    (cfg("llama4_text", layer_types=["chunked_attention"] * 48),
     "no_rope_layers: a chunked layer without RoPE"),
    (cfg("llama4_text", attention_chunk_size=None),
     "no_rope_layers: RoPE on some full-attention layers and not"),
    (cfg("llama4_text", no_rope_layers=[1, 2] * 24), "no_rope_layers: should list 1 (RoPE) or 0 (NoPE)"),
    (cfg("llama4_text", moe_layers=["1"]), 'moe_layers: should list layer indices (got ["1"])'),
    ({k: v for k, v in cfg("llama4_text",
                           interleave_moe_layer_step=2).items() if k != "intermediate_size_mlp"},
     "intermediate_size_mlp: required for model_type llama4_text"),
]


@pytest.mark.parametrize("config,message", ERRORS, ids=[m.split(":")[0] for _, m in ERRORS])
def test_bad_configs_fail_in_one_line(tmp_path, config, message):
    """A field the tool cannot express: one line naming file and field, exit code 2."""
    path = write(tmp_path, config)
    for args in (["import-hf", str(path)], ["analyze", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {message}")


def test_gpt_oss_reads_sinks_windows_and_biased_experts():
    """gpt-oss (GptOssConfig's defaults are gpt-oss-120b's sizes): even layers slide over 128
    tokens, odd ones attend fully; a sink per head; q, k, v, o biased; 128 experts of 2880, top-4,
    with biases on the router and on every expert linear; the top-4 softmax renormalised."""
    spec = hf.spec_from_hf(cfg("gpt_oss"))
    assert spec.layer_kinds()[:4] == [L, G, L, G] and spec.window == 128 and spec.attention_sinks
    assert (spec.bias.qkv, spec.bias.attn_out, spec.bias.ffn) == (True, True, False)
    moe = spec.moe
    assert moe is not None and (moe.n_experts, moe.top_k, moe.d_ff_expert) == (128, 4, 2880)
    assert moe.router_bias and moe.expert_bias and moe.norm_topk and moe.n_shared_experts == 0
    # hidden_act is not read by GptOssExperts: the clamped SwiGLU whatever it says
    assert hf.spec_from_hf(cfg("gpt_oss", hidden_act="gelu")).activation.value == "swiglu"


def test_gpt_oss_mxfp4_checkpoint_is_counted_in_elements(tmp_path):
    """The released configs carry quantization_config mxfp4: read as the dequantised model, with
    one warning line; any other quantisation is refused (ERRORS)."""
    path = write(tmp_path, cfg("gpt_oss", quantization_config={"quant_method": "mxfp4"}))
    result = runner.invoke(app, ["analyze", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"warning: {path}: quantization_config: mxfp4: the experts' weights in 4-bit blocks with shared "
        "scales "
        "(transformers dequantises them): parameters are counted as elements, their bytes at --dtype"]
    assert (json.loads(result.stdout)["phases"]["prefill"]["params"]["total"]
            == count_params(hf.spec_from_hf(cfg("gpt_oss"))))


def test_llama4_reads_rope_chunks_and_sparse_layers():
    """Llama4TextConfig's defaults (Scout's sizes): every 4th layer NoPE and full, the others
    chunked (8192) with RoPE; every layer sparse, 16 experts of 8192 and one shared, sigmoid.
    interleave_moe_layer_step 2: layers 1, 3, ... sparse, the others dense of intermediate_size_mlp;
    a moe_layers list off that rule is kept as listed; moe_layers [] makes every FFN dense."""
    C = LayerKind.chunked
    scout = hf.spec_from_hf(cfg("llama4_text"))
    assert scout.layer_kinds()[:8] == [C, C, C, G] * 2 and scout.global_nope and scout.attention_chunk == 8192
    moe = scout.moe
    assert moe is not None and (moe.n_experts, moe.top_k, moe.d_ff_expert, moe.n_shared_experts) == (16, 1,
                                                                                                     8192, 1)
    assert moe.scoring.value == "sigmoid" and not moe.norm_topk and moe.d_ff is None
    maverick = hf.spec_from_hf(cfg("llama4_text", interleave_moe_layer_step=2)).moe
    assert maverick is not None and (maverick.moe_every, maverick.d_ff) == (2, 16384)
    listed = hf.spec_from_hf(cfg("llama4_text", moe_layers=[47, 0, 0,
                                                            99])).moe  # as `layer_idx in moe_layers`
    assert listed is not None and listed.moe_layers == (0, 47)
    dense = hf.spec_from_hf(cfg("llama4_text", moe_layers=[]))
    assert dense.moe is None and dense.d_ff == 16384
    every_rope = hf.spec_from_hf(cfg("llama4_text", no_rope_layers=[1] * 48))
    assert every_rope.layer_pattern == (C,) and not every_rope.global_nope
    none = hf.spec_from_hf(cfg("llama4_text", no_rope_layers=[0] * 48))  # no chunks without RoPE by default
    assert none.position is Position.none and none.layer_pattern == (G,)


def test_malformed_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n  "hidden_size": }')
    result = runner.invoke(app, ["import-hf", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {path}:2: malformed JSON")


# --- import-hf, and config.json wherever a spec goes ----------------------------------------------

CASES = [(mt, i, cfg) for mt, cfgs in CONFIGS.items() for i, cfg in enumerate(cfgs)]


@pytest.mark.parametrize("model_type,i,fields", CASES, ids=[f"{mt}-{i}" for mt, i, _ in CASES])
def test_written_yaml_loads_back_with_identical_numbers(tmp_path, model_type, i, fields):
    """import-hf -o writes YAML that load_spec reads into the same spec as the config itself."""
    config = write(tmp_path, {"model_type": model_type, **fields})
    out = tmp_path / "spec.yaml"
    result = runner.invoke(app, ["import-hf", str(config), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert f"source: \"{config} (Hugging Face config, model_type {model_type})\"" in text
    written, direct = load_spec(out), catalog.load(str(config))
    assert written == direct
    for phase in ("train", "prefill") if written.is_encoder else ("train", "prefill", "decode"):
        assert analyze(written, phase, 2, 16).to_dict() == analyze(direct, phase, 2, 16).to_dict()


def test_import_hf_prints_yaml_or_json(tmp_path):
    config = write(tmp_path, OPT_125M)
    yaml_out = runner.invoke(app, ["import-hf", str(config)])
    assert (yaml_out.exit_code == 0
            and "position_offset: 2  # rows of the learned position table" in yaml_out.stdout)
    json_out = runner.invoke(app, ["import-hf", str(config), "--format", "json"])
    assert json.loads(json_out.stdout)["position_offset"] == 2


def test_every_command_accepts_a_config(tmp_path):
    """analyze and formula read a config.json through catalog.load."""
    config = write(tmp_path, OPT_125M)
    result = runner.invoke(app, ["analyze", str(config), "-p", "prefill", "-f", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["phases"]["prefill"]["params"]["total"] == 125_239_296
    result = runner.invoke(app, ["formula", str(config), "-q", "params", "-c", "embedding/positions"])
    assert result.exit_code == 0 and result.stdout.strip() == str(2050 * 768)


def test_bundled_names_with_dots_resolve():
    assert catalog.load("llama-3.1-405b").name == "llama-3.1-405b"
    assert catalog.load("gpt3-1.3b").name == "gpt3-1.3b"


# --- export, and import(export(spec)) ------------------------------------------------------------

# What each exported config cannot carry (the rest round-trips exactly), and why:
LOST = {
    "palm-540b": {"z_loss", "logit_scale"},  # no HF field for z-loss; Cohere always scales logits
    # ffn.aux_loss: transformers' DeepseekV2/V3 add no load-balancing loss (DeepSeek's own training code does)
    "deepseek-v2-lite": {"ffn"}, "deepseek-v3": {"ffn"},
}
NO_HF_CLASS = {"transformer-base", "transformer-big"}  # sinusoidal encoder-decoder, no biased q/k/v


@pytest.mark.parametrize("name", catalog.bundled_names())
def test_round_trip_gives_the_same_costs(name):
    spec = catalog.load(name)
    if name in NO_HF_CLASS:
        with pytest.raises(hf.SpecError,
                           match="position, .*: no Hugging Face model type among .* builds these parameters"):
            hf.export_hf(spec)
        return
    export = hf.export_hf(spec)
    assert set(export.lost) == LOST.get(name, set())
    config = json.loads(json.dumps(export.config))
    back = hf.spec_from_hf(config, name)
    assert count_params(back) == count_params(spec)
    if export.lost:
        return
    for phase in ("train", "prefill") if spec.is_encoder else ("train", "prefill", "decode"):
        ours = analyze(spec, phase, 2, 256, enc_seq=128 if spec.is_encoder_decoder else None).to_dict()
        theirs = analyze(back, phase, 2, 256, enc_seq=128 if spec.is_encoder_decoder else None).to_dict()
        ours.pop("spec"), theirs.pop("spec")
        # Which convention of active parameters leads is the publisher's (published metadata,
        # which a config does not carry); both conventions' values must still agree.
        for side in (ours, theirs):
            for key in ("active", "active_convention"):
                side["params"].pop(key, None)
        assert theirs == ours


def test_docs_list_every_type_and_ignored_field():
    """docs/hf.md names every supported model type and every field ignored as cost-free."""
    text = (ROOT / "docs" / "hf.md").read_text()
    for model_type in hf.SUPPORTED:
        assert f"`{model_type}`" in text
    for family in hf.FAMILIES.values():
        for field in [*hf.COMMON_IGNORED, *family.ignored]:
            assert f"`{field}`" in text, field


def test_readme_examples(tmp_path, monkeypatch):
    """docs/hf.md's "Commands" (the README's "Hugging Face configs" before issue 22), as written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "path" / "to").mkdir(parents=True)
    write(tmp_path / "path" / "to", cfg("llama", max_position_embeddings=8192))
    (tmp_path / "jamba").mkdir()
    write(tmp_path / "jamba", {"model_type": "jamba", "attn_layer_period": 8})

    result = runner.invoke(app, ["import-hf", "path/to/config.json", "-o", "my-model.yaml"])
    assert result.exit_code == 0 and result.stderr.strip() == "wrote my-model.yaml"
    assert load_spec("my-model.yaml").name == "to"  # the config's folder
    result = runner.invoke(app, ["import-hf", "path/to/config.json"])
    assert result.exit_code == 0 and "n_layers: 32" in result.stdout
    result = runner.invoke(app, ["analyze", "path/to/config.json", "-p", "decode", "--seq", "4096"])
    assert result.exit_code == 0 and "6,738,415,616" in result.stdout  # LlamaConfig's defaults: LLaMA 2 7B
    result = runner.invoke(app, ["import-hf", "jamba/config.json"])
    assert result.exit_code == 2
    assert result.stderr == ("error: jamba/config.json: attn_layer_period: 8: jamba is not supported: one "
                             "layer in attn_layer_period attends; the others are Mamba (state-space) layers, "
                             "which are not a design element here (mamba_d_state, mamba_d_conv, "
                             "mamba_expand)\n")


# --- bad input: one clear line, exit 2, never a traceback (issue 10) ------------------------------


def fails(args: list[str], *needles: str) -> str:
    """The command exits 2 with one stderr line holding every needle (and no traceback)."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_non_utf8_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama", "name": "\xff"}')
    fails(["analyze", str(path)], f"{path}: not UTF-8 text (byte 33")


def test_deep_nesting(tmp_path):
    for depth in (500, 100_000):  # parsed, then refused; too deep even for the parser
        path = write(tmp_path, {})
        path.write_text('{"model_type": "llama", "x": ' + "[" * depth + "]" * depth + "}")
        fails(["import-hf", str(path)], f"{path}: nested more than 32 levels deep")


@pytest.mark.parametrize("text", ['{"model_type": "llama", "vocab_size": NaN}',
                                  '{"model_type": "llama", "vocab_size": Infinity}',
                                  '{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}"])
def test_numbers_json_cannot_hold(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    fails(["analyze", str(path)], f"{path}: ")


def test_partial_rotary_factor_of_the_wrong_type(tmp_path):
    fails(["analyze", str(write(tmp_path, cfg("phi3", partial_rotary_factor=[0.5])))],
          "partial_rotary_factor: should be a number in (0, 1] (got [0.5])")
    beside = cfg("phi3", partial_rotary_factor="0.5", rope_parameters={"partial_rotary_factor": 0.5})
    fails(["analyze", str(write(tmp_path, beside))],
          'partial_rotary_factor: should be a number in (0, 1] (got "0.5")')
    disagree = cfg("phi3", partial_rotary_factor=0.25, rope_parameters={"partial_rotary_factor": 0.5})
    fails(["analyze", str(write(tmp_path, disagree))],
          "partial_rotary_factor, rope_parameters.partial_rotary_factor: "
                                                        "disagree (0.25, 0.5)")


def test_layer_types_not_a_list(tmp_path):
    for use_window in (False, True):
        config = cfg("qwen2", layer_types=True, use_sliding_window=use_window)
        fails(["analyze", str(write(tmp_path, config))], "layer_types: should be a list (got true)")


@pytest.mark.parametrize("model_type,field", [("gpt_neox", "intermediate_size"), ("opt", "ffn_dim")])
def test_null_ffn_width_is_not_4d(tmp_path, model_type, field):
    """GPT-NeoX and OPT have no 4d default (GPT-2's n_inner and Falcon's ffn_hidden_size do)."""
    fails(["analyze", str(write(tmp_path, cfg(model_type, **{field: None})))],
          f"{field}: should be a positive integer (got null)")
    gpt2 = hf.spec_from_hf(cfg("gpt2", n_inner=None))
    assert gpt2.d_ff == 4 * gpt2.d_model


def test_a_missing_size_is_named(tmp_path):
    config = {k: v for k, v in cfg("llama").items() if k != "intermediate_size"}
    fails(["analyze", str(write(tmp_path, config))], "intermediate_size: required for model_type llama")
    for model_type, fields in CLASS_SIZES.items():  # every size of every type, never a default
        for key in fields:
            config = {k: v for k, v in cfg(model_type).items() if k != key}
            with pytest.raises(hf.SpecError, match=f"{key}: required for model_type {model_type}"):
                hf.spec_from_hf(config)


def test_zero_experts_is_a_dense_model(tmp_path):
    spec = hf.spec_from_hf(cfg("llama", num_experts=0, num_local_experts=None))
    assert count_params(spec) == count_params(hf.spec_from_hf(cfg("llama")))
    assert set(spec.ignored_fields) == {"num_experts", "num_local_experts"}
    fails(["analyze", str(write(tmp_path, cfg("llama", num_experts=8)))],
          "num_experts: 8: a mixture-of-experts llama is not supported")


class Counted:
    """An element that counts the comparisons made between elements."""

    calls = 0

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        Counted.calls += 1
        return self.value == other.value

    def __ne__(self, other):
        return not self == other


def test_layer_types_period_is_linear():
    """The shortest repeating pattern in O(n) comparisons (the quadratic search took 17.7 s for
    20k layers); a 20,000-layer gemma2 config imports with its true period."""
    from costmodel.hf.reader import _period

    n = 20_000
    items = [Counted(i % 7 == 6) for i in range(n)]
    Counted.calls = 0
    assert _period(items) == 7
    assert Counted.calls <= 3 * n
    assert _period([Counted(i == n - 1) for i in range(n)]) == n  # no shorter period
    types = ["sliding_attention", "full_attention", "full_attention"] * 6_666 + ["sliding_attention",
                                                                                 "full_attention"]
    spec = hf.spec_from_hf(cfg("gemma2", num_hidden_layers=n, layer_types=types))
    assert spec.layer_pattern == (L, G, G)


def test_import_hf_output_a_folder_or_missing(tmp_path):
    config = str(write(tmp_path, cfg("llama")))
    fails(["import-hf", config, "-o", str(tmp_path)], f"error: {tmp_path}: -o: cannot write: Is a directory")
    missing = tmp_path / "no" / "such" / "spec.yaml"
    fails(["import-hf", config, "-o", str(missing)],
          f"error: {missing}: -o: cannot write: No such file or directory")


def test_read_limits(tmp_path):
    big = tmp_path / "config.json"
    big.write_text('{"model_type": "llama", "pad": "' + "x" * (10 * 2**20) + '"}')
    fails(["analyze", str(big)], f"{big}: larger than 10 MiB")
    fails(["import-hf", "/dev/zero"], "/dev/zero: not a regular file")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # a reader would block forever: refused before it is opened
    fails(["analyze", str(fifo)], f"{fifo}: not a regular file")


def test_every_problem_at_once(tmp_path):
    config = cfg("gpt2", n_embd="768", activation_function="silu", quantization_config={"bits": 4},
                 scale_attn_by_inverse_layer_idx=True, architectures=["GPT2ForTokenClassification"])
    line = fails(["analyze", str(write(tmp_path, config))])
    for problem in ('n_embd: should be a positive integer (got "768")',
                    "architectures: GPT2ForTokenClassification",
                    "quantization_config: quantised weights"):
        assert problem in line
    config = cfg("llama", attention_bias="yes", mlp_bias=1, tie_word_embeddings="no", attention_dropout=2)
    line = fails(["analyze", str(write(tmp_path, config))])
    assert line.count("; ") == 3  # attention_bias, mlp_bias, tie_word_embeddings, attention_dropout


# --- unknown fields, model folders, multimodal wrappers (issue 11) ---------------------------------


def test_unknown_fields_warn_and_are_listed(tmp_path):
    path = write(tmp_path, cfg("llama", use_flux_capacitor=True, my_note="x", is_llama_config=True))
    result = runner.invoke(app, ["analyze", str(path), "-p", "prefill", "-f", "json"])
    assert result.exit_code == 0, result.output
    warnings = result.stderr.strip().splitlines()
    assert [w.split(": ")[2] for w in warnings] == ["use_flux_capacitor", "my_note"]  # not is_llama_config
    assert all(w.startswith(f"warning: {path}: ") for w in warnings)
    assert json.loads(result.stdout)["ignored_fields"] == ["use_flux_capacitor", "my_note"]
    plain = runner.invoke(app, ["analyze", str(write(tmp_path, cfg("llama"), "plain.json")), "-p", "prefill",
                                "-f", "json"])
    assert "ignored_fields" not in json.loads(plain.stdout) and plain.stderr == ""
    out = tmp_path / "spec.yaml"
    result = runner.invoke(app, ["import-hf", str(path), "-o", str(out)])
    assert result.exit_code == 0 and load_spec(out).ignored_fields == ("use_flux_capacitor", "my_note")


def test_metadata_fields_of_released_configs_pass_silently(tmp_path):
    """Fields transformers itself or the authors' tools write (issue 11's list) change no cost."""
    quiet = {"llama": dict(is_llama_config=True, rope_interleaved=False, **{"transformers.js_config": {}}),
             "gpt2": dict(n_special=0, predict_special_tokens=True),
             "phi3": dict(full_attn_mod=1, interpolate_factor=1),
             "gemma3_text": dict(_sliding_window_pattern=6),
             "t5": dict(scale_decoder_outputs=True)}
    for model_type, fields in quiet.items():
        result = runner.invoke(app, ["analyze", str(write(tmp_path, cfg(model_type, **fields))), "-p",
                                     "prefill"])
        assert result.exit_code == 0 and result.stderr == "", (model_type, result.output)
    fails(["analyze", str(write(tmp_path, cfg("t5", scale_decoder_outputs=False)))],
          "scale_decoder_outputs: differs from tie_word_embeddings")


def test_a_model_folder(tmp_path):
    folder = tmp_path / "opt-125m"
    folder.mkdir()
    write(folder, OPT_125M)
    result = runner.invoke(app, ["analyze", str(folder), "-p", "prefill", "-f", "json"])
    assert (result.exit_code == 0
            and json.loads(result.stdout)["phases"]["prefill"]["params"]["total"] == 125_239_296)
    result = runner.invoke(app, ["import-hf", str(folder)])
    assert result.exit_code == 0 and "ffn_dropout" not in result.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(["analyze", str(empty)], f"{empty}: a folder without a config.json")


LLAVA = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
         "image_token_index": 32000,
         "projector_hidden_act": "gelu", "vision_feature_layer": -2,
         "vision_config": {"model_type": "clip_vision_model"},
         "text_config": {"model_type": "llama", **CLASS_SIZES["llama"], "vocab_size": 32064}}


def test_multimodal_wrappers_read_their_text_decoder(tmp_path):
    path = write(tmp_path, LLAVA)
    result = runner.invoke(app, ["analyze", str(path), "-p", "prefill", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"warning: {path}: llava is multimodal: only its text decoder (text_config) is counted, not the "
        "vision "
        "tower nor the projector"]
    text = hf.spec_from_hf({**LLAVA["text_config"]})
    assert json.loads(result.stdout)["phases"]["prefill"]["params"]["total"] == count_params(text)
    # A text_config without a model_type is the wrapper's default text model.
    bare = {**LLAVA, "text_config": {k: v for k, v in LLAVA["text_config"].items() if k != "model_type"}}
    assert count_params(hf.spec_from_hf(bare)) == count_params(text)
    fails(["analyze", str(write(tmp_path, {**LLAVA, "text_config": {**LLAVA["text_config"],
                                                                    "vocab_size": None}}))],
          f"{path}: text_config: vocab_size: should be a positive integer (got null)")
    fails(["analyze", str(write(tmp_path, {"model_type": "mistral3"}))],
          "text_config: mistral3 is multimodal")


EXPORT_TYPES = {  # docs/hf.md's export table
    "mixtral-8x7b": "mixtral", "dbrx-base": "dbrx", "olmoe-1b-7b": "olmoe", "qwen3-30b-a3b": "qwen3_moe",
    "qwen3-235b-a22b": "qwen3_moe",
    "gpt-oss-20b": "gpt_oss", "gpt-oss-120b": "gpt_oss", "llama-4-scout": "llama4_text",
    "llama-4-maverick": "llama4_text",
    **dict.fromkeys(("gpt2-small", "gpt2-xl", "gpt3-125m", "gpt3-1.3b", "gpt3-175b"), "gpt2"),
    "gpt-j-6b": "gptj",
    **dict.fromkeys(("megatron-22b", "megatron-175b", "megatron-530b", "megatron-1t"), "gpt2"),
    **dict.fromkeys(("llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b"), "llama"),
    "mistral-7b": "mistral", "gemma-2-9b": "gemma2", "gemma-3-27b": "gemma3_text", "qwen2-7b": "qwen2",
    "olmo-2-7b": "olmo2", "falcon-7b": "falcon", "command-r7b": "cohere2", "palm-540b": "cohere",
    "t5-11b": "t5", "t5-v1.1-xxl": "t5",
    "deepseek-v2-lite": "deepseek_v2", "deepseek-v3": "deepseek_v3", "kimi-k2": "deepseek_v3",
    "bert-base-uncased": "bert", "bert-large-uncased": "bert", "roberta-large": "roberta",
    "modernbert-base": "modernbert", "deberta-v3-base": "deberta-v2",
}


def test_export_picks_the_documented_model_type():
    """Export keeps the first family whose config reproduces the spec; for the bundled specs that
    is the type docs/hf.md names (a new family must not take a spec another already builds)."""
    got = {n: hf.export_hf(catalog.load(n)).model_type for n in catalog.bundled_names() if n
           not in NO_HF_CLASS}
    assert got == EXPORT_TYPES


def test_qwen3_moe_as_transformers_5_saves_it():
    """transformers 5 writes Qwen3-MoE's expert count as num_local_experts beside num_experts
    (issue 23: refused as "mixture-of-experts is out of scope"): equal, it imports as the
    bundled spec counts it; different, one line names both fields."""
    from costmodel.analysis import analyze
    from costmodel.catalog import load
    from costmodel.hf import export_hf, spec_fields_from_hf
    from costmodel.spec import SpecError

    spec = load("qwen3-30b-a3b")
    config = dict(export_hf(spec).config)
    config["num_local_experts"] = config["num_experts"]
    got = spec_fields_from_hf(config, "config.json")
    assert got.fields["ffn"]["n_experts"] == 128
    twin = spec_from_dict({**got.fields, "name": "qwen3-30b-a3b"})
    assert analyze(twin, "train", batch=1, seq=128).total().params == 30_532_122_624
    with pytest.raises(SpecError, match="num_local_experts: 64 differs from num_experts 128"):
        spec_fields_from_hf({**config, "num_local_experts": 64}, "config.json")
