"""DeepSeek-V2 and DeepSeek-V3 (DeepSeek-AI 2024): multi-head latent attention (q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) before a SwiGLU FFN, RMSNorm, RoPE
on the decoupled rotary dimensions only.

The FFN of a layer is dense before first_k_dense_replace and DeepSeekMoE from there on; a config
whose every layer is dense imports here, the mixture-of-experts layers are the MoE FFN's.
"""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, read_activation, read_dropout, read_tied
from costmodel.spec import Activation, Norm, NormPosition, Position, QKNorm, Spec

#: Fields of the config class that set the routed experts; they cost nothing while every layer is dense.
_EXPERTS = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
            "routed_scaling_factor", "n_group", "topk_group", "topk_method", "norm_topk_prob",
            "output_router_logits", "moe_layer_freq", "aux_loss_alpha", "seq_aux", "scoring_func", "ep_size")


def _mla(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("hidden_size")
    layers = out["n_layers"] = c.req_int("num_hidden_layers")
    h = out["n_heads"] = c.req_int("num_attention_heads")
    kv = c.int("num_key_value_heads")
    if kv is not None and kv != h:
        c.problems.append(f"num_key_value_heads: {kv}: latent attention expands its latent into all {h} heads "
                          "(kv_b_proj); fewer key/value heads are not supported")
    out["attention"] = {
        "kind": "mla", "q_lora_rank": c.int("q_lora_rank"), "kv_lora_rank": c.req_int("kv_lora_rank"),
        "qk_nope_head_dim": c.req_int("qk_nope_head_dim"), "qk_rope_head_dim": c.req_int("qk_rope_head_dim"),
        "v_head_dim": c.req_int("v_head_dim"),
    }
    rope = c.int("head_dim")  # the width transformers builds its rotary tables for
    if rope is not None and rope != out["attention"]["qk_rope_head_dim"]:
        c.problems.append(f"head_dim: {rope}: transformers sizes the rotary tables by head_dim, which must equal "
                          f"qk_rope_head_dim ({out['attention']['qk_rope_head_dim']})")
    c.read.update(("qk_head_dim", "rope_interleave"))  # derived; the layout of the rotated pairs
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"] = Norm.rmsnorm.value
    out["position"] = Position.rope.value
    out["activation"] = read_activation(c, "hidden_act", gated=True).value
    read_tied(c, out)
    read_dropout(c, out, None, None, "attention_dropout")
    b = c.bool("attention_bias")  # q_a_proj, kv_a_proj_with_mqa and o_proj (q_b, kv_b never)
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": c.bool("mlp_bias") if c.model_type == "deepseek_v2" else False}
    first = c.int("first_k_dense_replace", positive=False) or 0
    out["d_ff"] = c.req_int("intermediate_size")
    if first >= layers:  # every layer dense: the experts' fields build nothing
        c.read.update(_EXPERTS)
    else:
        c.problems.append(f"first_k_dense_replace: {first} of {layers} layers dense; the others are "
                          "mixture-of-experts layers (DeepSeekMoE), which this family does not read")


def _export(spec: Spec) -> dict[str, Any]:
    m = spec.mla
    assert m is not None
    return {
        "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_heads, "q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank,
        "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
        "v_head_dim": m.v_head_dim, "head_dim": m.qk_rope_head_dim, "hidden_act": "silu",
        "max_position_embeddings": spec.max_seq_len, "tie_word_embeddings": spec.tied_embeddings,
        "attention_bias": spec.bias.qkv, "attention_dropout": spec.attention_dropout_rate,
        "first_k_dense_replace": spec.n_layers,
    }


def _matches(spec: Spec) -> bool:
    """Latent attention in a pre-RMSNorm SwiGLU decoder, as DeepSeek builds it."""
    return (spec.mla is not None and spec.norm is Norm.rmsnorm and spec.norm_position is NormPosition.pre
            and spec.activation is Activation.swiglu and spec.qk_norm is QKNorm.none
            and spec.window is None and spec.attention_chunk is None and not spec.attention_sinks
            and spec.bias.qkv == spec.bias.attn_out and not spec.bias.lm_head)


SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
         "max_position_embeddings", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_DEFAULTS: dict[str, Any] = dict(num_key_value_heads=None, q_lora_rank=1536, hidden_act="silu", head_dim=None,
                                 tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
                                 mlp_bias=False, first_k_dense_replace=0)

register(Family("deepseek_v2", "DeepseekV2ForCausalLM", _mla, _DEFAULTS, SIZES, export=_export, matches=_matches))
register(Family("deepseek_v3", "DeepseekV3ForCausalLM", _mla,
                {**_DEFAULTS, "first_k_dense_replace": 3, "num_key_value_heads": 128}, SIZES,
                {"num_nextn_predict_layers": "the multi-token-prediction module, which transformers does not build"},
                export=_export, matches=_matches))
