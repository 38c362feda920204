"""Phi-1, Phi-1.5 and Phi-2 (model_type phi): a parallel block with one LayerNorm, partial RoPE,
biases on every linear and on the LM head (Phi-3 and Phi-4-mini are phi3, in llama.py)."""

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


def _phi(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    read_heads(c, out, "num_attention_heads", "num_key_value_heads", None)  # head_dim = d / h always
    out["d_ff"] = c.req_int("intermediate_size")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = read_activation(c, "hidden_act", gated=False).value  # fc1, fc2
    # x + attn(ln(x)) + mlp(ln(x)): input_layernorm feeds both branches.
    out["block"], out["shared_norm"] = Block.parallel.value, True
    out["bias"] = {"qkv": True, "attn_out": True, "ffn": True, "lm_head": True}
    fraction = read_rotary_fraction(c, "partial_rotary_factor")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    if c.bool("qk_layernorm"):  # LayerNorm(head_dim) with a bias on q and k
        raise c.error("qk_layernorm", "a LayerNorm with a bias on q and k per head is not modelled")
    read_tied(c, out)
    read_dropout(c, out, "resid_pdrop", "embd_pdrop", "attention_dropout")


def _export_phi(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
            "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
            "num_key_value_heads": spec.n_kv_heads, "hidden_act": "gelu_new",
            "max_position_embeddings": spec.max_seq_len, "partial_rotary_factor": spec.rotary_fraction,
            "resid_pdrop": spec.dropout, "embd_pdrop": spec.embedding_dropout_rate,
            "attention_dropout": spec.attention_dropout_rate, "tie_word_embeddings": spec.tied_embeddings}


def _parallel_biased(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.block is Block.parallel and spec.bias.lm_head


register(Family("phi", "PhiForCausalLM", _phi,
                dict(num_key_value_heads=None, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                     hidden_act="gelu_new", tie_word_embeddings=False, qk_layernorm=False,
                     partial_rotary_factor=0.5),
                ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings"),
                export=_export_phi, matches=_parallel_biased))
