"""gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925), as
transformers' modeling_gpt_oss.py builds it: pre-RMSNorm, GQA with biases on q, k, v and o and
one learned sink logit per head, layers alternating a sliding window with full attention
(layer_types), RoPE (YaRN: angles only), and a mixture of experts in every layer.

The FFN (GptOssMLP): a router with a bias (GptOssTopKRouter: the top-k of its logits, then a
softmax over those k, which is the softmax over all E renormalised over the k chosen: norm_topk),
and E experts whose gate_up_proj and down_proj carry biases (expert_bias). The experts apply
their own clamped SwiGLU, gate * sigmoid(alpha * gate) * (up + 1) with gate and up clamped at
swiglu_limit, whatever hidden_act says: counted as SwiGLU (its clamps and +1 are elementwise
work not modelled). The released checkpoints store the experts' weights in MXFP4
(quantization_config): transformers dequantises them, so parameters are counted as elements and
their bytes follow --dtype.
"""

from __future__ import annotations

from typing import Any

from costmodel.hf.families.llama import _rope_trunk
from costmodel.hf.families.moe import _experts
from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, no_partial_rotary, read_layer_pattern
from costmodel.spec import Activation, LayerKind, Norm, NormPosition, QKNorm, Spec


def _gpt_oss(c: Config, out: dict[str, Any]) -> None:
    _rope_trunk(c, out)
    no_partial_rotary(c)
    b = c.bool("attention_bias")  # q, k, v and o_proj; the experts' biases are expert_bias
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": False, "lm_head": False}
    out["attention_sinks"] = True  # GptOssAttention.sinks: one logit per head, always
    window = c.int("sliding_window")
    types = c.list("layer_types")
    if types is None:  # GptOssConfig: even layers (0, 2, ...) slide, odd ones attend fully
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(out["n_layers"])]
    read_layer_pattern(c, out, types, window, "layer_types")
    out["d_ff"] = c.req_int("intermediate_size")  # each expert's width (_experts moves it there)
    out["activation"] = Activation.swiglu.value  # the clamped SwiGLU of GptOssExperts
    ffn = _experts(c, out, "num_local_experts", "intermediate_size", norm_topk=True)
    ffn.update(router_bias=True, expert_bias=True)
    out.pop("_dense_width")


def _export(spec: Spec) -> dict[str, Any]:
    moe = spec.moe
    assert moe is not None
    kinds = spec.layer_kinds()
    return {
        "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": moe.d_ff_expert,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
        "max_position_embeddings": spec.max_seq_len, "tie_word_embeddings": spec.tied_embeddings,
        "attention_dropout": spec.attention_dropout_rate, "attention_bias": spec.bias.qkv,
        "sliding_window": spec.window,
        "layer_types": ["sliding_attention" if k is LayerKind.local else "full_attention" for k in kinds],
        "num_local_experts": moe.n_experts, "num_experts_per_tok": moe.top_k,
        "output_router_logits": moe.aux_loss > 0, "router_aux_loss_coef": moe.aux_loss or 0.001,
    }


def _matches(spec: Spec) -> bool:
    """A gpt-oss block: sinks, biased attention and experts, every layer sparse, nothing shared."""
    moe = spec.moe
    return (moe is not None and spec.attention_sinks and moe.router_bias and moe.expert_bias
            and spec.mla is None and spec.norm is Norm.rmsnorm and spec.norm_position is NormPosition.pre
            and spec.qk_norm is QKNorm.none and spec.attention_chunk is None)


SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
         "max_position_embeddings", "num_local_experts", "num_experts_per_tok")

register(Family(
    "gpt_oss", "GptOssForCausalLM", _gpt_oss,
    dict(num_key_value_heads=8, head_dim=64, sliding_window=128, layer_types=None, tie_word_embeddings=False,
         attention_dropout=0.0, attention_bias=True, output_router_logits=False, router_aux_loss_coef=0.001),
    SIZES,
    {
        "hidden_act": "not read: GptOssExperts applies its own clamped SwiGLU",
        "swiglu_alpha": "a constant of the clamped SwiGLU (the sigmoid's gain), not its size",
        "swiglu_limit": "a constant of the clamped SwiGLU (where gate and up are clamped), not its size",
        "experts_per_token": "OpenAI's own name for num_experts_per_tok, which transformers reads",
        "initial_context_length": "OpenAI's own key (YaRN's original context, in rope_scaling too): angles "
                                  "only",
    },
    export=_export, matches=_matches,
    quantized={"mxfp4": "the experts' weights in 4-bit blocks with shared scales (transformers dequantises "
                        "them): parameters are counted as elements, their bytes at --dtype"},
))
