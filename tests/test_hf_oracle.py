"""An independent oracle: transformers' own implementation, instantiated on the meta device.

For every supported model type, a config built here is imported with costmodel.hf and our
parameter count must equal the count of the transformers model built from the same config
(tied tensors once). For every bundled spec a transformers family implements, the exported
config must build a model with exactly our count and the spec's published.exact. Layer kinds
(which layers slide) and rotary widths are checked against what transformers derives too.

Needs transformers and torch (the [hf] and [measure] extras; .ci/run installs both).
"""

from __future__ import annotations

import copy

import pytest

from costmodel import catalog, hf
from costmodel.analysis import analyze, count_params
from costmodel.spec import LayerKind
from tests.hf_configs import CLASS_SIZES, CONFIGS, RELEASED, SMALL

# Seconds each (full models, transformers, hypothesis): out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow


torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, CPU build)")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install -e '.[hf]'): the oracle cannot run"
)
transformers.logging.set_verbosity_error()


ENCODERS = {"bert", "roberta", "modernbert", "deberta-v2"}


def build(config: dict, head_class=None):
    """The transformers model with an LM head for `config` (an encoder-only type: its AutoModel,
    or `head_class`), on the meta device (no memory)."""
    kwargs = {k: v for k, v in copy.deepcopy(config).items() if k not in ("model_type", "architectures",
                                                                          "_name_or_path")}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
    auto = transformers.AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else transformers.AutoModelForCausalLM
    if config["model_type"] in ENCODERS:  # counted as AutoModel holds them (BERT's pooler included)
        auto = head_class or transformers.AutoModel
    with torch.device("meta"):
        return cfg, auto.from_config(cfg)


def hf_params(config: dict) -> int:
    """Parameters of the transformers model, each tensor once (model.parameters() dedups ties).

    transformers 5 ties T5's LM head to the shared embedding whatever tie_word_embeddings says
    (the flag now only sets scale_decoder_outputs, huggingface/transformers#42815); the untied
    checkpoints (T5 v1.1) store their own lm_head.weight, which transformers 4 built separately.
    That head is counted here when the config asks for it untied.
    """
    cfg, model = build(config)
    n = sum(p.numel() for p in model.parameters())
    if config["model_type"] == "t5" and config.get("tie_word_embeddings") is False:
        if model.lm_head.weight is model.shared.weight:
            n += model.lm_head.weight.numel()
    return n


def hf_layer_kinds(cfg) -> list[LayerKind] | None:
    """Which layers slide (or attend within chunks, Llama 4), as transformers derives it (None:
    this family has no windows)."""
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        window = getattr(cfg, "sliding_window", None)
        kind = {"sliding_attention": LayerKind.local if window else LayerKind.global_,
                "chunked_attention": LayerKind.chunked}
        return [kind.get(t, LayerKind.global_) for t in types]
    if hasattr(cfg, "sliding_window"):  # mistral, phi3: one window on every layer, or none
        return [LayerKind.local if cfg.sliding_window else LayerKind.global_] * n
    return None


CASES = [(mt, i, cfg) for mt, cfgs in CONFIGS.items() for i, cfg in enumerate(cfgs)]


def test_every_supported_model_type_is_checked():
    """Each model type import-hf supports has a config in this oracle."""
    assert set(CONFIGS) == set(hf.SUPPORTED)


_POST_PROCESSED = {("qwen2", "sliding_window"), ("qwen3", "sliding_window")}


@pytest.mark.parametrize("model_type", sorted(CLASS_SIZES))
def test_class_sizes_are_the_configuration_classes_defaults(model_type):
    """Config 0 of each type states the sizes as the class's defaults: each default, and each
    field a family requires (no default taken), checked against transformers' configuration class."""
    family = hf.FAMILIES[model_type]
    assert set(CLASS_SIZES[model_type]) == set(family.required)
    cfg = transformers.AutoConfig.for_model(model_type)
    for key, value in CLASS_SIZES[model_type].items():
        assert getattr(cfg, key) == value, key
    for key, value in family.defaults.items():
        # None: derived (num_key_value_heads = heads, ...); Qwen's class nulls an unused sliding_window.
        if value is not None and hasattr(cfg, key) and (model_type, key) not in _POST_PROCESSED:
            assert getattr(cfg, key) == value, key


@pytest.mark.parametrize("model_type,i,fields", CASES, ids=[f"{mt}-{i}" for mt, i, _ in CASES])
def test_imported_count_equals_transformers(model_type, i, fields):
    """Imported config: our parameter count equals transformers' count exactly (config 0: all defaults)."""
    config = {"model_type": model_type, **fields}
    spec = hf.spec_from_hf(config, f"<{model_type}-{i}>")
    assert count_params(spec) == hf_params(config)
    cfg, model = build(config)
    kinds = hf_layer_kinds(cfg)
    if kinds is not None:
        assert spec.layer_kinds() == kinds
        if LayerKind.local in kinds:
            # ModernBERT's sliding_window is half its window: keys within it either side
            assert (spec.window // 2 if spec.is_encoder else spec.window) == cfg.sliding_window
        if LayerKind.chunked in kinds:
            assert spec.attention_chunk == cfg.attention_chunk_size


def test_rotary_widths_match_transformers():
    """Partial RoPE: the rotated dimensions per head are those transformers rotates."""
    neox = {"model_type": "gpt_neox", **SMALL, "rotary_pct": 0.5}
    assert hf.spec_from_hf(neox).rotary_dims == build(neox)[1].gpt_neox.layers[0].attention.rotary_ndims
    gptj = {"model_type": "gptj", **CONFIGS["gptj"][1]}
    assert hf.spec_from_hf(gptj).rotary_dims == build(gptj)[1].transformer.h[0].attn.rotary_dim
    phi3 = {"model_type": "phi3", **CONFIGS["phi3"][1]}
    inv_freq = build(phi3)[1].model.rotary_emb.inv_freq
    assert hf.spec_from_hf(phi3).rotary_dims == 2 * inv_freq.numel()


def test_t5_head_scale_follows_transformers():
    """T5's decoder output is scaled before a tied head, and only then (scale_decoder_outputs)."""
    for tied in (True, False):
        config = {"model_type": "t5", **CLASS_SIZES["t5"], "dropout_rate": 0.0, "tie_word_embeddings": tied}
        cfg, _ = build(config)
        assert hf.spec_from_hf(config).head_scale is cfg.scale_decoder_outputs is tied


EXPORTABLE = [n for n in catalog.bundled_names() if not n.startswith("transformer-")]


@pytest.mark.parametrize("name", EXPORTABLE)
def test_bundled_spec_count_equals_transformers(name):
    """Bundled spec, exported to its transformers family: the same count, and published.exact."""
    spec = catalog.load(name)
    export = hf.export_hf(spec)
    ours = count_params(spec)
    assert hf_params(export.config) == ours
    if spec.published and spec.published.exact:
        assert spec.published.exact == ours


# --- FLOPs and KV cache, for the model types added with issue 11 ----------------------------------

NEW_TYPES = ("gpt_bigcode", "starcoder2", "phi", "stablelm", "deepseek_v2", "deepseek_v3")
B, S = 2, 16


def hf_flops_and_kv(config: dict) -> tuple[int, int]:
    """Matmul FLOPs of one forward pass over B x S tokens (eager attention: the dense S x S scores,
    our convention) and the elements the returned KV cache holds, from transformers on meta."""
    from torch.utils.flop_counter import FlopCounterMode

    kwargs = {k: v for k, v in copy.deepcopy(config).items() if k not in ("model_type", "architectures",
                                                                          "_name_or_path")}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
    cfg._attn_implementation = "eager"
    # Sparse layers: grouped_mm (the default) is invisible to FlopCounterMode, batched_mm is counted.
    experts = {"experts_implementation": "batched_mm"} if hf.spec_from_hf(config).moe is not None else {}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, **experts)
    ids = torch.zeros(B, S, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = model(input_ids=ids, use_cache=True)
    kv = sum(layer.keys.numel() + layer.values.numel() for layer in out.past_key_values.layers)
    return counter.get_total_flops(), kv


NEW_CASES = [(mt, i, cfg) for mt in NEW_TYPES for i, cfg in enumerate(CONFIGS[mt])]
NEW_CASES += [(c["model_type"], name, c) for name, c in RELEASED.items()]


@pytest.mark.parametrize("model_type,i,fields", NEW_CASES, ids=[f"{mt}-{i}" for mt, i, _ in NEW_CASES])
def test_new_types_flops_and_kv_equal_transformers(model_type, i, fields):
    """Prefill FLOPs (matmul) and the KV cache after it equal transformers' exactly, and so do the
    parameters (released configs included: phi-2, StarCoder, StarCoder2-3B, Stable LM 2 1.6B)."""
    config = {"model_type": model_type, **fields}
    spec = hf.spec_from_hf(config, f"<{model_type}-{i}>")
    assert count_params(spec) == hf_params(config)
    flops, kv = hf_flops_and_kv(config)
    a = analyze(spec, "prefill", B, S, "bf16")
    assert a.total().flops_matmul == flops
    assert a.total().kv_cache == kv * a.bytes_per_element



# --- multimodal wrappers: the text decoder, as transformers builds it inside the wrapper ----------

WRAPPED = {
    "llava": {"text_config": {"model_type": "llama", **SMALL, "num_key_value_heads": 2}},
    "mistral3": {"text_config": {"model_type": "mistral", **SMALL, "num_key_value_heads": 2,
                                 "sliding_window": None}},
    "gemma3": {"text_config": {"model_type": "gemma3_text", **SMALL, "num_key_value_heads": 2, "head_dim": 16,
                               "sliding_window": 16}},
}


WRAPPED_CASES = [(mt, fields) for mt, fields in WRAPPED.items()] + [
    ("llava", {"text_config": {**WRAPPED["llava"]["text_config"], "tie_word_embeddings": True}}),
    ("mistral3", {**WRAPPED["mistral3"], "tie_word_embeddings": False}),
]


@pytest.mark.parametrize("model_type,fields", WRAPPED_CASES, ids=[f"{mt}-{i}" for i, (mt,
                                                                                      _)
                                                                  in enumerate(WRAPPED_CASES)])
def test_multimodal_text_decoder_count_equals_transformers(model_type, fields):
    """Ours (the text decoder) equals the wrapper's language model plus its LM head, every tensor
    once (tied as the wrapper's tie_word_embeddings, or llava's text_config, says)."""
    config = {"model_type": model_type, **fields}
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(fields))
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    text = {id(p): p.numel() for m in (model.model.language_model, model.lm_head) for p in m.parameters()}
    assert count_params(hf.spec_from_hf(config)) == sum(text.values())


# --- encoder-only task heads (issue 25) ---------------------------------------------------------

_HEADS = [("bert", "mlm"), ("bert", "classification"), ("roberta", "mlm"), ("roberta", "classification"),
          ("deberta-v2", "mlm"), ("deberta-v2", "classification"), ("modernbert", "mlm"),
          ("modernbert", "classification")]


@pytest.mark.parametrize("model_type,head", _HEADS, ids=[f"{m}-{h}" for m, h in _HEADS])
def test_encoder_task_heads_count_as_transformers(model_type, head):
    """head: mlm is the ForMaskedLM class (no pooler; transform, norm, tied decoder with its bias),
    head: classification the ForSequenceClassification class (3 labels), parameter for parameter:
    RoBERTa's RobertaClassificationHead (dense, tanh, out_proj), DeBERTa's ContextPooler and
    classifier, ModernBERT's ModernBertPredictionHead (dense, GELU, a norm) and classifier.
    ModernBERT's config here biases its FFN (mlp_bias) but not its head (classifier_bias)."""
    from costmodel.studies.variants import variant

    config = {"model_type": model_type, **CONFIGS[model_type][1]}
    spec = variant(hf.spec_from_hf(config), {"head": head, **({"n_labels": 3} if head == "classification"
                                                             else {})})
    auto = transformers
    cls = auto.AutoModelForMaskedLM if head == "mlm" else auto.AutoModelForSequenceClassification
    _, model = build({**config, "num_labels": 3}, cls)
    assert count_params(spec) == sum(p.numel() for p in model.parameters())
