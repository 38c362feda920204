"""LLaMA and its descendants: RMSNorm, gated FFN, RoPE, GQA (llama, mistral, gemma 1-3, qwen 2-3,
olmo2, phi3, cohere 1-2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    Config,
    fixed_head_dim,
    no_partial_rotary,
    read_activation,
    read_dropout,
    read_heads,
    read_layer_pattern,
    read_rotary_fraction,
    read_tied,
)
from costmodel.spec import Activation, Block, LayerKind, Norm, NormPosition, Position, QKNorm, Spec


def _rope_trunk(c: Config, out: dict[str, Any]) -> None:
    """What LLaMA's descendants share outside the FFN: sizes, GQA, head_dim, RMSNorm, RoPE, the
    head's tying, attention dropout (gpt_oss and llama4_text read their FFNs their own way)."""
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    read_heads(c, out, "num_attention_heads", "num_key_value_heads", "head_dim")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"], out["position"] = Norm.rmsnorm.value, Position.rope.value
    read_tied(c, out)
    read_dropout(c, out, None, None, "attention_dropout")


def _rope_decoder(c: Config, out: dict[str, Any], act_key: str = "hidden_act") -> None:
    """What LLaMA and its descendants share: RMSNorm, gated FFN, RoPE, GQA, head_dim."""
    _rope_trunk(c, out)
    out["d_ff"] = c.req_int("intermediate_size")
    out["activation"] = read_activation(c, act_key, gated=True).value


def _attention_bias(c: Config, out: dict[str, Any], mlp: bool | None = False) -> None:
    """attention_bias puts a bias on q, k, v and o; the FFN's bias is separate (or absent)."""
    b = c.bool("attention_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": bool(mlp), "lm_head": False}


def _llama(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out, c.bool("mlp_bias"))


def _mistral(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    out["bias"] = False
    if c.has("layer_types"):
        c.read.add("layer_types")
        raise c.error("layer_types",
                      "MistralForCausalLM ignores it and slides every layer (Ministral reads it)")
    window = c.int("sliding_window")
    if window is not None:  # null: full attention on every layer (Mistral 7B v0.2 on)
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]


def _gemma(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["embedding_scale"] = True  # hidden_states * sqrt(hidden_size)
    _causal(c)


def _causal(c: Config) -> None:
    if c.get("use_bidirectional_attention"):
        raise c.error("use_bidirectional_attention", "bidirectional attention in a decoder is not supported")


def _windows(c: Config, out: dict[str, Any], default_types: Callable[[int], list[str]]) -> None:
    """layer_types, or the pattern its absence implies, with sliding_window."""
    window = c.int("sliding_window")
    types = c.list("layer_types") if c.has("layer_types") else None
    c.read.add("layer_types")
    if types is None:
        types = default_types(out["n_layers"])
    read_layer_pattern(c, out, types, window, "layer_types")


def _softcaps(c: Config, out: dict[str, Any]) -> None:
    for key, field in (("attn_logit_softcapping", "attn_softcap"), ("final_logit_softcapping",
                                                                    "final_softcap")):
        cap = c.float(key)
        if cap is not None:
            out[field] = cap


def _every(n: int | None) -> Callable[[int], list[str]]:
    """Layer types where layer i is global when (i + 1) % n == 0 and slides otherwise."""
    return lambda layers: ["sliding_attention" if (i + 1) % (n or 1) else "full_attention" for i
                           in range(layers)]


def _gemma_sandwich(c: Config, out: dict[str, Any], every: int | None) -> None:
    """Gemma 2 and 3: sandwich norms, soft-caps, and every n-th layer global."""
    _rope_decoder(c, out, "hidden_activation")
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm_position"] = NormPosition.sandwich.value
    out["embedding_scale"] = True
    _softcaps(c, out)
    _causal(c)
    _windows(c, out, _every(every))


def _gemma2(c: Config, out: dict[str, Any]) -> None:
    _gemma_sandwich(c, out, 2)  # even layers (0, 2, ...) slide, odd ones attend fully


def _gemma3_text(c: Config, out: dict[str, Any]) -> None:
    out["qk_norm"] = QKNorm.head.value  # q_norm, k_norm: RMSNorm(head_dim)
    _gemma_sandwich(c, out, c.int("sliding_window_pattern"))  # before layer_types existed


def _qwen(c: Config, out: dict[str, Any]) -> None:
    """Qwen2 and Qwen3: with use_sliding_window, layers from max_window_layers on slide."""
    if not c.bool("use_sliding_window"):
        c.read.update(("sliding_window", "max_window_layers"))
        types = c.list("layer_types") if c.has("layer_types") else None
        c.read.add("layer_types")
        if any(t != "full_attention" for t in types or []):
            raise c.error("layer_types", "sliding layers, but use_sliding_window is false (no window)")
        return
    first = c.int("max_window_layers", positive=False)
    if first is None:
        raise c.error("max_window_layers",
                      "should be a non-negative integer with use_sliding_window (got null)")
    _windows(c, out, lambda n: ["sliding_attention" if i >= first else "full_attention" for i in range(n)])


def _qwen2(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    out["bias"] = {"qkv": True}  # q, k, v carry biases; o_proj and the MLP none
    _qwen(c, out)


def _qwen3(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["qk_norm"] = QKNorm.head.value  # RMSNorm(head_dim) on q and k
    _qwen(c, out)


def _olmo2(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm_position"] = NormPosition.post_sublayer.value  # x + norm(F(x))
    out["qk_norm"] = QKNorm.full.value  # RMSNorm(h * d_h) on q, RMSNorm(k * d_h) on k


def _phi3(c: Config, out: dict[str, Any]) -> None:
    # Fused qkv_proj and gate_up_proj hold exactly the parameters of separate q, k, v and gate, up.
    _rope_decoder(c, out)
    out["bias"] = False
    if c.has("attention_bias"):  # Phi-3 configs carry it, but Phi3Attention builds no biases
        c.require("attention_bias", False, "Phi3Attention builds its projections without biases")
    fraction = read_rotary_fraction(c, "partial_rotary_factor")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    read_dropout(c, out, "resid_pdrop", None, "attention_dropout")
    if c.has("embd_pdrop"):  # read by no layer, so no cost; still a rate, or the config is wrong
        c.rate("embd_pdrop")
    c.read.add("embd_pdrop")
    window = c.int("sliding_window")
    if window is not None:
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]


def _cohere_common(c: Config, out: dict[str, Any]) -> None:
    """Cohere: one bias-free LayerNorm feeding attention and FFN in parallel; logits scaled."""
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["norm"] = Norm.layernorm.value
    out["bias"]["norm"] = False
    out["block"] = Block.parallel.value
    out["shared_norm"] = True
    scale = c.float("logit_scale")
    if scale is not None:
        out["logit_scale"] = scale


def _cohere(c: Config, out: dict[str, Any]) -> None:
    _cohere_common(c, out)
    if c.bool("use_qk_norm"):  # LayerNorm over (heads, head_dim): h*d_h and k*d_h weights
        out["qk_norm"] = QKNorm.full.value


def _cohere2(c: Config, out: dict[str, Any]) -> None:
    _cohere_common(c, out)
    fixed_head_dim(c, out, "num_attention_heads")
    out["n_kv_heads"] = c.int("num_key_value_heads") or out["n_heads"]
    _windows(c, out, _every(c.int("sliding_window_pattern")))
    # Only sliding layers apply RoPE; full-attention layers carry no positions (NoPE).
    kinds = set(out.get("layer_pattern", [LayerKind.global_.value]))
    if kinds == {LayerKind.global_.value}:
        out["position"] = Position.none.value
    elif LayerKind.global_.value in kinds:
        out["global_nope"] = True




# --- export ---------------------------------------------------------------------------------


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
    out = {**_export_rope_decoder(spec), "attention_bias": spec.bias.qkv,
           "logit_scale": spec.logit_scale or 1.0}
    if spec.qk_norm is not QKNorm.none:
        out["use_qk_norm"] = True
    if spec.window is not None or spec.global_nope:
        out.pop("head_dim")
        out.update(sliding_window=spec.window, layer_types=_layer_types(spec))
    return out


# --- the families --------------------------------------------------------------------------------

# The sizes: a config that leaves one out is an error naming it (no class default taken).
SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
         "max_position_embeddings")
LLAMA_DEFAULTS: dict[str, Any] = dict(num_key_value_heads=None, head_dim=None, hidden_act="silu",
                                      tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
                                      mlp_bias=False)
_GEMMA = {**LLAMA_DEFAULTS, "num_key_value_heads": 16, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
          "tie_word_embeddings": True, "use_bidirectional_attention": None}
_GEMMA2 = {**LLAMA_DEFAULTS, "num_key_value_heads": 4, "head_dim": 256,
           "hidden_activation": "gelu_pytorch_tanh",
           "tie_word_embeddings": True, "sliding_window": 4096, "use_bidirectional_attention": None}
_QWEN = {**LLAMA_DEFAULTS, "num_key_value_heads": 32, "use_sliding_window": False, "sliding_window": 4096,
         "max_window_layers": 28}
_COHERE = {**LLAMA_DEFAULTS, "tie_word_embeddings": True, "logit_scale": 0.0625}
_COHERE_OWN_KEYS = dict.fromkeys(
    ("layer_switch", "order_of_interleaved_layers", "position_embedding_type", "rotary_pct",
     "use_embedding_sharing",
     "use_gated_activation", "use_parallel_block", "use_parallel_embedding"),
    "keys of Cohere's own code that transformers' Cohere2 does not read")


def _rmsnorm_rope(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.norm is Norm.rmsnorm and spec.position is Position.rope


def _cohere_like(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.block is Block.parallel and spec.norm is Norm.layernorm


register(Family("llama", "LlamaForCausalLM", _llama, LLAMA_DEFAULTS, SIZES, export=_export_llama,
                matches=_rmsnorm_rope))
register(Family("mistral", "MistralForCausalLM", _mistral,
                {**LLAMA_DEFAULTS, "num_key_value_heads": 8, "sliding_window": 4096}, SIZES,
                export=_export_mistral, matches=_rmsnorm_rope))
register(Family("gemma", "GemmaForCausalLM", _gemma, _GEMMA, SIZES,
                {"hidden_activation": "Gemma 1 reads hidden_act; hidden_activation is a leftover of early "
                                      "configs"},
                export=_export_gemma, matches=_rmsnorm_rope))
register(Family("gemma2", "Gemma2ForCausalLM", _gemma2,
                {**_GEMMA2, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}, SIZES,
                {"hidden_act": "Gemma 2 reads hidden_activation"}, export=_export_gemma2,
                matches=_rmsnorm_rope))
register(Family("gemma3_text", "Gemma3ForCausalLM", _gemma3_text,
                {**_GEMMA2, "final_logit_softcapping": None, "attn_logit_softcapping": None,
                 "use_bidirectional_attention": False, "sliding_window_pattern": 6}, SIZES,
                {"hidden_act": "Gemma 3 reads hidden_activation"}, export=_export_gemma2,
                matches=_rmsnorm_rope))
register(Family("qwen2", "Qwen2ForCausalLM", _qwen2, _QWEN, SIZES,
                {"use_mrope": "multimodal RoPE sections: angles only"}, export=_export_qwen,
                matches=_rmsnorm_rope))
register(Family("qwen3", "Qwen3ForCausalLM", _qwen3, {**_QWEN, "head_dim": 128}, SIZES, export=_export_qwen,
                matches=_rmsnorm_rope))
register(Family("olmo2", "Olmo2ForCausalLM", _olmo2, LLAMA_DEFAULTS, SIZES, export=_export_olmo2,
                matches=_rmsnorm_rope))
register(Family("phi3", "Phi3ForCausalLM", _phi3,
                {**LLAMA_DEFAULTS, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "sliding_window": None,
                 "partial_rotary_factor": 1.0}, SIZES, export=_export_phi3, matches=_rmsnorm_rope))
register(Family("cohere", "CohereForCausalLM", _cohere, {**_COHERE, "use_qk_norm": False}, SIZES,
                export=_export_cohere, matches=_cohere_like))
register(Family("cohere2", "Cohere2ForCausalLM", _cohere2,
                {**_COHERE, "sliding_window": 4096, "sliding_window_pattern": 4}, SIZES, _COHERE_OWN_KEYS,
                export=_export_cohere, matches=_cohere_like))
