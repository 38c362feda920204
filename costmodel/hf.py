"""Hugging Face ``config.json`` <-> Spec, in pure Python (json only; transformers not needed).

Import (``spec_from_hf``, ``load_hf``) reads a config as the transformers implementation of its
``model_type`` reads it: every field that changes a cost is mapped, every field that changes
none is listed (``IGNORED``, with the reason), and anything else is an error, because a field
this module does not know might change a cost. A cost-changing field the spec cannot express,
an unsupported model type or a mixture-of-experts model is one ``SpecError`` line naming the
file, the field and the problem: never a silently wrong number.

Export (``export_hf``) writes the config of a Spec for the model type that implements it, so
that transformers can instantiate the same architecture (the tests' independent oracle for
parameter counts). It re-imports what it wrote and reports every spec field the config could
not carry (``Export.lost``); a lost field that changes the parameter count is an error.

Semantics follow the transformers sources (``models/<type>/configuration_*.py`` and
``modeling_*.py``); defaults are those of the configuration classes, so a hand-written config
that leaves a field out gets what transformers would give it. docs/hf.md has the mapping table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.spec import (
    Activation,
    FIELD_ORDER,
    METADATA,
    Block,
    LayerKind,
    Norm,
    NormPosition,
    Position,
    QKNorm,
    Spec,
    SpecError,
    spec_from_dict,
)

# --- what is supported, and what is not ----------------------------------------------------

MIXTURE_OF_EXPERTS = frozenset({
    "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "dbrx", "jamba",
    "olmoe", "phimoe", "granitemoe", "granitemoeshared", "granitemoehybrid", "jetmoe", "switch_transformers",
    "nllb_moe", "llama4", "llama4_text", "gpt_oss", "minimax", "arctic", "ernie4_5_moe", "glm4_moe", "hunyuan_v1_moe",
    "dots1", "bailing_moe", "flex_olmo", "longcat_flash", "aria_text", "openai-moe",
})
# Fields that only a mixture-of-experts config carries, whatever its model_type says.
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
                  "num_experts_per_tok", "expert_interval", "moe_layer_freq")

# Heads other than a language-model head change the cost (a classifier instead of V logits).
_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")

_GELU = frozenset({"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "gelu_accurate"})
_SILU = frozenset({"silu", "swish"})


# Fields any config may carry that change no cost, and why. docs/hf.md lists them all.
COMMON_IGNORED: dict[str, str] = {
    **dict.fromkeys(("_name_or_path", "_commit_hash", "transformers_version", "model_type", "auto_map",
                     "architectures"), "bookkeeping (architectures is checked for a language-model head)"),
    **dict.fromkeys(("torch_dtype", "dtype", "use_bfloat16"), "element type: chosen with --dtype"),
    **dict.fromkeys(("_attn_implementation", "_attn_implementation_autoset", "attn_implementation"),
                    "attention kernel: the dense count is the convention, the masked count is reported beside it"),
    **dict.fromkeys(("use_cache", "cache_implementation"), "caching is modelled per phase (decode reads the KV cache)"),
    **dict.fromkeys(("return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_return_dict",
                     "tf_legacy_loss", "chunk_size_feed_forward", "problem_type", "finetuning_task",
                     "tokenizer_class", "prefix", "task_specific_params", "id2label", "label2id", "num_labels",
                     "classifier_dropout"), "framework options, or settings of heads other than the LM head"),
    **dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
                     "forced_bos_token_id", "forced_eos_token_id"), "token ids"),
    **dict.fromkeys(("max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
                     "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                     "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
                     "num_return_sequences", "output_scores", "return_dict_in_generate", "remove_invalid_values",
                     "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens"),
                    "generation settings of a request, not of the architecture"),
    **dict.fromkeys(("initializer_range", "initializer_factor", "init_std"), "initialisation only"),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"), "a constant inside the norm"),
    **dict.fromkeys(("rope_theta", "rope_scaling", "rope_parameters", "rotary_emb_base", "rope_local_base_freq",
                     "original_max_position_embeddings"),
                    "RoPE base and scaling change the angles, not the work (partial_rotary_factor inside is read)"),
    "pretraining_tp": "splits each matmul into slices: the same FLOPs",
    "query_pre_attn_scalar": "the value of the score scale, which is counted anyway",
    "reorder_and_upcast_attn": "precision of the score matmul, not its size",
    "relative_attention_max_distance": "the range of the T5 buckets, not their number",
    "is_decoder": "set by the model class itself",
    "gradient_checkpointing": "a legacy training switch transformers no longer reads from a config",
}
_OLD_GPT2_KEYS = {
    "n_ctx": "an old alias transformers does not read (n_positions sizes the table)",
    **dict.fromkeys(("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                     "summary_first_dropout", "summary_last_dropout"),
                    "settings of GPT2DoubleHeadsModel's classification head, not of the LM head"),
}


# --- reading a config ------------------------------------------------------------------------


class _Config:
    """A config.json mapping read as transformers reads it: class defaults for absent fields."""

    def __init__(self, data: dict[str, Any], origin: str, model_type: str, defaults: dict[str, Any]):
        self.data, self.origin, self.model_type, self.defaults = data, origin, model_type, defaults
        self.read: set[str] = set()

    def error(self, field: str, problem: str) -> SpecError:
        return SpecError(f"{self.origin}: {field}: {problem}")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str) -> Any:
        self.read.add(key)
        if key in self.data:
            return self.data[key]
        if key in self.defaults:
            return self.defaults[key]
        raise self.error(key, f"required for model_type {self.model_type}")

    def int(self, key: str, positive: bool = True) -> int | None:
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0):
            raise self.error(key, f"should be a {'positive ' if positive else ''}integer (got {v!r})")
        return v

    def req_int(self, key: str) -> int:
        v = self.int(key)
        if v is None:
            raise self.error(key, "should be a positive integer (got null)")
        return v

    def bool(self, key: str) -> bool:
        v = self.get(key)
        if not isinstance(v, bool):
            raise self.error(key, f"should be true or false (got {v!r})")
        return v

    def float(self, key: str) -> float | None:
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"should be a number (got {v!r})")
        return float(v)

    def rate(self, key: str) -> float:
        v = self.float(key)
        return 0.0 if v is None else v

    def str(self, key: str) -> str:
        v = self.get(key)
        if not isinstance(v, str):
            raise self.error(key, f"should be a string (got {v!r})")
        return v

    def require(self, key: str, expected: Any, why: str) -> None:
        """A field whose other values this tool cannot express."""
        v = self.get(key)
        if v != expected:
            raise self.error(key, f"{json.dumps(v)} is not supported: {why}")


@dataclass(frozen=True)
class Family:
    """How one model_type maps: its class defaults, its mapping, fields it reads but ignores."""

    model_type: str
    architecture: str  # the transformers class with an LM head
    defaults: dict[str, Any]
    read: Callable[[_Config, dict[str, Any]], None]
    ignored: dict[str, str]


def _heads(c: _Config, out: dict[str, Any], heads: str, kv: str | None, head_dim: str | None) -> None:
    """n_heads, n_kv_heads and head_dim (None in a config: d_model / n_heads, as transformers)."""
    d, h = out["d_model"], c.req_int(heads)
    out["n_heads"] = h
    out["n_kv_heads"] = (c.int(kv) if kv else None) or h
    hd = c.int(head_dim) if head_dim else None
    if hd is None:
        if d % h:
            raise c.error(heads, f"hidden size {d} is not divisible by {h} heads, and no head_dim is given")
        hd = d // h
    out["head_dim"] = hd
    if h % out["n_kv_heads"]:
        raise c.error(kv or heads, f"{h} query heads are not a multiple of {out['n_kv_heads']} key/value heads")


def _fixed_head_dim(c: _Config, out: dict[str, Any], heads: str) -> None:
    """Classes that always use hidden_size / heads; a head_dim field there would be ignored."""
    _heads(c, out, heads, None, None)
    if c.has("head_dim") and c.data["head_dim"] not in (None, out["head_dim"]):
        c.read.add("head_dim")
        raise c.error("head_dim", f"{c.model_type} always uses hidden_size / heads = {out['head_dim']}; "
                                  f"{c.data['head_dim']} would be ignored by transformers")
    c.read.add("head_dim")


def _activation(c: _Config, key: str, gated: bool) -> Activation:
    act = c.str(key)
    if act in _GELU:
        return Activation.geglu if gated else Activation.gelu
    if act == "relu":
        return Activation.reglu if gated else Activation.relu
    if act in _SILU and gated:
        return Activation.swiglu
    kind = "gated FFN" if gated else "two-matrix FFN"
    raise c.error(key, f"{act!r} in a {kind} is not supported (the spec has relu, gelu, reglu, geglu, swiglu)")


def _rotary_fraction(c: _Config, *top_level: str) -> float:
    """partial_rotary_factor, wherever this config keeps it (rope_parameters, rope_scaling, top level)."""
    found: dict[str, float] = {}
    for key in ("rope_parameters", "rope_scaling"):
        params = c.data.get(key)
        if isinstance(params, dict):
            groups = [params] + [v for v in params.values() if isinstance(v, dict)]
            for g in groups:
                if "partial_rotary_factor" in g:
                    found[f"{key}.partial_rotary_factor"] = g["partial_rotary_factor"]
    for key in top_level:
        if c.has(key):
            c.read.add(key)
            found[key] = c.data[key]
    values = set(found.values())
    if len(values) > 1:
        raise c.error(", ".join(sorted(found)), f"disagree ({sorted(values)})")
    if not values:
        return float(c.defaults.get(top_level[0], 1.0)) if top_level else 1.0
    (v,) = values
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise c.error(next(iter(found)), f"should be a number in (0, 1] (got {v!r})")
    return float(v)


def _no_partial_rotary(c: _Config) -> None:
    if _rotary_fraction(c, "partial_rotary_factor") != 1.0:
        raise c.error("partial_rotary_factor", f"{c.model_type} rotates the whole head; "
                                               "a partial rotary factor is not supported by its attention")


def _layer_pattern(c: _Config, out: dict[str, Any], types: list[str], window: int | None, field: str) -> None:
    """Per-layer kinds from transformers' layer_types, as the shortest repeating pattern."""
    if len(types) != out["n_layers"]:
        raise c.error(field, f"{len(types)} entries for {out['n_layers']} layers")
    kinds = []
    for t in types:
        if t not in ("full_attention", "sliding_attention"):
            raise c.error(field, f"layer type {t!r} is not supported (full_attention, sliding_attention)")
        kinds.append(LayerKind.local if t == "sliding_attention" and window is not None else LayerKind.global_)
    period = next(p for p in range(1, len(kinds) + 1) if all(kinds[i] == kinds[i % p] for i in range(len(kinds))))
    pattern = kinds[:period]
    if LayerKind.local in pattern:
        out["window"] = window
        out["layer_pattern"] = [k.value for k in pattern]


def _dropout(c: _Config, out: dict[str, Any], residual: str | None, embedding: str | None,
             attention: str | None) -> None:
    """The spec's three dropout rates from the fields of the model's own dropout sites."""
    rates = {site: c.rate(key) if key else 0.0
             for site, key in (("residual", residual), ("embedding", embedding), ("attention", attention))}
    out["dropout"] = rates["residual"]
    if rates["embedding"] != rates["residual"]:
        out["embedding_dropout"] = rates["embedding"]
    if rates["attention"] != rates["residual"]:
        out["attention_dropout"] = rates["attention"]


def _tied(c: _Config, out: dict[str, Any]) -> None:
    out["tied_embeddings"] = c.bool("tie_word_embeddings")


def _no_window(c: _Config, key: str = "sliding_window") -> None:
    if c.has(key) and c.data[key] is not None:
        c.read.add(key)
        raise c.error(key, f"{c.model_type} does not use a sliding window; this value would be ignored")
    c.read.add(key)


# --- the decoder-only families ---------------------------------------------------------------


def _rope_decoder(c: _Config, out: dict[str, Any], act_key: str = "hidden_act") -> None:
    """What LLaMA and its descendants share: RMSNorm, gated FFN, RoPE, GQA, head_dim."""
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    _heads(c, out, "num_attention_heads", "num_key_value_heads", "head_dim")
    out["d_ff"] = c.req_int("intermediate_size")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"] = Norm.rmsnorm.value
    out["activation"] = _activation(c, act_key, gated=True).value
    out["position"] = Position.rope.value
    _tied(c, out)
    _dropout(c, out, None, None, "attention_dropout")


def _attention_bias(c: _Config, out: dict[str, Any], mlp: bool | None = False) -> None:
    """attention_bias puts a bias on q, k, v and o; the FFN's bias is separate (or absent)."""
    b = c.bool("attention_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": bool(mlp), "lm_head": False}


def _llama(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    _attention_bias(c, out, c.bool("mlp_bias"))


def _mistral(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    out["bias"] = False
    if c.has("layer_types"):
        c.read.add("layer_types")
        raise c.error("layer_types", "MistralForCausalLM ignores it and slides every layer (Ministral reads it)")
    window = c.int("sliding_window")
    if window is not None:  # null: full attention on every layer (Mistral 7B v0.2 on)
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]


def _gemma(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    _attention_bias(c, out)
    out["embedding_scale"] = True  # hidden_states * sqrt(hidden_size)
    _causal(c)


def _causal(c: _Config) -> None:
    if c.get("use_bidirectional_attention"):
        raise c.error("use_bidirectional_attention", "bidirectional attention in a decoder is not supported")


def _windows(c: _Config, out: dict[str, Any], default_types: Callable[[int], list[str]]) -> None:
    """layer_types, or the pattern its absence implies, with sliding_window."""
    window = c.int("sliding_window")
    types = c.get("layer_types") if c.has("layer_types") else None
    c.read.add("layer_types")
    if types is None:
        types = default_types(out["n_layers"])
    elif not isinstance(types, list):
        raise c.error("layer_types", f"should be a list (got {types!r})")
    _layer_pattern(c, out, types, window, "layer_types")


def _softcaps(c: _Config, out: dict[str, Any]) -> None:
    for key, field in (("attn_logit_softcapping", "attn_softcap"), ("final_logit_softcapping", "final_softcap")):
        cap = c.float(key)
        if cap is not None:
            out[field] = cap


def _every(n: int | None) -> Callable[[int], list[str]]:
    """Layer types where layer i is global when (i + 1) % n == 0 and slides otherwise."""
    return lambda layers: ["sliding_attention" if (i + 1) % (n or 1) else "full_attention" for i in range(layers)]


def _gemma_sandwich(c: _Config, out: dict[str, Any], every: int | None) -> None:
    """Gemma 2 and 3: sandwich norms, soft-caps, and every n-th layer global."""
    _rope_decoder(c, out, "hidden_activation")
    _no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm_position"] = NormPosition.sandwich.value
    out["embedding_scale"] = True
    _softcaps(c, out)
    _causal(c)
    _windows(c, out, _every(every))


def _gemma2(c: _Config, out: dict[str, Any]) -> None:
    _gemma_sandwich(c, out, 2)  # even layers (0, 2, ...) slide, odd ones attend fully


def _gemma3_text(c: _Config, out: dict[str, Any]) -> None:
    out["qk_norm"] = QKNorm.head.value  # q_norm, k_norm: RMSNorm(head_dim)
    _gemma_sandwich(c, out, c.int("sliding_window_pattern"))  # before layer_types existed


def _qwen(c: _Config, out: dict[str, Any]) -> None:
    """Qwen2 and Qwen3: with use_sliding_window, layers from max_window_layers on slide."""
    if not c.bool("use_sliding_window"):
        c.read.update(("sliding_window", "max_window_layers"))
        if c.has("layer_types") and any(t != "full_attention" for t in c.data["layer_types"] or []):
            c.read.add("layer_types")
            raise c.error("layer_types", "sliding layers, but use_sliding_window is false (no window)")
        c.read.add("layer_types")
        return
    first = c.int("max_window_layers", positive=False)
    _windows(c, out, lambda n: ["sliding_attention" if i >= first else "full_attention" for i in range(n)])


def _qwen2(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    out["bias"] = {"qkv": True}  # q, k, v carry biases; o_proj and the MLP none
    _qwen(c, out)


def _qwen3(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    _attention_bias(c, out)
    out["qk_norm"] = QKNorm.head.value  # RMSNorm(head_dim) on q and k
    _qwen(c, out)


def _olmo2(c: _Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm_position"] = NormPosition.post_sublayer.value  # x + norm(F(x))
    out["qk_norm"] = QKNorm.full.value  # RMSNorm(h * d_h) on q, RMSNorm(k * d_h) on k


def _phi3(c: _Config, out: dict[str, Any]) -> None:
    # Fused qkv_proj and gate_up_proj hold exactly the parameters of separate q, k, v and gate, up.
    _rope_decoder(c, out)
    out["bias"] = False
    if c.has("attention_bias"):  # Phi-3 configs carry it, but Phi3Attention builds no biases
        c.require("attention_bias", False, "Phi3Attention builds its projections without biases")
    fraction = _rotary_fraction(c, "partial_rotary_factor")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    _dropout(c, out, "resid_pdrop", None, "attention_dropout")  # embd_pdrop is read by no layer
    c.read.add("embd_pdrop")
    window = c.int("sliding_window")
    if window is not None:
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]


def _cohere_common(c: _Config, out: dict[str, Any]) -> None:
    """Cohere: one bias-free LayerNorm feeding attention and FFN in parallel; logits scaled."""
    _rope_decoder(c, out)
    _no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm"] = Norm.layernorm.value
    out["bias"]["norm"] = False
    out["block"] = Block.parallel.value
    out["shared_norm"] = True
    scale = c.float("logit_scale")
    if scale is not None:
        out["logit_scale"] = scale


def _cohere(c: _Config, out: dict[str, Any]) -> None:
    _cohere_common(c, out)
    if c.bool("use_qk_norm"):  # LayerNorm over (heads, head_dim): h*d_h and k*d_h weights
        out["qk_norm"] = QKNorm.full.value


def _cohere2(c: _Config, out: dict[str, Any]) -> None:
    _cohere_common(c, out)
    _fixed_head_dim(c, out, "num_attention_heads")
    out["n_kv_heads"] = c.int("num_key_value_heads") or out["n_heads"]
    _windows(c, out, _every(c.int("sliding_window_pattern")))
    # Only sliding layers apply RoPE; full-attention layers carry no positions (NoPE).
    kinds = set(out.get("layer_pattern", [LayerKind.global_.value]))
    if kinds == {LayerKind.global_.value}:
        out["position"] = Position.none.value
    elif LayerKind.global_.value in kinds:
        out["global_nope"] = True


# --- GPT-style families ----------------------------------------------------------------------


def _gpt_sizes(c: _Config, out: dict[str, Any], width: str, layers: str, heads: str, ffn: str,
               positions: str) -> None:
    """The sizes of the GPT-style types: head_dim is always width / heads; a null FFN width is 4d."""
    out["d_model"] = c.req_int(width)
    out["n_layers"] = c.req_int(layers)
    _fixed_head_dim(c, out, heads)
    out["d_ff"] = c.int(ffn) or 4 * out["d_model"]
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int(positions)


def _gpt2(c: _Config, out: dict[str, Any]) -> None:
    _gpt_sizes(c, out, "n_embd", "n_layer", "n_head", "n_inner", "n_positions")
    out["norm"], out["position"] = Norm.layernorm.value, Position.learned.value
    out["activation"] = _activation(c, "activation_function", gated=False).value
    out["bias"] = {"qkv": True, "attn_out": True, "ffn": True}  # every Conv1D has a bias
    _tied(c, out)
    _dropout(c, out, "resid_pdrop", "embd_pdrop", "attn_pdrop")
    c.require("scale_attn_weights", True, "scores without the 1/sqrt(d_h) scale are not modelled")
    c.require("scale_attn_by_inverse_layer_idx", False, "a second, per-layer score scale is not modelled")
    c.require("add_cross_attention", False, "cross-attention in a decoder-only model is not modelled")


def _gptj(c: _Config, out: dict[str, Any]) -> None:
    _gpt_sizes(c, out, "n_embd", "n_layer", "n_head", "n_inner", "n_positions")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = _activation(c, "activation_function", gated=False).value
    out["block"], out["shared_norm"] = Block.parallel.value, True  # ln_1 feeds both branches
    out["bias"] = {"qkv": False, "attn_out": False, "ffn": True, "lm_head": True}
    rotary = c.int("rotary_dim")  # null: the whole head
    if rotary is not None and rotary != out["head_dim"]:
        out["rotary_fraction"] = rotary / out["head_dim"]
    _tied(c, out)
    _dropout(c, out, "resid_pdrop", "embd_pdrop", "attn_pdrop")


def _gpt_neox(c: _Config, out: dict[str, Any]) -> None:
    _gpt_sizes(c, out, "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = _activation(c, "hidden_act", gated=False).value
    b = c.bool("attention_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": True}  # dense_h_to_4h, dense_4h_to_h always biased
    fraction = _rotary_fraction(c, "rotary_pct")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    if c.bool("use_parallel_residual"):  # x + attn(ln1(x)) + mlp(ln2(x)): two norms
        out["block"], out["shared_norm"] = Block.parallel.value, False
    _tied(c, out)
    _dropout(c, out, "hidden_dropout", "hidden_dropout", "attention_dropout")


def _opt(c: _Config, out: dict[str, Any]) -> None:
    _gpt_sizes(c, out, "hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim",
               "max_position_embeddings")
    out["position_offset"] = 2  # OPTLearnedPositionalEmbedding keeps 2 rows past the context
    out["norm"], out["position"] = Norm.layernorm.value, Position.learned.value
    out["activation"] = _activation(c, "activation_function", gated=False).value
    b = c.bool("enable_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": b}
    proj = c.int("word_embed_proj_dim")
    if proj is not None and proj != out["d_model"]:
        raise c.error("word_embed_proj_dim", f"{proj} != hidden_size {out['d_model']}: the project_in and "
                                             "project_out matrices around the stack are not modelled")
    if c.bool("do_layer_norm_before"):
        if c.bool("_remove_final_layer_norm"):
            raise c.error("_remove_final_layer_norm", "a pre-norm stack without its final norm is not modelled")
    else:  # OPT-350m: norm(x + F(x)), no final norm
        out["norm_position"] = NormPosition.post.value
        c.read.add("_remove_final_layer_norm")
    c.require("layer_norm_elementwise_affine", True, "norms without gain and bias are not modelled")
    if c.rate("activation_dropout") > 0:  # earlier OPT code dropped out the FFN hidden activations
        out["ffn_dropout"] = c.rate("activation_dropout")
    if c.rate("layerdrop") > 0:
        raise c.error("layerdrop", "randomly skipped layers in training are not modelled")
    _tied(c, out)
    _dropout(c, out, "dropout", None, "attention_dropout")  # no dropout on the embeddings


def _falcon(c: _Config, out: dict[str, Any]) -> None:
    # Old falcon configs name the width n_embed.
    _gpt_sizes(c, out, "n_embed" if c.has("n_embed") else "hidden_size", "num_hidden_layers",
               "num_attention_heads", "ffn_hidden_size", "max_position_embeddings")
    c.read.add("hidden_size")
    h = out["n_heads"]
    out["norm"] = Norm.layernorm.value
    out["activation"] = _activation(c, "activation", gated=False).value
    b = c.bool("bias")  # query_key_value, dense, dense_h_to_4h, dense_4h_to_h; never lm_head
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": b}
    out["position"] = Position.alibi.value if c.bool("alibi") else Position.rope.value
    if out["position"] == Position.rope.value:
        _no_partial_rotary(c)
    new, parallel = c.bool("new_decoder_architecture"), c.bool("parallel_attn")
    multi_query = c.bool("multi_query")
    kv = c.int("num_kv_heads") or h
    norms = c.int("num_ln_in_parallel_attn")
    if new:  # Falcon 40B/180B: GQA with num_kv_heads, always parallel
        if not parallel:
            raise c.error("parallel_attn", "false with new_decoder_architecture builds norms its forward never uses")
        out["n_kv_heads"] = kv
        out["block"], out["shared_norm"] = Block.parallel.value, (norms or 2) == 1
    else:
        out["n_kv_heads"] = 1 if multi_query else h
        if parallel:  # one input_layernorm feeds both branches
            out["block"], out["shared_norm"] = Block.parallel.value, True
    if out["n_heads"] % out["n_kv_heads"]:
        raise c.error("num_kv_heads", f"{h} heads are not a multiple of {out['n_kv_heads']}")
    _tied(c, out)
    hidden, attention = c.rate("hidden_dropout"), c.rate("attention_dropout")
    if hidden or attention:  # applied once to the summed branches, or to the attention residual
        raise c.error("hidden_dropout" if hidden else "attention_dropout",
                      "Falcon's dropout sites differ from the spec's (one per branch); set it to 0.0 to import")


# --- encoder-decoder -------------------------------------------------------------------------


def _t5(c: _Config, out: dict[str, Any]) -> None:
    out["architecture"] = "encoder-decoder"
    c.require("is_encoder_decoder", True, "T5's encoder-only and decoder-only uses are not modelled")
    out["d_model"] = c.req_int("d_model")
    out["n_encoder_layers"] = c.req_int("num_layers")
    out["n_decoder_layers"] = c.int("num_decoder_layers") or out["n_encoder_layers"]
    out["n_heads"] = c.req_int("num_heads")
    out["head_dim"] = c.req_int("d_kv")  # inner_dim = num_heads * d_kv, whatever d_model is
    out["d_ff"] = c.req_int("d_ff")
    out["vocab_size"] = c.req_int("vocab_size")
    # Relative positions set no hard limit; 512 is T5's pre-training input length (Raffel et al.).
    out["max_seq_len"] = c.req_int("n_positions")
    out["norm"] = Norm.rmsnorm.value  # T5LayerNorm: scale only, no mean, no bias
    out["position"] = Position.t5_relative.value
    out["relative_buckets"] = c.req_int("relative_attention_num_buckets")
    proj = c.str("feed_forward_proj")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise c.error("feed_forward_proj", f"{proj!r} should be ACT or gated-ACT")
    act = {**dict.fromkeys(_GELU, "gelu"), "relu": "relu", **dict.fromkeys(_SILU, "silu")}.get(parts[-1])
    gated = len(parts) == 2
    names = {("relu", False): "relu", ("gelu", False): "gelu", ("relu", True): "reglu",
             ("gelu", True): "geglu", ("silu", True): "swiglu"}
    if (act, gated) not in names:
        raise c.error("feed_forward_proj", f"{proj!r} is not supported (relu, gelu, gated-relu, gated-gelu, gated-silu)")
    out["activation"] = names[(act, gated)]
    out["bias"] = False
    # transformers 4 ties the LM head to the shared embedding only with tie_word_embeddings, and
    # then scales the decoder output by d_model^-1/2 first (Mesh TensorFlow's T5 does the same).
    tied = c.bool("tie_word_embeddings")
    out["tied_embeddings"] = out["head_scale"] = tied
    if c.get("tie_encoder_decoder"):
        raise c.error("tie_encoder_decoder", "encoder and decoder sharing their weights is not modelled")
    # One rate for every dropout site of T5: embeddings, attention probabilities, sub-block
    # outputs, the FFN hidden activations and each stack's final-norm output.
    rate = c.rate("dropout_rate")
    if rate:
        out.update(dropout=rate, ffn_dropout=rate, final_dropout=rate)
    for key in ("dense_act_fn", "is_gated_act"):  # derived from feed_forward_proj by T5Config
        c.read.add(key)


# --- the table ---------------------------------------------------------------------------------

_LLAMA_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                       max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
                       attention_dropout=0.0, mlp_bias=False)

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("llama", "LlamaForCausalLM", _LLAMA_DEFAULTS, _llama, {}),
    Family("mistral", "MistralForCausalLM",
           {**_LLAMA_DEFAULTS, "intermediate_size": 14336, "num_key_value_heads": 8,
            "max_position_embeddings": 4096 * 32, "sliding_window": 4096}, _mistral, {}),
    Family("gemma", "GemmaForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
            "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "tie_word_embeddings": True,
            "use_bidirectional_attention": None}, _gemma,
           {"hidden_activation": "Gemma 1 reads hidden_act; hidden_activation is a leftover of early configs"}),
    Family("gemma2", "Gemma2ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
            "tie_word_embeddings": True, "sliding_window": 4096, "final_logit_softcapping": 30.0,
            "attn_logit_softcapping": 50.0, "use_bidirectional_attention": None}, _gemma2,
           {"hidden_act": "Gemma 2 reads hidden_activation"}),
    Family("gemma3_text", "Gemma3ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
            "tie_word_embeddings": True, "sliding_window": 4096, "final_logit_softcapping": None,
            "attn_logit_softcapping": None, "use_bidirectional_attention": False,
            "sliding_window_pattern": 6}, _gemma3_text,
           {"hidden_act": "Gemma 3 reads hidden_activation"}),
    Family("qwen2", "Qwen2ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768,
            "num_key_value_heads": 32, "use_sliding_window": False, "sliding_window": 4096,
            "max_window_layers": 28}, _qwen2, {"use_mrope": "multimodal RoPE sections: angles only"}),
    Family("qwen3", "Qwen3ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768,
            "num_key_value_heads": 32, "head_dim": 128, "use_sliding_window": False, "sliding_window": 4096,
            "max_window_layers": 28}, _qwen3, {}),
    Family("olmo2", "Olmo2ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 50304}, _olmo2, {}),
    Family("phi3", "Phi3ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
            "max_position_embeddings": 4096, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "sliding_window": None,
            "partial_rotary_factor": 1.0}, _phi3, {}),
    Family("cohere", "CohereForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528,
            "num_hidden_layers": 40, "num_attention_heads": 64, "max_position_embeddings": 8192,
            "tie_word_embeddings": True, "logit_scale": 0.0625, "use_qk_norm": False}, _cohere, {}),
    Family("cohere2", "Cohere2ForCausalLM",
           {**_LLAMA_DEFAULTS, "vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528,
            "num_hidden_layers": 40, "num_attention_heads": 64, "max_position_embeddings": 8192,
            "tie_word_embeddings": True, "logit_scale": 0.0625, "sliding_window": 4096,
            "sliding_window_pattern": 4}, _cohere2,
           dict.fromkeys(("layer_switch", "order_of_interleaved_layers", "position_embedding_type", "rotary_pct",
                          "use_embedding_sharing", "use_gated_activation", "use_parallel_block",
                          "use_parallel_embedding"),
                         "keys of Cohere's own code that transformers' Cohere2 does not read")),
    Family("gpt2", "GPT2LMHeadModel",
           dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                activation_function="gelu_new", resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False, add_cross_attention=False,
                tie_word_embeddings=True), _gpt2, _OLD_GPT2_KEYS),
    Family("gptj", "GPTJForCausalLM",
           dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64,
                n_inner=None, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                tie_word_embeddings=False), _gptj,
           {**_OLD_GPT2_KEYS, "rotary": "not read by transformers (rotary_dim is)",
            "scale_attn_weights": "not read by GPT-J, which always scales the scores"}),
    Family("gpt_neox", "GPTNeoXForCausalLM",
           dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                intermediate_size=24576, hidden_act="gelu", attention_dropout=0.0, hidden_dropout=0.0,
                max_position_embeddings=2048, tie_word_embeddings=False, use_parallel_residual=True,
                attention_bias=True, rotary_pct=0.25), _gpt_neox,
           dict.fromkeys(("attention_probs_dropout_prob", "hidden_dropout_prob"),
                         "early Pythia names transformers' GPT-NeoX does not read")),
    Family("opt", "OPTForCausalLM",
           dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048, do_layer_norm_before=True, _remove_final_layer_norm=False,
                word_embed_proj_dim=None, dropout=0.1, attention_dropout=0.0, num_attention_heads=12,
                activation_function="relu", layerdrop=0.0, activation_dropout=0.0, enable_bias=True, layer_norm_elementwise_affine=True,
                tie_word_embeddings=True), _opt, {}),
    Family("falcon", "FalconForCausalLM",
           dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                num_ln_in_parallel_attn=None, hidden_dropout=0.0, attention_dropout=0.0, num_kv_heads=None,
                alibi=False, new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
                max_position_embeddings=2048, ffn_hidden_size=None, activation="gelu",
                tie_word_embeddings=True), _falcon,
           {"apply_residual_connection_post_layernorm": "a BLOOM flag transformers' Falcon does not read"}),
    Family("t5", "T5ForConditionalGeneration",
           dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
                num_heads=8, relative_attention_num_buckets=32, dropout_rate=0.1, feed_forward_proj="relu",
                is_encoder_decoder=True, tie_word_embeddings=True, tie_encoder_decoder=False, n_positions=512),
           _t5, {"output_past": "the old name of use_cache"}),
)}

SUPPORTED = tuple(FAMILIES)


# --- import ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Imported:
    """A spec's fields from a config, and the config field behind each (for comments)."""

    fields: dict[str, Any]
    model_type: str


def spec_fields_from_hf(data: dict[str, Any], origin: str = "<config>", name: str | None = None) -> Imported:
    """The spec fields (a mapping for ``spec_from_dict``) of a config.json mapping."""
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a config.json is a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise SpecError(f"{origin}: model_type: required, one of {', '.join(SUPPORTED)}")
    if model_type in MIXTURE_OF_EXPERTS or any(k in data for k in _EXPERT_FIELDS):
        raise SpecError(f"{origin}: model_type: {model_type} is a mixture-of-experts model; "
                        "mixture-of-experts is out of scope for now")
    if model_type == "gemma3" and isinstance(data.get("text_config"), dict):
        raise SpecError(f"{origin}: model_type: gemma3 is multimodal (its vision tower is not modelled); "
                        "import its text_config, model_type gemma3_text")
    family = FAMILIES.get(model_type)
    if family is None:
        raise SpecError(f"{origin}: model_type: {model_type!r} is not supported; supported: {', '.join(SUPPORTED)}")
    c = _Config(data, origin, model_type, family.defaults)
    _check_head(c, family)
    out: dict[str, Any] = {"name": name or _name(data, origin), "family": model_type,
                           "source": f"{origin} (Hugging Face config, model_type {model_type})"}
    family.read(c, out)
    _check_common(c)
    unknown = [k for k in data if k not in c.read and k not in COMMON_IGNORED and k not in family.ignored]
    if unknown:
        raise c.error(unknown[0], f"not a field this tool knows for model_type {model_type}: it might change a "
                                  "cost, so it is not ignored (docs/hf.md lists the fields that are)")
    return Imported(out, model_type)


def _check_head(c: _Config, family: Family) -> None:
    archs = c.data.get("architectures")
    if archs is None:
        return
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise c.error("architectures", f"should be a list of class names (got {archs!r})")
    other = [a for a in archs if not a.endswith(_LM_HEADS)]
    if other:
        raise c.error("architectures", f"{other[0]} has a head other than the language-model head "
                                       f"{family.architecture}, which is not modelled")


def _check_common(c: _Config) -> None:
    """Fields every PretrainedConfig carries that would change a cost when set."""
    if c.data.get("quantization_config"):
        raise c.error("quantization_config", "quantised weights are not modelled (the element type is --dtype); "
                                             "remove the field to import the unquantised architecture")
    c.read.add("quantization_config")
    if c.data.get("pruned_heads"):
        raise c.error("pruned_heads", "pruned attention heads are not modelled")
    c.read.add("pruned_heads")
    for key in ("add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder"):
        if c.data.get(key):
            raise c.error(key, "cross-attention or shared encoder-decoder weights are not modelled here")
        c.read.add(key)
    if c.model_type != "t5" and c.data.get("is_encoder_decoder"):
        raise c.error("is_encoder_decoder", f"{c.model_type} is decoder-only")
    c.read.add("is_encoder_decoder")


def _name(data: dict[str, Any], origin: str) -> str:
    """The model's name: its hub id's last part, else the folder of a config.json, else the file."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip("/"):
        return given.rstrip("/").split("/")[-1]
    path = Path(origin)
    if path.stem == "config" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def spec_from_hf(data: dict[str, Any], origin: str = "<config>", name: str | None = None) -> Spec:
    """A Spec from a config.json mapping; SpecError (one line) for anything it cannot express."""
    return spec_from_dict(spec_fields_from_hf(data, origin, name).fields, origin)


def read_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}: malformed JSON: {e.msg}") from None
    return data


def load_hf(path: str | Path, name: str | None = None) -> Spec:
    """Read a Hugging Face config.json file as a Spec."""
    return spec_from_hf(read_config(path), str(path), name)


# --- writing the imported spec as YAML ---------------------------------------------------------

_ORDER = FIELD_ORDER

# Comments beside the written fields: where a value comes from, when it is not obvious.
_COMMENTS = {
    "head_dim": "d_h",
    "position_offset": "rows of the learned position table past max_seq_len",
    "head_scale": "decoder output * d_model^-1/2 before the tied head",
    "global_nope": "full-attention layers apply no RoPE",
    "layer_pattern": "from layer_types (or the pattern that fills them)",
    "embedding_dropout": "embeddings dropped out at another rate",
    "attention_dropout": "attention probabilities dropped out at another rate",
    "ffn_dropout": "dropout on the FFN hidden activations",
    "final_dropout": "dropout after each stack's final norm",
}


def to_yaml(fields: dict[str, Any]) -> str:
    """A spec mapping as YAML, fields in the README's order, with a comment where one helps."""
    lines = []
    for key in sorted(fields, key=_ORDER.index):
        if key == "dropout" and not fields[key]:
            continue  # the default
        value = _yaml_value(fields[key])
        comment = _COMMENTS.get(key)
        lines.append(f"{key}: {value}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def _yaml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(x)}" for k, x in v.items()) + "}"
    if _PLAIN.fullmatch(v) and v.lower() not in _YAML_WORDS:
        return v
    return json.dumps(str(v))  # a JSON string is a valid YAML scalar


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}


# --- export ----------------------------------------------------------------------------------

_UNREADABLE_DROPOUT = {"falcon": ("hidden_dropout", "attention_dropout")}
_METADATA = METADATA


@dataclass(frozen=True)
class Export:
    """A spec as a transformers config: its model_type, the config, and what it could not carry."""

    model_type: str
    config: dict[str, Any]
    lost: tuple[str, ...]  # spec fields (changing no parameter) the config cannot express


def export_hf(spec: Spec) -> Export:
    """The config.json of the transformers model type that implements this spec's architecture.

    Raises SpecError naming the field when no supported model type builds the same parameters.
    """
    model_type = _export_type(spec)
    config = _EXPORTERS[model_type](spec)
    config = {"_name_or_path": spec.name, "model_type": model_type,
              "architectures": [FAMILIES[model_type].architecture], **config}
    # Dropout sites the importer refuses (T5, Falcon) are re-read at 0 and reported as lost.
    probe = {**config, **{k: 0.0 for k in _UNREADABLE_DROPOUT.get(model_type, ())}}
    back = spec_from_hf(probe, f"<{spec.name} as {model_type}>")
    lost = tuple(k for k, v in cost_fields(spec).items() if cost_fields(back).get(k) != v)
    from costmodel.analysis import count_params

    if count_params(back) != count_params(spec):
        raise SpecError(f"{spec.name}: {', '.join(lost) or 'spec'}: no Hugging Face model type among "
                        f"{', '.join(SUPPORTED)} builds these parameters (nearest: {model_type})")
    return Export(model_type, config, lost)


def cost_fields(spec: Spec) -> dict[str, Any]:
    """The fields that set costs, in a canonical form (equal forms of one architecture compare equal)."""
    data = spec.model_dump(mode="json", exclude=set(_METADATA))
    data["layer_pattern"] = [k.value for k in spec.layer_kinds()]
    data["bias"] = {**data["bias"], "norm": spec.norm_bias}
    data["embedding_dropout"] = spec.embedding_dropout_rate
    data["attention_dropout"] = spec.attention_dropout_rate
    if spec.block is Block.serial:
        data.pop("shared_norm")
    return data


def _export_type(spec: Spec) -> str:
    """The model type whose architecture this spec describes (checked by re-import)."""
    if spec.is_encoder_decoder:
        if spec.position is Position.t5_relative:
            return "t5"
        raise SpecError(f"{spec.name}: position: an encoder-decoder with {spec.position.value} positions has no "
                        "Hugging Face model type here (T5, relative positions, is the one supported)")
    if spec.position is Position.learned:
        return "opt" if spec.position_offset or spec.activation is Activation.relu else "gpt2"
    if spec.position is Position.sinusoidal:
        raise SpecError(f"{spec.name}: position: no supported Hugging Face model type has sinusoidal positions")
    if spec.block is Block.parallel:
        if spec.norm is Norm.layernorm and not spec.norm_bias:
            return "cohere2" if spec.window or spec.global_nope else "cohere"
        if not spec.shared_norm and spec.bias.ffn and spec.n_kv_heads == spec.n_heads:
            return "gpt_neox"
        if spec.bias.lm_head or spec.rotary_fraction < 1:
            return "gptj"
        return "falcon"
    if spec.norm_position is NormPosition.sandwich:
        return "gemma3_text" if spec.qk_norm is QKNorm.head else "gemma2"
    if spec.norm_position is NormPosition.post_sublayer:
        return "olmo2"
    if spec.qk_norm is QKNorm.head:
        return "qwen3"
    if spec.bias.qkv and not spec.bias.attn_out:
        return "qwen2"
    if spec.embedding_scale and spec.activation is Activation.geglu:
        return "gemma"
    if spec.rotary_fraction < 1:
        return "phi3"
    if spec.window is not None and set(spec.layer_pattern) == {LayerKind.local}:
        return "mistral"
    return "llama"


def _layer_types(spec: Spec) -> list[str]:
    return ["sliding_attention" if k is LayerKind.local else "full_attention" for k in spec.layer_kinds()]


def _export_rope_decoder(spec: Spec, act: str = "hidden_act") -> dict[str, Any]:
    gate = {Activation.swiglu: "silu", Activation.geglu: "gelu_pytorch_tanh", Activation.reglu: "relu"}
    return {
        "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
        act: gate.get(spec.activation, spec.activation.value), "max_position_embeddings": spec.max_seq_len,
        "tie_word_embeddings": spec.tied_embeddings, "attention_dropout": spec.attention_dropout_rate,
    }


def _export_llama(spec: Spec) -> dict[str, Any]:
    return {**_export_rope_decoder(spec), "attention_bias": spec.bias.qkv, "mlp_bias": spec.bias.ffn}


def _export_mistral(spec: Spec) -> dict[str, Any]:
    return {**_export_rope_decoder(spec), "sliding_window": spec.window}


def _export_gemma(spec: Spec) -> dict[str, Any]:
    return {**_export_rope_decoder(spec), "attention_bias": spec.bias.qkv}


def _export_gemma2(spec: Spec) -> dict[str, Any]:
    return {**_export_rope_decoder(spec, "hidden_activation"), "attention_bias": spec.bias.qkv,
            "sliding_window": spec.window, "layer_types": _layer_types(spec),
            "attn_logit_softcapping": spec.attn_softcap, "final_logit_softcapping": spec.final_softcap}


def _export_qwen(spec: Spec) -> dict[str, Any]:
    out = _export_rope_decoder(spec)
    if spec.qk_norm is QKNorm.head:
        out["attention_bias"] = spec.bias.qkv
    out["use_sliding_window"] = spec.window is not None
    if spec.window is not None:
        out["sliding_window"] = spec.window
        out["layer_types"] = _layer_types(spec)
    return out


def _export_olmo2(spec: Spec) -> dict[str, Any]:
    return {**_export_rope_decoder(spec), "attention_bias": spec.bias.qkv}


def _export_phi3(spec: Spec) -> dict[str, Any]:
    out = _export_rope_decoder(spec)
    out.update(partial_rotary_factor=spec.rotary_fraction, sliding_window=spec.window,
               resid_pdrop=spec.dropout)
    return out


def _export_cohere(spec: Spec) -> dict[str, Any]:
    # Cohere always scales its logits: 1.0 where the spec has no scale (then reported as lost).
    out = {**_export_rope_decoder(spec), "attention_bias": spec.bias.qkv, "logit_scale": spec.logit_scale or 1.0}
    if spec.qk_norm is not QKNorm.none:
        out["use_qk_norm"] = True
    if spec.window is not None or spec.global_nope:
        out.pop("head_dim")
        out.update(sliding_window=spec.window, layer_types=_layer_types(spec))
    return out


def _export_gpt2(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "n_positions": spec.max_seq_len, "n_embd": spec.d_model,
            "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff,
            "activation_function": "gelu_new", "resid_pdrop": spec.dropout,
            "embd_pdrop": spec.embedding_dropout_rate, "attn_pdrop": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_gptj(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "n_positions": spec.max_seq_len, "n_embd": spec.d_model,
            "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff,
            "rotary_dim": spec.rotary_dims, "activation_function": "gelu_new", "resid_pdrop": spec.dropout,
            "embd_pdrop": spec.embedding_dropout_rate, "attn_pdrop": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_gpt_neox(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "num_attention_heads": spec.n_heads, "intermediate_size": spec.d_ff, "hidden_act": "gelu",
            "max_position_embeddings": spec.max_seq_len, "rotary_pct": spec.rotary_fraction,
            "use_parallel_residual": spec.block is Block.parallel, "attention_bias": spec.bias.qkv,
            "hidden_dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_opt(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "ffn_dim": spec.d_ff, "num_attention_heads": spec.n_heads, "max_position_embeddings": spec.max_seq_len,
            "do_layer_norm_before": spec.norm_position is not NormPosition.post,
            "activation_function": spec.activation.value, "enable_bias": spec.bias.qkv,
            "dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
            "activation_dropout": spec.ffn_dropout, "tie_word_embeddings": spec.tied_embeddings}


def _export_falcon(spec: Spec) -> dict[str, Any]:
    gqa = 1 < spec.n_kv_heads < spec.n_heads or not spec.shared_norm
    out = {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
           "num_attention_heads": spec.n_heads, "max_position_embeddings": spec.max_seq_len,
           "ffn_hidden_size": spec.d_ff, "activation": spec.activation.value, "bias": spec.bias.qkv,
           "hidden_dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
           "alibi": spec.position is Position.alibi, "parallel_attn": spec.block is Block.parallel,
           "new_decoder_architecture": gqa, "multi_query": spec.n_kv_heads == 1,
           "tie_word_embeddings": spec.tied_embeddings}
    if gqa:
        out.update(num_kv_heads=spec.n_kv_heads, num_ln_in_parallel_attn=1 if spec.shared_norm else 2)
    return out


def _export_t5(spec: Spec) -> dict[str, Any]:
    proj = {Activation.relu: "relu", Activation.gelu: "gelu", Activation.reglu: "gated-relu",
            Activation.geglu: "gated-gelu", Activation.swiglu: "gated-silu"}[spec.activation]
    return {"vocab_size": spec.vocab_size, "d_model": spec.d_model, "d_kv": spec.head_dim, "d_ff": spec.d_ff,
            "num_layers": spec.n_encoder_layers, "num_decoder_layers": spec.n_decoder_layers,
            "num_heads": spec.n_heads, "relative_attention_num_buckets": spec.relative_buckets,
            "dropout_rate": spec.dropout, "feed_forward_proj": proj, "is_encoder_decoder": True,
            "tie_word_embeddings": spec.tied_embeddings, "n_positions": spec.max_seq_len}


_EXPORTERS: dict[str, Callable[[Spec], dict[str, Any]]] = {
    "llama": _export_llama, "mistral": _export_mistral, "gemma": _export_gemma, "gemma2": _export_gemma2,
    "gemma3_text": _export_gemma2, "qwen2": _export_qwen, "qwen3": _export_qwen, "olmo2": _export_olmo2,
    "phi3": _export_phi3, "cohere": _export_cohere, "cohere2": _export_cohere, "gpt2": _export_gpt2,
    "gptj": _export_gptj, "gpt_neox": _export_gpt_neox, "opt": _export_opt, "falcon": _export_falcon,
    "t5": _export_t5,
}
