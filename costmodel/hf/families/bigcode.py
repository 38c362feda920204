"""BigCode's code models: StarCoder (gpt_bigcode: GPT-2 with multi-query attention) and
StarCoder2 (starcoder2: LayerNorm, biased linears, a GELU FFN, GQA, RoPE, one sliding window)."""

from __future__ import annotations

from typing import Any

from costmodel.hf.families.gpt import OLD_GPT2_KEYS, gpt_sizes
from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    Config,
    no_partial_rotary,
    read_activation,
    read_dropout,
    read_heads,
    read_tied,
)
from costmodel.spec import LayerKind, Norm, Position, Spec


def _gpt_bigcode(c: Config, out: dict[str, Any]) -> None:
    gpt_sizes(c, out, "n_embd", "n_layer", "n_head", "n_inner", "n_positions")  # n_inner null: 4d
    out["n_kv_heads"] = 1 if c.bool("multi_query") else out["n_heads"]  # c_attn: d -> d + 2*kv_dim
    out["norm"], out["position"] = Norm.layernorm.value, Position.learned.value
    out["activation"] = read_activation(c, "activation_function", gated=False).value
    out["bias"] = {"qkv": True, "attn_out": True, "ffn": True}  # every nn.Linear but lm_head
    read_tied(c, out)
    read_dropout(c, out, "resid_pdrop", "embd_pdrop", "attn_pdrop")
    c.require("scale_attn_weights", True, "scores without the 1/sqrt(d_h) scale are not modelled")
    c.require("add_cross_attention", False, "cross-attention in a decoder-only model is not modelled")


def _starcoder2(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    read_heads(c, out, "num_attention_heads", "num_key_value_heads", "head_dim")
    out["d_ff"] = c.req_int("intermediate_size")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    no_partial_rotary(c)
    out["activation"] = read_activation(c, "hidden_act", gated=False).value  # c_fc, c_proj
    b = c.bool("use_bias")  # q, k, v, o, c_fc, c_proj; never lm_head
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": b}
    read_tied(c, out)
    # residual_dropout on the attention and MLP outputs, embedding_dropout on the embeddings.
    read_dropout(c, out, "residual_dropout", "embedding_dropout", "attention_dropout")
    window = c.int("sliding_window")  # one window on every layer, or none (null)
    if window is not None:
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]
    # BigCode's own keys, which transformers' Starcoder2 never reads; other values would mean
    # another architecture (an RMSNorm, a gated MLP) that transformers would silently not build.
    if c.has("norm_type"):
        c.require("norm_type", "layer_norm", "Starcoder2 always builds LayerNorms")
    if c.has("mlp_type"):
        c.require("mlp_type", "default", "Starcoder2 always builds a two-matrix MLP")


def _export_gpt_bigcode(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "n_positions": spec.max_seq_len, "n_embd": spec.d_model,
            "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff, "multi_query": True,
            "activation_function": "gelu_pytorch_tanh", "resid_pdrop": spec.dropout,
            "embd_pdrop": spec.embedding_dropout_rate, "attn_pdrop": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_starcoder2(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
            "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
            "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
            "hidden_act": "gelu_pytorch_tanh",
            "max_position_embeddings": spec.max_seq_len, "use_bias": spec.bias.qkv,
            "sliding_window": spec.window,
            "residual_dropout": spec.dropout, "embedding_dropout": spec.embedding_dropout_rate,
            "attention_dropout": spec.attention_dropout_rate, "tie_word_embeddings": spec.tied_embeddings}


def _mqa_learned(spec: Spec) -> bool:  # MHA with learned positions is GPT-2's
    return not spec.is_encoder_decoder and spec.position is Position.learned and spec.n_kv_heads == 1


def _layernorm_rope(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.norm is Norm.layernorm and spec.position is Position.rope


register(Family("gpt_bigcode", "GPTBigCodeForCausalLM", _gpt_bigcode,
                dict(n_inner=None, activation_function="gelu_pytorch_tanh", resid_pdrop=0.1, embd_pdrop=0.1,
                     attn_pdrop=0.1, scale_attn_weights=True, multi_query=True, add_cross_attention=False,
                     tie_word_embeddings=True),
                ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
                {**OLD_GPT2_KEYS,
                 **dict.fromkeys(("attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"),
                                 "precision of the softmax, not its size"),
                 "inference_runner": "a setting of BigCode's own inference code",
                 "max_batch_size": "a setting of BigCode's own inference code",
                 "max_sequence_length": "a setting of BigCode's own inference code",
                 "pad_key_length": "a setting of BigCode's own inference code",
                 "validate_runner_input": "a setting of BigCode's own inference code"},
                export=_export_gpt_bigcode, matches=_mqa_learned))
register(Family("starcoder2", "Starcoder2ForCausalLM", _starcoder2,
                dict(num_key_value_heads=2, head_dim=None, hidden_act="gelu_pytorch_tanh",
                     sliding_window=None,
                     attention_dropout=0.0, residual_dropout=0.0, embedding_dropout=0.0, use_bias=True,
                     tie_word_embeddings=True),
                ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings"),
                export=_export_starcoder2, matches=_layernorm_rope))
