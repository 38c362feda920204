"""DBRX (Databricks 2024, "Introducing DBRX"; model_type dbrx), as transformers' modeling_dbrx.py
builds it: pre-LayerNorm without a bias (nn.LayerNorm(d, bias=False), norm_1, norm_2, norm_f), GQA
through one fused projection Wqkv (d -> d + 2 kv d_h, no bias: the same weights and FLOPs as
separate q, k and v), RoPE, and a mixture of experts in every layer: a router nn.Linear(d, E)
without a bias, a softmax over all E, the top k, those k divided by their p-norm
(moe_normalize_expert_weights; p = 1 is the renormalisation to sum 1, norm_topk), and E SwiGLU
experts (w1, v1, w2; ffn_act_fn silu).

The sizes sit in two nested sub-configs, attn_config (kv_n_heads, clip_qkv, attn_pdrop) and
ffn_config (ffn_hidden_size, moe_num_experts, moe_top_k, ...); their keys are named in errors as
``attn_config.kv_n_heads``. clip_qkv clamps q, k and v to [-clip, clip] after Wqkv: elementwise
work, not counted (a warning says so); the weights and the matmuls are unchanged. The head is
never tied (DbrxConfig refuses tie_word_embeddings). transformers adds the balance loss, weighted
by ffn_config.moe_loss_weight, only with output_router_logits.
"""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import COMMON_IGNORED, Config, no_partial_rotary, read_activation, show
from costmodel.spec import Norm, Position, Spec

# The sub-config classes' defaults (DbrxAttentionConfig, DbrxFFNConfig, transformers 5.24) for
# the fields that are not sizes; the sizes have none here.
ATTN_DEFAULTS: dict[str, Any] = {"attn_pdrop": 0.0, "clip_qkv": None}
FFN_DEFAULTS: dict[str, Any] = {"ffn_act_fn": None, "moe_jitter_eps": None, "moe_loss_weight": 0.01,
                                "moe_normalize_expert_weights": 1.0}
# Keys of the sub-configs that change no cost, and why.
NESTED_IGNORED: dict[str, str] = {
    "tie_word_embeddings": "a PretrainedConfig default saved into the sub-config; the head is the "
                           "top-level config's",
    "hidden_size": "set from d_model by DbrxConfig",
    "uniform_expert_assignment": "a switch of Databricks' training code that transformers does not read",
}


def _nested(c: Config, key: str, defaults: dict[str, Any]) -> Config:
    """A sub-config read as its own Config, its keys named ``key.field``; problems go to c's."""
    raw = c.get(key)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise c.error(key, f"should be an object (got {show(raw)})")
    sub = Config({f"{key}.{k}": v for k, v in raw.items()}, c.origin, c.model_type,
                 {f"{key}.{k}": v for k, v in defaults.items()})
    sub.problems = c.problems
    return sub


def _unread(sub: Config, c: Config) -> None:
    for name in sub.data:
        field = name.split(".", 1)[1]
        if name not in sub.read and field not in COMMON_IGNORED and field not in NESTED_IGNORED:
            c.warnings.append(f"warning: {c.origin}: {name}: not a field transformers' dbrx reads that this "
                              "tool knows; ignored")


def _dbrx(c: Config, out: dict[str, Any]) -> None:
    out["d_model"] = c.req_int("d_model")
    out["n_layers"] = c.req_int("n_layers")
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int("max_seq_len")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["bias"] = {"qkv": False, "attn_out": False, "ffn": False, "norm": False, "lm_head": False}
    no_partial_rotary(c)
    if c.bool("tie_word_embeddings"):
        raise c.error("tie_word_embeddings", "DbrxConfig refuses a tied head (tie_word_embeddings true)")
    out["tied_embeddings"] = False
    attn, ffn_config = _nested(c, "attn_config", ATTN_DEFAULTS), _nested(c, "ffn_config", FFN_DEFAULTS)
    h, kv = c.req_int("n_heads"), attn.req_int("attn_config.kv_n_heads")
    if out["d_model"] % h:
        raise c.error("n_heads", f"d_model {out['d_model']} is not divisible by {h} heads")
    if h % kv:
        raise c.error("attn_config.kv_n_heads", f"{h} query heads are not a multiple of {kv} key/value heads")
    out["n_heads"], out["n_kv_heads"], out["head_dim"] = h, kv, out["d_model"] // h
    out["dropout"] = c.rate("resid_pdrop")  # after attention and after the FFN, into the residual
    if out["dropout"]:
        out["embedding_dropout"] = 0.0  # emb_pdrop: DbrxModel stores it and never applies it
    c.read.add("emb_pdrop")
    attention_dropout = attn.rate("attn_config.attn_pdrop")
    if attention_dropout != out["dropout"]:
        out["attention_dropout"] = attention_dropout
    if attn.float("attn_config.clip_qkv") is not None:
        c.warnings.append(f"warning: {c.origin}: attn_config.clip_qkv: clamping q, k and v is elementwise "
                          "work this tool does not count; weights and matmuls are as counted")
    act = ffn_config.get("ffn_config.ffn_act_fn") or {"name": "silu"}
    if not isinstance(act, dict) or set(act) != {"name"}:
        raise c.error("ffn_config.ffn_act_fn",
                      f"should be {{\"name\": ...}} without arguments (got {show(act)})")
    gate = Config({"ffn_config.ffn_act_fn.name": act["name"]}, c.origin, c.model_type, {})
    gate.problems = c.problems
    ffn: dict[str, Any] = {
        "kind": "moe", "activation": read_activation(gate, "ffn_config.ffn_act_fn.name", gated=True).value,
        "n_experts": ffn_config.req_int("ffn_config.moe_num_experts"),
        "top_k": ffn_config.req_int("ffn_config.moe_top_k"),
        "d_ff_expert": ffn_config.req_int("ffn_config.ffn_hidden_size"),
    }
    p = ffn_config.float("ffn_config.moe_normalize_expert_weights")
    if p not in (None, 1.0):
        ffn_config.problems.append(f"ffn_config.moe_normalize_expert_weights: {show(p)} is not supported: "
                                   "dividing the top-k weights by a p-norm other than p = 1 is not modelled")
    ffn["norm_topk"] = p == 1.0
    jitter = ffn_config.float("ffn_config.moe_jitter_eps")
    if jitter:
        ffn_config.problems.append(f"ffn_config.moe_jitter_eps: {show(jitter)} is not supported: multiplying "
                                   "the router's inputs by noise in training is not modelled")
    weight = ffn_config.float("ffn_config.moe_loss_weight")
    if c.bool("output_router_logits") and weight:
        ffn["aux_loss"] = weight
    out["ffn"] = ffn
    _unread(attn, c)
    _unread(ffn_config, c)


def _export_dbrx(spec: Spec) -> dict[str, Any]:
    moe = spec.moe
    assert moe is not None
    return {
        "d_model": spec.d_model, "n_heads": spec.n_heads, "n_layers": spec.n_layers,
        "max_seq_len": spec.max_seq_len, "vocab_size": spec.vocab_size, "tie_word_embeddings": False,
        "resid_pdrop": spec.dropout, "emb_pdrop": 0.0,
        # rope_theta changes no cost, but transformers 5.24's DbrxAttention reads it (DBRX's own value).
        "attn_config": {"kv_n_heads": spec.n_kv_heads, "attn_pdrop": spec.attention_dropout_rate,
                        "rope_theta": 500000.0},
        "ffn_config": {"ffn_hidden_size": moe.d_ff_expert, "moe_num_experts": moe.n_experts,
                       "moe_top_k": moe.top_k, "moe_normalize_expert_weights": 1.0 if moe.norm_topk else None,
                       "moe_loss_weight": moe.aux_loss or 0.01,
                       "ffn_act_fn": {"name": "silu"}},
        "output_router_logits": moe.aux_loss > 0,
    }


def _is_dbrx(spec: Spec) -> bool:
    """LayerNorm without a bias, no biases at all, an untied head, every layer sparse, SwiGLU."""
    moe = spec.moe
    return (moe is not None and not spec.is_encoder_decoder and spec.norm is Norm.layernorm
            and not spec.norm_bias and not spec.tied_embeddings and moe.d_ff is None
            and moe.activation.value == "swiglu" and moe.n_shared_experts == 0)


register(Family(
    "dbrx", "DbrxForCausalLM", _dbrx,
    {"tie_word_embeddings": False, "resid_pdrop": 0.0, "emb_pdrop": 0.0, "output_router_logits": False,
     "attn_config": None, "ffn_config": None},
    ("d_model", "n_heads", "n_layers", "max_seq_len", "vocab_size"),
    ignored={"router_aux_loss_coef": "DbrxForCausalLM weighs the balance loss by ffn_config.moe_loss_weight; "
                                     "this top-level field (in the released configs) is not read"},
    export=_export_dbrx, matches=_is_dbrx))
