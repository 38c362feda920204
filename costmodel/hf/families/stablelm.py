"""StableLM (3B-4E1T, StableLM 2): LLaMA's SwiGLU and GQA with LayerNorm, partial RoPE and
optional q, k, v biases; serial by default, or GPT-NeoX's parallel residual with one norm."""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    Config,
    read_activation,
    read_dropout,
    read_heads,
    read_rotary_fraction,
    read_tied,
)
from costmodel.spec import Block, Norm, Position, Spec


def _stablelm(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    read_heads(c, out, "num_attention_heads", "num_key_value_heads", None)  # head_dim = d / h always
    out["d_ff"] = c.req_int("intermediate_size")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = read_activation(c, "hidden_act", gated=True).value  # gate, up, down
    out["bias"] = {"qkv": c.bool("use_qkv_bias")}  # o_proj and the MLP never
    fraction = read_rotary_fraction(c, "partial_rotary_factor")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    if c.bool("use_parallel_residual"):  # x + attn(ln1(x)) + mlp(ln1(x)): one norm
        out["block"], out["shared_norm"] = Block.parallel.value, True
    if c.bool("qk_layernorm"):  # StableLM 2 12B: a LayerNorm per head, each with its own weights
        raise c.error("qk_layernorm",
                      "per-head LayerNorms on q and k (one weight set per head) are not modelled")
    read_tied(c, out)
    if c.rate("hidden_dropout"):  # StableLM drops out the MLP output only, not the attention output
        raise c.error("hidden_dropout", "StableLM drops out the FFN branch only; the spec drops out both "
                                        "branches at one rate (set it to 0.0 to import)")
    read_dropout(c, out, None, None, "attention_dropout")


def _export_stablelm(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
            "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
            "num_key_value_heads": spec.n_kv_heads, "hidden_act": "silu",
            "max_position_embeddings": spec.max_seq_len, "partial_rotary_factor": spec.rotary_fraction,
            "use_qkv_bias": spec.bias.qkv, "use_parallel_residual": spec.block is Block.parallel,
            "attention_dropout": spec.attention_dropout_rate, "tie_word_embeddings": spec.tied_embeddings}


def _layernorm_gated_rope(spec: Spec) -> bool:
    return (not spec.is_encoder_decoder and spec.norm is Norm.layernorm and spec.position is Position.rope
            and spec.activation.value.endswith("glu"))


register(Family("stablelm", "StableLmForCausalLM", _stablelm,
                dict(num_key_value_heads=32, hidden_act="silu", tie_word_embeddings=False, use_qkv_bias=False,
                     qk_layernorm=False, use_parallel_residual=False, hidden_dropout=0.0,
                     attention_dropout=0.0,
                     partial_rotary_factor=0.25),
                ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings"),
                export=_export_stablelm, matches=_layernorm_gated_rope))
