"""DeepSeek-V2 and DeepSeek-V3 (DeepSeek-AI 2024): multi-head latent attention (q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) before a SwiGLU FFN, RMSNorm, RoPE
on the decoupled rotary dimensions only.

The FFN of a layer is dense (``intermediate_size``) before ``first_k_dense_replace`` and
DeepSeekMoE from there on (Dai et al. 2024; ``DeepseekV2Moe``, ``DeepseekV3MoE``):
``n_routed_experts`` experts of ``moe_intermediate_size``, ``num_experts_per_tok`` per token,
``n_shared_experts`` shared experts built as one MLP of ``n_shared_experts *
moe_intermediate_size`` (with ``mlp_bias`` in V2, as the dense layers), and the router's weight
kept in fp32 (``_keep_in_fp32_modules_strict``). transformers makes every layer from
``first_k_dense_replace`` on sparse and never reads ``moe_layer_freq``, so only 1 is accepted.

What transformers runs, read as such: V2 scores by softmax and never renormalises the K weights
(its router ignores ``norm_topk_prob``); V3 scores by sigmoid and renormalises when
``norm_topk_prob``. A ``scoring_func`` other than that class's is refused. The routing details
``topk_method``, ``n_group``, ``topk_group`` (which experts a token may pick, not how many) and
``routed_scaling_factor`` (the K weights times a constant) add no parameter, matmul or cache; V3's
``e_score_correction_bias`` (E per sparse layer, chosen-expert bias of the auxiliary-loss-free
balancing) is a buffer in transformers, not a parameter. Neither class adds a load-balancing
loss, so ``aux_loss_alpha`` and ``seq_aux`` (DeepSeek's own training code) cost nothing here.
"""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, read_activation, read_dropout, read_tied
from costmodel.spec import Activation, Norm, NormPosition, Position, QKNorm, Scoring, Spec

#: Fields of the config class that set the routed experts; they cost nothing while every layer is dense.
_EXPERTS = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
            "routed_scaling_factor", "n_group", "topk_group", "topk_method", "norm_topk_prob",
            "output_router_logits", "moe_layer_freq", "aux_loss_alpha", "seq_aux", "scoring_func", "ep_size")
#: Read with the sparse layers, changing no parameter, matmul or cache (see the module docstring).
_ROUTING = ("routed_scaling_factor", "n_group", "topk_group", "topk_method", "output_router_logits",
            "aux_loss_alpha", "seq_aux", "ep_size")
#: The scores each class computes, whatever scoring_func says (DeepseekV2TopkRouter, DeepseekV3TopkRouter).
_SCORING = {"deepseek_v2": Scoring.softmax, "deepseek_v3": Scoring.sigmoid}


def _mla(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("hidden_size")
    layers = out["n_layers"] = c.req_int("num_hidden_layers")
    h = out["n_heads"] = c.req_int("num_attention_heads")
    kv = c.int("num_key_value_heads")
    if kv is not None and kv != h:
        c.problems.append(f"num_key_value_heads: {kv}: latent attention expands its latent into all {h} "
                          "heads "
                          "(kv_b_proj); fewer key/value heads are not supported")
    out["attention"] = {
        "kind": "mla", "q_lora_rank": c.int("q_lora_rank"), "kv_lora_rank": c.req_int("kv_lora_rank"),
        "qk_nope_head_dim": c.req_int("qk_nope_head_dim"), "qk_rope_head_dim": c.req_int("qk_rope_head_dim"),
        "v_head_dim": c.req_int("v_head_dim"),
    }
    rope = c.int("head_dim")  # the width transformers builds its rotary tables for
    if rope is not None and rope != out["attention"]["qk_rope_head_dim"]:
        c.problems.append(f"head_dim: {rope}: transformers sizes the rotary tables by head_dim, which must "
                          "equal "
                          f"qk_rope_head_dim ({out['attention']['qk_rope_head_dim']})")
    c.read.update(("qk_head_dim", "rope_interleave"))  # derived; the layout of the rotated pairs
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"] = Norm.rmsnorm.value
    out["position"] = Position.rope.value
    activation = read_activation(c, "hidden_act", gated=True).value
    read_tied(c, out)
    read_dropout(c, out, None, None, "attention_dropout")
    b = c.bool("attention_bias")  # q_a_proj, kv_a_proj_with_mqa and o_proj (q_b, kv_b never)
    # mlp_bias (V2): the dense layers' and the shared experts' linears (DeepseekV2MLP); routed
    # experts have none.
    out["bias"] = {"qkv": b, "attn_out": b,
                   "ffn": c.bool("mlp_bias") if c.model_type == "deepseek_v2" else False}
    first = c.int("first_k_dense_replace", positive=False) or 0
    dense = c.req_int("intermediate_size")
    if first >= layers:  # every layer dense: the experts' fields build nothing
        out["activation"], out["d_ff"] = activation, dense
        c.read.update(_EXPERTS)
    else:
        out["ffn"] = _deepseek_moe(c, activation, first, dense)


def _deepseek_moe(c: Config, activation: str, first: int, dense: int) -> dict[str, Any]:
    """The sparse FFN of the layers from `first` on (DeepseekV2Moe, DeepseekV3MoE)."""
    shared = c.int("n_shared_experts", positive=False)
    if shared is None:
        c.problems.append("n_shared_experts: null: transformers builds the shared experts from it; give 0 "
                          "for none")
    c.require("moe_layer_freq", 1, "transformers makes every layer from first_k_dense_replace on sparse "
                                   "(DeepSeek's own code would make every n-th one)")
    scoring = _SCORING[c.model_type]
    c.require("scoring_func", scoring.value, f"transformers' {c.model_type} router scores by {scoring.value}")
    norm_topk = c.bool("norm_topk_prob") and scoring is Scoring.sigmoid  # V2's router never renormalises
    c.read.update(_ROUTING)
    ffn: dict[str, Any] = {  # the sizes first: a missing one is named before V2's null top-k default
        "kind": "moe", "activation": activation, "n_experts": c.req_int("n_routed_experts"),
        "d_ff_expert": c.req_int("moe_intermediate_size"), "top_k": c.req_int("num_experts_per_tok"),
        "n_shared_experts": shared or 0, "scoring": scoring.value, "norm_topk": norm_topk,
        "router_dtype": "fp32",  # gate.weight in _keep_in_fp32_modules_strict
    }
    if first:
        ffn.update(first_k_dense=first, d_ff=dense)
    return ffn


def _export(spec: Spec) -> dict[str, Any]:
    m = spec.mla
    assert m is not None
    out = {
        "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "intermediate_size": spec.d_ff,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_heads, "q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank,
        "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
        "v_head_dim": m.v_head_dim, "head_dim": m.qk_rope_head_dim, "hidden_act": "silu",
        "max_position_embeddings": spec.max_seq_len, "tie_word_embeddings": spec.tied_embeddings,
        "attention_bias": spec.bias.qkv, "attention_dropout": spec.attention_dropout_rate,
        "first_k_dense_replace": spec.n_layers,
    }
    if spec.bias.ffn:  # V2 only
        out["mlp_bias"] = True
    moe = spec.moe
    if moe is not None:
        out.update(first_k_dense_replace=moe.first_k_dense, n_routed_experts=moe.n_experts,
                   num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.d_ff_expert,
                   n_shared_experts=moe.n_shared_experts, norm_topk_prob=moe.norm_topk,
                   scoring_func=moe.scoring.value, moe_layer_freq=1)
        if moe.scoring is Scoring.sigmoid:  # one group: every expert may be chosen
            out.update(n_group=1, topk_group=1)
    return out


def _matches(spec: Spec) -> bool:
    """Latent attention in a pre-RMSNorm SwiGLU decoder, as DeepSeek builds it; a sparse FFN
    as DeepSeekMoE builds it (the sparse layers last, shared experts of the expert width, the
    router in fp32, nothing else added)."""
    moe = spec.moe
    return (spec.mla is not None and spec.norm is Norm.rmsnorm and spec.norm_position is NormPosition.pre
            and spec.activation is Activation.swiglu and spec.qk_norm is QKNorm.none
            and spec.window is None and spec.attention_chunk is None and not spec.attention_sinks
            and spec.bias.qkv == spec.bias.attn_out and not spec.bias.lm_head
            and (moe is None or (moe.moe_layers is None and moe.moe_every == 1 and moe.router_dtype == "fp32"
                                 and moe.d_ff_shared in (None, moe.d_ff_expert) and not moe.shared_expert_gate
                                 and not moe.router_bias and not moe.expert_bias and moe.capacity_factor
                                 is None)))


SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
         "max_position_embeddings", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
         "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
_DEFAULTS: dict[str, Any] = dict(num_key_value_heads=None, q_lora_rank=1536, hidden_act="silu", head_dim=None,
                                 tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
                                 mlp_bias=False, first_k_dense_replace=0, n_shared_experts=2,
                                 moe_layer_freq=1,
                                 scoring_func="softmax", norm_topk_prob=False, routed_scaling_factor=1.0,
                                 topk_method="greedy", n_group=None, topk_group=None,
                                 output_router_logits=False)

register(Family("deepseek_v2", "DeepseekV2ForCausalLM", _mla, _DEFAULTS, SIZES, export=_export,
                matches=_matches))
register(Family("deepseek_v3", "DeepseekV3ForCausalLM", _mla,
                {**_DEFAULTS, "first_k_dense_replace": 3, "num_key_value_heads": 128, "n_shared_experts": 1,
                 "scoring_func": "sigmoid", "norm_topk_prob": True, "routed_scaling_factor": 2.5,
                 "n_group": 8,
                 "topk_group": 4, "topk_method": "noaux_tc"}, SIZES,
                {"num_nextn_predict_layers": "the multi-token-prediction module, which transformers does not "
                                             "build",
                 "num_mtp_layers": "transformers' name for num_nextn_predict_layers (not built)"},
                export=_export, matches=_matches))
