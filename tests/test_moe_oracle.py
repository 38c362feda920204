"""An independent oracle for the sparse FFN: transformers' own MoE blocks on the meta device.

For each MoE model type transformers implements, a small config is built with
``experts_implementation="batched_mm"`` (the default grouped_mm is invisible to
FlopCounterMode and the eager loop cannot run on meta), and the sparse block of its last layer
is counted: its parameters (sum of numel) and its matmul FLOPs over T tokens must equal
``costmodel.components.moe`` for the fields each model's config sets. batched_mm runs one
(token, expert) product per assignment, so its FLOPs do not depend on which experts the router
picks.

Llama 4 is the exception that the count exposes: transformers' Llama4TextMoe runs every
expert on every token (the scores zero the unchosen ones), E/K times the routed work.
"""

from __future__ import annotations

import copy

import pytest

from costmodel.components import moe
from costmodel.spec import LayerKind, MoEFFN, Position
from tests.hf_configs import CONFIGS, RELEASED_MOE

# Seconds each (full models, transformers, hypothesis): out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow


torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, CPU build)")
transformers = pytest.importorskip("transformers",
                                   reason="transformers is not installed (pip install -e '.[hf]')")
transformers.logging.set_verbosity_error()

D = 64
BASE = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, vocab_size=300,
            max_position_embeddings=128)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)

# model type -> (config, the same sparse FFN as our fields)
CASES = {
    "mixtral": (dict(BASE, intermediate_size=96, num_local_experts=8, num_experts_per_tok=2,
                     num_key_value_heads=2),
                dict(n_experts=8, top_k=2, d_ff_expert=96, norm_topk=True)),
    "qwen2_moe": (dict(BASE, intermediate_size=100, moe_intermediate_size=48,
                       shared_expert_intermediate_size=80,
                       num_experts=8, num_experts_per_tok=2),
                  dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, d_ff_shared=80,
                       shared_expert_gate=True)),
    "qwen3_moe": (dict(BASE, intermediate_size=100, moe_intermediate_size=48, num_experts=16,
                       num_experts_per_tok=4,
                       head_dim=32),
                  dict(n_experts=16, top_k=4, d_ff_expert=48, norm_topk=True)),
    "olmoe": (dict(BASE, intermediate_size=48, num_experts=8, num_experts_per_tok=3),
              dict(n_experts=8, top_k=3, d_ff_expert=48)),
    "deepseek_v2": (dict(BASE, **MLA, intermediate_size=100, moe_intermediate_size=48, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1,
                         q_lora_rank=None),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=2, router_dtype="fp32")),
    "deepseek_v3": (dict(BASE, **MLA, intermediate_size=100, moe_intermediate_size=48, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=2,
                         topk_group=1,
                         q_lora_rank=24),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, scoring="sigmoid",
                         norm_topk=True, router_dtype="fp32")),
    "gpt_oss": (dict(BASE, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2, head_dim=16,
                     num_key_value_heads=2, layer_types=["sliding_attention", "full_attention"],
                     sliding_window=16),
                dict(n_experts=8, top_k=2, d_ff_expert=48, router_bias=True, expert_bias=True)),
    "llama4_text": (dict(BASE, intermediate_size=48, intermediate_size_mlp=100, num_local_experts=8,
                         num_experts_per_tok=2, head_dim=16, num_key_value_heads=2,
                         interleave_moe_layer_step=1),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, scoring="sigmoid")),
}


def sparse_block(model_type: str):
    config, _ = CASES[model_type]
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="batched_mm")
    layer = model.model.layers[-1]
    return layer.feed_forward if hasattr(layer, "feed_forward") else layer.mlp


@pytest.mark.parametrize("model_type", CASES)
def test_params_and_flops_equal_transformers(model_type: str) -> None:
    block = sparse_block(model_type)
    cfg = MoEFFN(activation="swiglu", **CASES[model_type][1])
    B, S = 3, 5
    leaves = dict(moe.sparse(cfg, D, 2, moe.ExpertDims.of(cfg), B * S))
    assert sum(p.numel() for p in block.parameters()) == sum(c.params for c in leaves.values())
    x = torch.empty(B, S, D, device="meta", dtype=next(block.parameters()).dtype)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        block(x)
    matmul = sum(c.matmul for c in leaves.values())
    if model_type == "llama4_text":  # every expert on every token: E/K times the routed work
        routed = sum(c.matmul for k, c in leaves.items() if k.startswith("experts/"))
        matmul += routed * (cfg.n_experts // cfg.top_k - 1)
    assert counter.get_total_flops() == matmul


def test_expert_params_split_as_transformers_stores_them() -> None:
    """gpt-oss keeps each expert's biases beside its weights: gate_up_proj_bias (E, 2f) and
    down_proj_bias (E, d); the router has a weight (E, d) and a bias (E)."""
    block = sparse_block("gpt_oss")
    shapes = {n: tuple(p.shape) for n, p in block.named_parameters()}
    assert shapes == {
        "router.weight": (8, D), "router.bias": (8,),
        "experts.gate_up_proj": (8, D, 96), "experts.gate_up_proj_bias": (8, 96),
        "experts.down_proj": (8, 48, D), "experts.down_proj_bias": (8, D),
    }
    cfg = MoEFFN(activation="swiglu", **CASES["gpt_oss"][1])
    assert moe.expert_params(cfg, D) == (D * 96 + 96) + (48 * D + D)


def test_deepseek_router_weight_is_fp32() -> None:
    """DeepSeek-V3 keeps gate.weight in fp32 whatever the model's dtype: router_dtype fp32."""
    config, _ = CASES["deepseek_v3"]
    cfg = transformers.AutoConfig.for_model("deepseek_v3", **copy.deepcopy(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="batched_mm",
                                                               torch_dtype=torch.bfloat16)
    gate = model.model.layers[-1].mlp.gate
    assert gate.weight.dtype == torch.float32
    assert model.model.layers[-1].mlp.experts.gate_up_proj.dtype == torch.bfloat16


# --- whole models imported from their configs (costmodel/hf/families/moe.py) ------------------

WHOLE = {
    "mixtral": dict(CASES["mixtral"][0], sliding_window=None),
    "qwen2_moe": dict(CASES["qwen2_moe"][0], num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3],
                      num_key_value_heads=2),
    "qwen3_moe": dict(CASES["qwen3_moe"][0], num_hidden_layers=3, mlp_only_layers=[0], norm_topk_prob=True),
    "olmoe": dict(CASES["olmoe"][0], num_key_value_heads=2),
}
ARCH = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
        "qwen3_moe": "Qwen3MoeForCausalLM",
        "olmoe": "OlmoeForCausalLM"}


@pytest.mark.parametrize("model_type", WHOLE)
def test_imported_config_counts_as_transformers(model_type: str, tmp_path) -> None:
    """load_hf of the config: our parameters equal the transformers model's, and our prefill
    matmul FLOPs equal FlopCounterMode over its forward (eager attention, batched_mm experts)."""
    import json

    from torch.utils.flop_counter import FlopCounterMode

    from costmodel.analysis import analyze
    from costmodel.hf import load_hf

    config = {"model_type": model_type, "architectures": [ARCH[model_type]], **WHOLE[model_type]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = load_hf(path)
    assert spec.moe is not None
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(WHOLE[model_type]))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, experts_implementation="batched_mm", attn_implementation="eager")
    a = analyze(spec, "prefill", batch=2, seq=8)
    assert a.total().params == sum(p.numel() for p in model.parameters())
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    assert counter.get_total_flops() == a.total().flops_matmul


# DBRX (costmodel/hf/families/dbrx.py): nested attn_config and ffn_config, fused Wqkv, LayerNorm
# without a bias, clip_qkv; its experts loop over the tokens each one got (no batched_mm), which
# needs real tensors, so this small model runs on the CPU.
DBRX = dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=300, resid_pdrop=0.1,
            attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "attn_pdrop": 0.05, "rope_theta": 10000.0},
            ffn_config={"ffn_hidden_size": 48, "moe_num_experts": 8, "moe_top_k": 3,
                        "moe_normalize_expert_weights": 1.0})


def test_dbrx_config_counts_as_transformers() -> None:
    """Parameters, prefill and decode matmul FLOPs and the KV cache of an imported DBRX config
    equal transformers' DbrxForCausalLM; clip_qkv is read with a warning, not a refusal."""
    from torch.utils.flop_counter import FlopCounterMode

    from costmodel import hf
    from costmodel.analysis import analyze

    imported = hf.spec_fields_from_hf({"model_type": "dbrx", **DBRX}, "dbrx")
    assert [w.split(": ")[2] for w in imported.warnings] == ["attn_config.clip_qkv"]
    spec = hf.spec_from_hf({"model_type": "dbrx", **DBRX})
    assert spec.moe is not None and spec.moe.norm_topk and not spec.norm_bias
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model("dbrx", **copy.deepcopy(DBRX)), attn_implementation="eager").eval()
    model.requires_grad_(False)  # FlopCounterMode hooks views of the expert weights that require grad
    B, S = 2, 9
    ids = torch.randint(0, 300, (B, S + 1))
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            out = model(input_ids=ids[:, :S], use_cache=True)
        kv = sum(layer.keys.numel() + layer.values.numel() for layer in out.past_key_values.layers)
        with FlopCounterMode(display=False) as decode:
            model(input_ids=ids[:, S:], cache=out.past_key_values, use_cache=True)
    pre, dec = analyze(spec, "prefill", B, S, "bf16"), analyze(spec, "decode", B, S, "bf16")
    assert pre.total().params == sum(p.numel() for p in model.parameters())
    assert pre.total().flops_matmul == prefill.get_total_flops()
    assert dec.total().flops_matmul == decode.get_total_flops()
    assert pre.total().kv_cache == kv * pre.bytes_per_element


# --- DeepSeek-V2/V3 whole models (costmodel/hf/families/deepseek.py) ----------------------------

DEEPSEEK = {
    # V2: no query compression, two shared experts with mlp_bias, group-limited routing and a scale
    "deepseek_v2": dict(CASES["deepseek_v2"][0], num_hidden_layers=3, mlp_bias=True,
                        topk_method="group_limited_greedy", n_group=2, topk_group=1,
                        routed_scaling_factor=16.0),
    # V3: two dense layers first, then sparse; query latent, attention biases, sigmoid + renormalised
    "deepseek_v3": dict(CASES["deepseek_v3"][0], num_hidden_layers=4, first_k_dense_replace=2,
                        num_key_value_heads=4, attention_bias=True),
    # Kimi K2's shape in small: model_type kimi_k2 (read as deepseek_v3), one dense layer, one group
    "kimi_k2": dict(CASES["deepseek_v3"][0], num_hidden_layers=3, num_key_value_heads=4, n_group=1,
                    topk_group=1,
                    n_routed_experts=12, num_experts_per_tok=3, routed_scaling_factor=2.827),
}


def transformers_counts(model_type: str, fields: dict, batch: int, seq: int):
    """transformers on meta (eager attention, batched_mm experts): the model, its parameters, the
    prefill's matmul FLOPs, the KV-cache elements after it, and one decode step's matmul FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(fields))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, experts_implementation="batched_mm", attn_implementation="eager")
    ids = torch.zeros(batch, seq + 1, dtype=torch.long, device="meta")
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            out = model(input_ids=ids[:, :seq], use_cache=True)
        kv = sum(layer.keys.numel() + layer.values.numel() for layer in out.past_key_values.layers)
        with FlopCounterMode(display=False) as decode:
            model(input_ids=ids[:, seq:], cache=out.past_key_values, use_cache=True)
    params = sum(p.numel() for p in model.parameters())
    return model, params, prefill.get_total_flops(), kv, decode.get_total_flops()


def deepseek_counts(model_type: str, batch: int, seq: int) -> tuple[int, int, int, int]:
    """``transformers_counts`` of a DeepSeek case (Kimi K2 builds as deepseek_v3)."""
    builds = "deepseek_v3" if model_type == "kimi_k2" else model_type
    return transformers_counts(builds, DEEPSEEK[model_type], batch, seq)[1:]


@pytest.mark.parametrize("model_type", DEEPSEEK)
def test_deepseek_config_counts_as_transformers(model_type: str) -> None:
    """A DeepSeek config with dense and sparse layers, imported: parameters, prefill and decode
    matmul FLOPs (naive latent attention, what transformers runs) and the KV cache equal
    transformers' exactly; the absorbed decode step is a different count."""
    from costmodel import hf
    from costmodel.analysis import analyze

    config = {"model_type": model_type,
              "architectures": ["DeepseekV3ForCausalLM" if model_type != "deepseek_v2"
                                                          else "DeepseekV2ForCausalLM"],
              **DEEPSEEK[model_type]}
    spec = hf.spec_from_hf(config)
    moe = spec.moe
    assert moe is not None and moe.router_dtype == "fp32"
    assert spec.sparse_layers() == tuple(i >= DEEPSEEK[model_type]["first_k_dense_replace"]
                                         for i in range(spec.n_layers))
    params, prefill, kv, decode = deepseek_counts(model_type, batch=2, seq=7)
    a = analyze(spec, "prefill", batch=2, seq=7, dtype="bf16", routing="worst")
    assert a.total().params == params
    assert a.total().flops_matmul == prefill
    assert a.total().kv_cache == kv * a.bytes_per_element
    step = analyze(spec, "decode", batch=2, seq=7, routing="worst")
    assert step.total().flops_matmul == decode
    assert analyze(spec, "decode", batch=2, seq=7, mla="absorbed").total().flops_matmul != decode


def test_deepseek_v3_correction_bias_is_a_buffer() -> None:
    """DeepSeek-V3's e_score_correction_bias (the auxiliary-loss-free balancing bias): E fp32
    values per sparse layer, a buffer transformers keeps beside the parameters, so the counts
    (ours and sum of numel over parameters()) leave it out; V2 has none."""
    config = DEEPSEEK["deepseek_v3"]
    cfg = transformers.AutoConfig.for_model("deepseek_v3", **copy.deepcopy(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="batched_mm")
    biases = {n: b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")}
    sparse = config["num_hidden_layers"] - config["first_k_dense_replace"]
    assert len(biases) == sparse
    assert all(b.shape == (config["n_routed_experts"],) and b.dtype == torch.float32 for b in biases.values())
    assert not any(n.endswith("e_score_correction_bias") for n, _ in model.named_parameters())
    cfg2 = transformers.AutoConfig.for_model("deepseek_v2", **copy.deepcopy(DEEPSEEK["deepseek_v2"]))
    with torch.device("meta"):
        v2 = transformers.AutoModelForCausalLM.from_config(cfg2, experts_implementation="batched_mm")
    assert not any("correction" in n for n, _ in v2.named_buffers())


def test_deepseek_routing_fields_refused_or_read() -> None:
    """moe_layer_freq other than 1 (transformers ignores it, DeepSeek's code does not) and a
    scoring_func the class does not run are refused, both in one line; V2's router never
    renormalises, whatever norm_topk_prob says."""
    from costmodel import hf
    from costmodel.spec import SpecError

    v3 = {"model_type": "deepseek_v3", **DEEPSEEK["deepseek_v3"]}
    with pytest.raises(SpecError,
                       match=r"moe_layer_freq: 2 is not supported: transformers makes every layer from "
                                        r"first_k_dense_replace on sparse.*; scoring_func: \"softmax\" is "
                                        r"not "
                                        r"supported: transformers' deepseek_v3 router scores by sigmoid"):
        hf.spec_from_hf({**v3, "moe_layer_freq": 2, "scoring_func": "softmax"})
    v2 = {"model_type": "deepseek_v2", **DEEPSEEK["deepseek_v2"], "norm_topk_prob": True}
    assert hf.spec_from_hf(v2).moe.norm_topk is False
    assert hf.spec_from_hf({**v3, "norm_topk_prob": False}).moe.norm_topk is False


# --- gpt_oss and llama4_text, whole models: prefill, a decode step, the KV cache ------------------

NEW = [(mt, i) for mt in ("gpt_oss", "llama4_text") for i in range(1, len(CONFIGS[mt]))]


def _routed_matmul(a) -> int:
    """Matmul FLOPs of the routed experts (our count: top_k experts per token)."""
    return sum(r.flops_matmul for r in a.rows if "/ffn/experts/" in r.path)


@pytest.mark.parametrize("model_type,i", NEW, ids=[f"{mt}-{i}" for mt, i in NEW])
def test_gpt_oss_and_llama4_equal_transformers(model_type: str, i: int) -> None:
    """Imported config vs transformers on meta (eager attention, batched_mm experts): parameters,
    prefill matmul FLOPs, one decode step's from the cache, and the KV cache the prefill leaves,
    at a prompt longer than the windows (8, 16) and chunks (4), so that they bite; the layers that
    rotate are transformers' (no_rope_layers, use_rope). Llama4TextMoe
    runs every expert on every token (the unchosen ones on inputs scaled by 0): its FLOPs are ours
    plus (E - K)/K times our routed expert FLOPs, in both phases."""

    from costmodel import hf
    from costmodel.analysis import analyze

    fields = CONFIGS[model_type][i]
    spec = hf.spec_from_hf({"model_type": model_type, **fields})
    B, S = 2, 19
    model, params, prefill_flops, kv, decode_flops = transformers_counts(model_type, fields, B, S)
    if model_type == "llama4_text":
        rope = [bool(layer.self_attn.use_rope) for layer in model.model.layers]
        assert rope == [not (spec.position is Position.none or (spec.global_nope and k is LayerKind.global_))
                        for k in spec.layer_kinds()]
    pre, dec = analyze(spec, "prefill", B, S, "bf16"), analyze(spec, "decode", B, S, "bf16")
    assert pre.total().params == params
    extra = [0, 0]
    if model_type == "llama4_text" and spec.moe is not None:
        E, K = spec.moe.n_experts, spec.moe.top_k
        extra = [_routed_matmul(a) * (E - K) // K for a in (pre, dec)]
    assert prefill_flops == pre.total().flops_matmul + extra[0]
    assert decode_flops == dec.total().flops_matmul + extra[1]
    # transformers keeps w - 1 (c - 1) tokens of a local (chunked) layer between steps, the next
    # token making w (cache_utils.DynamicSlidingWindowLayer); we count the w slots a step uses.
    span = spec.window or spec.attention_chunk
    short = sum(k is not LayerKind.global_ for k in spec.layer_kinds()) if span and S >= span else 0
    assert pre.total().kv_cache == (kv + short * 2 * B * spec.n_kv_heads
                                    * spec.head_dim) * pre.bytes_per_element


VISION = 871_932_416  # Llama 4's vision encoder and projector at the released vision_config


@pytest.mark.parametrize("name", RELEASED_MOE)
def test_released_config_imports_as_the_bundled_spec(name: str) -> None:
    """The released config.json (Llama 4: the multimodal wrapper, through its text_config) reads
    as the bundled spec, field for field, so every count of every phase is the same; and
    transformers' model of it holds published.exact parameters (Llama 4: its language model; the
    vision encoder and projector the spec's note leaves out hold the rest)."""
    from costmodel import catalog, hf

    config = RELEASED_MOE[name]
    imported = hf.spec_fields_from_hf(config, name)
    assert hf.cost_fields(hf.spec_from_hf(config, name)) == hf.cost_fields(catalog.load(name))
    assert imported.ignored_fields == ()  # every field of the release is known
    exact = catalog.load(name).published.exact
    fields = {k: v for k, v in copy.deepcopy(config).items() if k not in ("model_type", "architectures")}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        if name.startswith("llama-4"):
            model = transformers.AutoModelForImageTextToText.from_config(cfg)
            text = sum(p.numel() for p in model.language_model.parameters())
            assert (text, sum(p.numel() for p in model.parameters()) - text) == (exact, VISION)
        else:
            model = transformers.AutoModelForCausalLM.from_config(cfg)
            assert sum(p.numel() for p in model.parameters()) == exact
