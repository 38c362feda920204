"""Mixtures of experts on LLaMA's block: mixtral, qwen2_moe, qwen3_moe, olmoe.

Each reads the dense block as its dense sibling does, then turns the FFN into ``ffn: {kind: moe}``
(costmodel.components.moe): the experts, top-k, the expert width, shared experts and which
layers are sparse, as transformers builds them. transformers adds the load-balancing loss to
the training loss only with output_router_logits, so only then is aux_loss the config's
router_aux_loss_coef.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from costmodel.hf.families.llama import (
    LLAMA_DEFAULTS,
    _attention_bias,
    _export_qwen,
    _export_rope_decoder,
    _qwen,
    _rope_decoder,
)
from costmodel.hf.family import FAMILIES, Family, register
from costmodel.hf.reader import Config, no_partial_rotary
from costmodel.spec import LayerKind, QKNorm, Spec


def _experts(c: Config, out: dict[str, Any], experts: str, width: str, norm_topk: bool | None) -> dict[str,
                                                                                                       Any]:
    """The sparse FFN's common fields; the dense width _rope_decoder read becomes the expert's
    unless `width` names another field."""
    dense = out.pop("d_ff")
    ffn: dict[str, Any] = {
        "kind": "moe", "activation": out.pop("activation"),
        "n_experts": c.req_int(experts), "top_k": c.req_int("num_experts_per_tok"),
        "d_ff_expert": dense if width == "intermediate_size" else c.req_int(width),
    }
    if norm_topk is None:
        ffn["norm_topk"] = c.bool("norm_topk_prob")
    elif norm_topk:
        ffn["norm_topk"] = True
    if c.bool("output_router_logits"):
        coef = c.float("router_aux_loss_coef")
        if coef:
            ffn["aux_loss"] = coef
    else:
        c.read.add("router_aux_loss_coef")
    if c.has("router_jitter_noise") or "router_jitter_noise" in c.defaults:
        c.require("router_jitter_noise", 0.0, "multiplying the inputs by noise in training is not modelled")
    out["ffn"] = ffn
    out["_dense_width"] = dense
    return ffn


def _sparse_step(c: Config, out: dict[str, Any], ffn: dict[str, Any]) -> None:
    """Qwen-MoE: layer i is sparse unless listed in mlp_only_layers and when (i + 1) % step == 0."""
    step = c.req_int("decoder_sparse_step")
    only = c.list("mlp_only_layers") or []
    n = out["n_layers"]
    sparse = [i for i in range(n) if i not in only and (i + 1) % step == 0]
    if len(sparse) < n:
        ffn["moe_layers"], ffn["d_ff"] = sparse, out["_dense_width"]


def _done(out: dict[str, Any]) -> None:
    out.pop("_dense_width")


def _mixtral(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    out["bias"] = False
    window = c.int("sliding_window")
    if window is not None:
        out["window"], out["layer_pattern"] = window, [LayerKind.local.value]
    _experts(c, out, "num_local_experts", "intermediate_size",
             norm_topk=True)  # MixtralTopKRouter renormalises
    _done(out)


def _qwen2_moe(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    out["bias"] = {"qkv": c.bool("qkv_bias")}  # q, k, v (Qwen2MoeAttention); o_proj and experts none
    _qwen(c, out)
    ffn = _experts(c, out, "num_experts", "moe_intermediate_size", norm_topk=None)
    shared = c.int("shared_expert_intermediate_size", positive=False)
    if shared:  # one shared expert, scaled by sigmoid(x w) (Qwen2MoeSparseMoeBlock)
        ffn.update(n_shared_experts=1, d_ff_shared=shared, shared_expert_gate=True)
    _sparse_step(c, out, ffn)
    _done(out)


def _qwen3_moe(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["qk_norm"] = QKNorm.head.value  # RMSNorm(head_dim) on q and k
    _qwen(c, out)
    ffn = _experts(c, out, "num_experts", "moe_intermediate_size", norm_topk=None)
    _sparse_step(c, out, ffn)
    _done(out)


def _olmoe(c: Config, out: dict[str, Any]) -> None:
    _rope_decoder(c, out)
    no_partial_rotary(c)
    _attention_bias(c, out)
    out["qk_norm"] = QKNorm.full.value  # RMSNorm(h * d_h) on q, RMSNorm(k * d_h) on k
    c.require("clip_qkv", None, "clamping q, k and v is not modelled")
    _experts(c, out, "num_experts", "intermediate_size", norm_topk=None)
    _done(out)


SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
         "max_position_embeddings", "num_experts_per_tok")
_MOE = {**LLAMA_DEFAULTS, "output_router_logits": False, "router_aux_loss_coef": 0.001}
_QWEN_MOE = {**_MOE, "use_sliding_window": False, "sliding_window": None, "max_window_layers": 28,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": False}

register(Family("mixtral", "MixtralForCausalLM", _mixtral,
                {**_MOE, "num_key_value_heads": 8, "sliding_window": None, "router_jitter_noise": 0.0},
                (*SIZES, "num_local_experts")))
register(Family("qwen2_moe", "Qwen2MoeForCausalLM", _qwen2_moe,
                {**_QWEN_MOE, "num_key_value_heads": 16, "qkv_bias": True,
                 "shared_expert_intermediate_size": 5632},
                (*SIZES, "num_experts", "moe_intermediate_size")))
register(Family("qwen3_moe", "Qwen3MoeForCausalLM", _qwen3_moe, {**_QWEN_MOE, "num_key_value_heads": 4},
                (*SIZES, "num_experts", "moe_intermediate_size")))
register(Family("olmoe", "OlmoeForCausalLM", _olmoe,
                {**_MOE, "num_key_value_heads": None, "clip_qkv": None, "norm_topk_prob": False,
                 "router_aux_loss_coef": 0.01}, (*SIZES, "num_experts")))


# --- export ---------------------------------------------------------------------------------


def _export_experts(spec: Spec, experts: str, width: str) -> dict[str, Any]:
    moe = spec.moe
    assert moe is not None
    out = _export_rope_decoder(spec)
    out.update({experts: moe.n_experts, "num_experts_per_tok": moe.top_k, width: moe.d_ff_expert,
                "output_router_logits": moe.aux_loss > 0, "router_aux_loss_coef": moe.aux_loss or 0.001})
    if width != "intermediate_size" and moe.d_ff is not None:
        out["intermediate_size"] = moe.d_ff
    return out


def _export_mixtral(spec: Spec) -> dict[str, Any]:
    return {**_export_experts(spec, "num_local_experts", "intermediate_size"), "sliding_window": spec.window}


def _export_qwen_moe(spec: Spec) -> dict[str, Any]:
    moe = spec.moe
    assert moe is not None
    out = {**_export_qwen(spec), **_export_experts(spec, "num_experts", "moe_intermediate_size")}
    out["norm_topk_prob"] = moe.norm_topk
    sparse = spec.sparse_layers()
    out["mlp_only_layers"] = [i for i, s in enumerate(sparse) if not s]
    out["decoder_sparse_step"] = 1
    if moe.n_shared_experts:
        out["shared_expert_intermediate_size"] = moe.shared_width
        out["qkv_bias"] = spec.bias.qkv
    return out


def _export_olmoe(spec: Spec) -> dict[str, Any]:
    moe = spec.moe
    assert moe is not None
    return {**_export_experts(spec, "num_experts", "intermediate_size"), "attention_bias": spec.bias.qkv,
            "norm_topk_prob": moe.norm_topk}


def _is_moe(spec: Spec) -> bool:
    return spec.moe is not None and not spec.is_encoder_decoder


for _type, _export in (("mixtral", _export_mixtral), ("qwen2_moe", _export_qwen_moe), ("qwen3_moe",
                                                                                       _export_qwen_moe),
                       ("olmoe", _export_olmoe)):
    FAMILIES[_type] = replace(FAMILIES[_type], export=_export, matches=_is_moe)
