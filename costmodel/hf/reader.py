"""Reading a config.json as transformers reads it: typed field access with the class defaults,
and the helpers the families share (heads, activations, rotary fraction, layer patterns, dropout)."""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Mapping
from typing import Any, cast

from costmodel.spec import Activation, LayerKind, PoolerActivation, SpecError

# --- what is supported, and what is not ----------------------------------------------------

MIXTURE_OF_EXPERTS = frozenset({
    "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "dbrx", "jamba",
    "olmoe", "phimoe", "granitemoe", "granitemoeshared", "granitemoehybrid", "granitemoe_swa", "jetmoe",
    "switch_transformers", "nllb-moe", "nllb_moe", "llama4", "llama4_text", "gpt_oss", "minimax",
    "minimax_m2", "arctic", "ernie4_5_moe", "glm4_moe", "glm4_moe_lite", "hunyuan_v1_moe", "dots1",
    "bailing_moe", "flex_olmo", "longcat_flash", "aria_text", "openai-moe", "deepseek_v32", "kimi_linear",
    "nemotron_h", "lfm2_moe", "cohere2_moe", "exaone_moe", "sarvam_moe", "afmoe", "qwen3_5_moe_text",
})
# Mixture-of-experts types transformers ships that this tool cannot model: the field that holds
# what the spec has no design element for, and what that is (one line, exit 2). Any other type of
# MIXTURE_OF_EXPERTS without a family is refused as "not mapped yet", naming model_type.
_MAMBA = "Mamba (state-space) layers, which are not a design element here"
_ENC_DEC = ("a mixture of experts in an encoder-decoder model: the spec's mixture of experts is "
            "decoder-only")
_MULTIPLIERS = ("scales the embeddings, each residual branch and the logits (embedding_multiplier, "
                "residual_multiplier, logits_scaling): elementwise steps the spec has no field for")
UNMODELLED_MOE: dict[str, tuple[str, str]] = {
    "jamba": ("attn_layer_period", "one layer in attn_layer_period attends; the others are " + _MAMBA
              + " (mamba_d_state, mamba_d_conv, mamba_expand)"),
    "granitemoehybrid": ("layer_types", "its \"mamba\" layers are " + _MAMBA),
    "nemotron_h": ("layers_block_type", "its \"mamba\" blocks are " + _MAMBA),
    "granitemoe": ("residual_multiplier", _MULTIPLIERS),
    "granitemoeshared": ("residual_multiplier", _MULTIPLIERS),
    "granitemoe_swa": ("residual_multiplier", _MULTIPLIERS),
    "jetmoe": ("kv_channels", "JetMoE routes attention heads too (a mixture of attention experts); only "
               "FFN experts are modelled"),
    "phimoe": ("num_experts_per_tok", "PhiMoE routes by SparseMixer (top-2 by two masked softmaxes and a "
               "jitter threshold), a router the spec does not have"),
    "minimax": ("layer_types", "its \"linear_attention\" layers (lightning attention) are not modelled"),
    "qwen3_next": ("layer_types", "its \"linear_attention\" layers (Gated DeltaNet) are not modelled"),
    "kimi_linear": ("layer_types", "its linear-attention layers (Kimi Delta Attention) are not modelled"),
    "lfm2_moe": ("layer_types", "its \"conv\" layers (short convolutions) are not modelled"),
    "deepseek_v32": ("index_topk", "DeepSeek sparse attention (a lightning indexer choosing index_topk keys "
                     "per query) is not modelled"),
    "longcat_flash": ("zero_expert_num", "zero-computation (identity) experts and two attentions per layer "
                      "are not modelled"),
    "switch_transformers": ("is_encoder_decoder", _ENC_DEC),
    "nllb-moe": ("is_encoder_decoder", _ENC_DEC),
    "nllb_moe": ("is_encoder_decoder", _ENC_DEC),
}
# Fields that only a mixture-of-experts config carries, whatever its model_type says.
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
                  "num_experts_per_tok", "expert_interval", "moe_layer_freq")
# The same expert count under the other name (transformers 5 writes both for some families).
EXPERT_TWINS = {"num_local_experts": "num_experts", "num_experts": "num_local_experts"}

# Heads other than a language-model head change the cost (a classifier instead of V logits).
LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")

GELU = frozenset({"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "gelu_accurate"})
SILU = frozenset({"silu", "swish"})


# Fields any config may carry that change no cost, and why. docs/hf.md lists them all.
COMMON_IGNORED: dict[str, str] = {
    **dict.fromkeys(("_name_or_path", "_commit_hash", "transformers_version", "model_type", "auto_map",
                     "architectures"), "bookkeeping (architectures is checked for a language-model head)"),
    **dict.fromkeys(("torch_dtype", "dtype", "use_bfloat16"), "element type: chosen with --dtype"),
    **dict.fromkeys(("_attn_implementation", "_attn_implementation_autoset", "attn_implementation"),
                    "attention kernel: the dense count is the convention, the masked count is reported "
                    "beside it"),
    **dict.fromkeys(("use_cache", "cache_implementation"),
                    "caching is modelled per phase (decode reads the KV cache)"),
    **dict.fromkeys(("return_dict", "output_hidden_states", "output_attentions", "torchscript",
                     "use_return_dict",
                     "tf_legacy_loss", "chunk_size_feed_forward", "problem_type", "finetuning_task",
                     "tokenizer_class", "prefix", "task_specific_params", "id2label", "label2id",
                     "num_labels",
                     "classifier_dropout"), "framework options, or settings of heads other than the LM head"),
    **dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
                     "forced_bos_token_id", "forced_eos_token_id"), "token ids"),
    **dict.fromkeys(("max_length", "min_length", "do_sample", "early_stopping", "num_beams",
                     "num_beam_groups",
                     "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                     "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
                     "bad_words_ids",
                     "num_return_sequences", "output_scores", "return_dict_in_generate",
                     "remove_invalid_values",
                     "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens"),
                    "generation settings of a request, not of the architecture"),
    **dict.fromkeys(("initializer_range", "initializer_factor", "init_std"), "initialisation only"),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"),
                    "a constant inside the norm"),
    **dict.fromkeys(("rope_theta", "rope_scaling", "rope_parameters", "rotary_emb_base",
                     "rope_local_base_freq",
                     "original_max_position_embeddings"),
                    "RoPE base and scaling change the angles, not the work (partial_rotary_factor inside is "
                    "read)"),
    "pretraining_tp": "splits each matmul into slices: the same FLOPs",
    "query_pre_attn_scalar": "the value of the score scale, which is counted anyway",
    "reorder_and_upcast_attn": "precision of the score matmul, not its size",
    "relative_attention_max_distance": "the range of the T5 buckets, not their number",
    "is_decoder": "set by the model class itself",
    "gradient_checkpointing": "a legacy training switch transformers no longer reads from a config",
    # Written by other tools or by the model authors' own code; transformers reads none of them.
    "is_llama_config": "a marker of Hugging Face's conversion scripts (SmolLM2), read by no model class",
    "rope_interleaved": "the layout of RoPE's rotated pairs (SmolLM2's nanotron export): the same work",
    "transformers.js_config": "settings of transformers.js, a JavaScript runtime",
    **dict.fromkeys(("n_special", "predict_special_tokens"),
                    "keys of OpenAI's GPT code (GPT-2 medium) transformers does not read"),
    **dict.fromkeys(("full_attn_mod", "interpolate_factor"),
                    "keys of Microsoft's own Phi-4-mini code that transformers' Phi3 does not read"),
    "_sliding_window_pattern": "written by transformers 5 beside layer_types, which is what it reads back",
    "_attn_implementation_internal": "attention kernel (see attn_implementation)",
}
_OLD_GPT2_KEYS = {
    "n_ctx": "an old alias transformers does not read (n_positions sizes the table)",
    **dict.fromkeys(("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                     "summary_first_dropout", "summary_last_dropout"),
                    "settings of GPT2DoubleHeadsModel's classification head, not of the LM head"),
}


# --- reading a config ------------------------------------------------------------------------


class Abort(Exception):
    """Reading stops: the problems so far are in Config.problems."""


def show(value: Any, limit: int = 60) -> str:
    """A value for an error message: its JSON, cut short (a config may hold a huge list)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Config:
    """A config.json mapping read as transformers reads it: class defaults for absent fields.

    A value of the wrong type is a problem recorded in ``problems``; reading then goes on with
    the class default where there is one (so that every problem is reported at once), else stops.
    """

    def __init__(self, data: dict[str, Any], origin: str, model_type: str, defaults: Mapping[str, Any]):
        self.data, self.origin, self.model_type, self.defaults = data, origin, model_type, defaults
        self.read: set[str] = set()
        self.problems: list[str] = []
        self.warnings: list[str] = []  # lines for stderr: what is read but not counted

    def error(self, field: builtins.str, problem: builtins.str) -> SpecError:
        return SpecError(f"{self.origin}: {field}: {problem}")

    def bad(self, key: builtins.str, problem: builtins.str) -> Any:
        """Record a problem with this field; go on with its class default, or stop."""
        self.problems.append(f"{key}: {problem}")
        if key in self.defaults:
            return self.defaults[key]
        raise Abort

    def has(self, key: builtins.str) -> bool:
        return key in self.data

    def get(self, key: builtins.str) -> Any:
        self.read.add(key)
        if key in self.data:
            return self.data[key]
        if key in self.defaults:
            return self.defaults[key]
        return self.bad(key, f"required for model_type {self.model_type} (no default is taken for a size)")

    def int(self, key: builtins.str, positive: builtins.bool = True) -> builtins.int | None:
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0) or v < 0:
            # bad() gives the class default, an int or None, or stops
            return cast("builtins.int | None", self.bad(key,
                                                        "should be a "
                                                        f"{'positive' if positive else 'non-negative'} "
                                                        f"integer (got {show(v)})"))
        return v

    def req_int(self, key: builtins.str) -> builtins.int:
        v = self.int(key)
        if v is None:
            self.problems.append(f"{key}: should be a positive integer (got null)")
            raise Abort
        return v

    def bool(self, key: builtins.str) -> builtins.bool:
        v = self.get(key)
        if not isinstance(v, bool):
            v = self.bad(key, f"should be true or false (got {show(v)})")
        return bool(v)

    def float(self, key: builtins.str) -> builtins.float | None:
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            v = self.bad(key, f"should be a number (got {show(v)})")
            return None if v is None else float(v)
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            return cast("builtins.float | None", self.bad(key, f"should be a finite number (got {show(v)})"))
        return f

    def rate(self, key: builtins.str) -> builtins.float:
        v = self.float(key)
        if v is not None and not 0 <= v < 1:
            v = self.bad(key, f"should be a rate in [0, 1) (got {show(v)})")
        return 0.0 if v is None else v

    def str(self, key: builtins.str) -> builtins.str:
        v = self.get(key)
        if not isinstance(v, str):
            v = self.bad(key, f"should be a string (got {show(v)})")
        return str(v)

    def list(self, key: builtins.str) -> builtins.list[Any] | None:
        v = self.get(key)
        if v is not None and not isinstance(v, list):
            return cast("builtins.list[Any] | None", self.bad(key, f"should be a list (got {show(v)})"))
        return v

    def require(self, key: builtins.str, expected: Any, why: builtins.str) -> None:
        """A field whose other values this tool cannot express."""
        v = self.get(key)
        if v != expected:
            self.problems.append(f"{key}: {show(v)} is not supported: {why}")


def read_heads(c: Config, out: dict[str, Any], heads: str, kv: str | None, head_dim: str | None) -> None:
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
        raise c.error(kv or heads,
                      f"{h} query heads are not a multiple of {out['n_kv_heads']} key/value heads")


def fixed_head_dim(c: Config, out: dict[str, Any], heads: str) -> None:
    """Classes that always use hidden_size / heads; a head_dim field there would be ignored."""
    read_heads(c, out, heads, None, None)
    if c.has("head_dim") and c.data["head_dim"] not in (None, out["head_dim"]):
        c.read.add("head_dim")
        raise c.error("head_dim", f"{c.model_type} always uses hidden_size / heads = {out['head_dim']}; "
                                  f"{c.data['head_dim']} would be ignored by transformers")
    c.read.add("head_dim")


def read_activation(c: Config, key: str, gated: bool) -> Activation:
    act = c.str(key)
    if act in GELU:
        return Activation.geglu if gated else Activation.gelu
    if act == "relu":
        return Activation.reglu if gated else Activation.relu
    if act in SILU and gated:
        return Activation.swiglu
    kind = "gated FFN" if gated else "two-matrix FFN"
    raise c.error(key,
                  f"{show(act)} in a {kind} is not supported (the spec has relu, gelu, reglu, geglu, swiglu)")


def read_pooler_activation(c: Config, key: str) -> PoolerActivation:
    """The activation after an encoder's pooler dense (DeBERTa's pooler_hidden_act, ModernBERT's
    classifier_activation): GELU in any of transformers' spellings, or tanh."""
    act = c.str(key)
    if act in GELU:
        return PoolerActivation.gelu
    if act == "tanh":
        return PoolerActivation.tanh
    raise c.error(key, f"{show(act)} after the pooler is not supported (the spec has tanh, gelu)")


def read_rotary_fraction(c: Config, *top_level: str) -> float:
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
    for key, v in found.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise c.error(key, f"should be a number in (0, 1] (got {show(v)})")
    values = sorted(set(found.values()))
    if len(values) > 1:
        raise c.error(", ".join(sorted(found)), f"disagree ({', '.join(map(str, values))})")
    if not values:
        return float(c.defaults.get(top_level[0], 1.0)) if top_level else 1.0
    return float(values[0])


def no_partial_rotary(c: Config) -> None:
    if read_rotary_fraction(c, "partial_rotary_factor") != 1.0:
        raise c.error("partial_rotary_factor", f"{c.model_type} rotates the whole head; "
                                               "a partial rotary factor is not supported by its attention")


def read_layer_pattern(c: Config, out: dict[str, Any], types: list[str], window: int | None,
                       field: str) -> None:
    """Per-layer kinds from transformers' layer_types, as the shortest repeating pattern."""
    if len(types) != out["n_layers"]:
        raise c.error(field, f"{len(types)} entries for {out['n_layers']} layers")
    kinds = []
    for t in types:
        if t not in ("full_attention", "sliding_attention"):
            raise c.error(field, f"layer type {show(t)} is not supported (full_attention, sliding_attention)")
        kinds.append(LayerKind.local if t == "sliding_attention" and window is not None
                     else LayerKind.global_)
    pattern = kinds[:_period(kinds)]
    if LayerKind.local in pattern:
        out["window"] = window
        out["layer_pattern"] = [k.value for k in pattern]


def _period(items: list[Any]) -> int:
    """The shortest p with items[i] == items[i % p] for every i, in linear time: n minus the
    longest proper prefix that is also a suffix (the Knuth-Morris-Pratt failure function)."""
    n, border, k = len(items), [0] * len(items), 0
    for i in range(1, n):
        while k and items[i] != items[k]:
            k = border[k - 1]
        if items[i] == items[k]:
            k += 1
        border[i] = k
    return n - border[-1] if n else 1


def read_dropout(c: Config, out: dict[str, Any], residual: str | None, embedding: str | None,
             attention: str | None) -> None:
    """The spec's three dropout rates from the fields of the model's own dropout sites."""
    rates = {site: c.rate(key) if key else 0.0
             for site, key in (("residual", residual), ("embedding", embedding), ("attention", attention))}
    out["dropout"] = rates["residual"]
    if rates["embedding"] != rates["residual"]:
        out["embedding_dropout"] = rates["embedding"]
    if rates["attention"] != rates["residual"]:
        out["attention_dropout"] = rates["attention"]


def read_tied(c: Config, out: dict[str, Any]) -> None:
    out["tied_embeddings"] = c.bool("tie_word_embeddings")


def no_window(c: Config, key: str = "sliding_window") -> None:
    if c.has(key) and c.data[key] is not None:
        c.read.add(key)
        raise c.error(key, f"{c.model_type} does not use a sliding window; this value would be ignored")
    c.read.add(key)


