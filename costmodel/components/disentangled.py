"""DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", section 3.1; DeBERTa-v3, He et al. 2023), as transformers'
``DisentangledSelfAttention`` runs it with ``share_att_key`` (every released v2 and v3 model).

The stack holds one table of 2k relative-position embeddings (k = ``position_buckets``, or
``max_relative_positions`` when there are no buckets), normalised once per pass. Every layer
then projects the whole table through its own query and key projections (the weights of q
and k, shared), whatever the sequence length: 2 x 2 x 2k x d x h d_h FLOPs per layer, which at
deberta-v3-base's 2k = 512 and a 128-token sequence is as much work as the layer's FFN. The
scores gain two terms, content-to-position (c2p: the queries against the projected keys) and
position-to-content (p2c: the keys against the projected queries), each a batched matmul of
B h S x d_h by d_h x 2k, gathered at each (query, key) pair's relative bucket, divided by
sqrt(3 d_h) and added to the scores (2 FLOPs per score element each). The table's projections
run once per layer, not per sequence: transformers repeats them over the batch (a copy).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from costmodel.components.element import Choose, Element, Symbol
from costmodel.components.loss import dropout
from costmodel.components.norm import norm_of_kept
from costmodel.components.scores import Shape
from costmodel.cost import Cost, Dims, gemm, linear, runs
from costmodel.spec import Position, QKNorm, Spec
from costmodel.symbols import ID_BYTES

TERM_FLOPS = 2  # per score element: divide by sqrt(3 d_h), add to the scores


def table(spec: Spec, dims: Dims, tokens: Any) -> list[tuple[str, Cost]]:
    """The stack's own leaves: the 2k x d relative-position table and its norm (once per pass).
    The norm's input is a weight, not an activation: it keeps only its statistics for backward
    (and, an RMSNorm, its fp32 upcast of the table, unless the table is fp32 already)."""
    params = dims.n_rel * dims.d
    read = dims.p * params * runs(tokens)
    return [("relative_positions", Cost(params=params, factored=dims.n_rel + dims.d, weights_read=read,
                                        bytes_unfused=read)),
            ("relative_norm", norm_of_kept(spec, dims, dims.n_rel * runs(tokens), dims.d))]


def kept_once(spec: Spec, q_len: Any, p: int, full: bool) -> dict[str, Any]:
    """What a stack keeps for backward once, for all its layers (``runtime.memory``): the
    normalised table every layer projects (when no layer drops it out first: then each layer
    keeps its own dropped copy, ``rel_q``; under full recompute it is an input of every
    checkpointed layer, kept once), and the two q_len x q_len int64 bucket indices that c2p and
    p2c gather at (computed by the first layer; none under full recompute)."""
    table = p * 2 * spec.relative_span * spec.d_model if full or spec.dropout == 0 else 0
    return {"relative_table": table, "relative_indices": 0 if full else 2 * ID_BYTES * q_len * q_len}


def _projection(spec: Spec, dims: Dims, saves: bool) -> Cost:
    """The table through one of the layer's projections: its weights are q's or k's (no
    parameters of its own, already read by them in a fused pass)."""
    c = linear(dims.n_rel, dims.d, dims.h * dims.d_h, spec.bias.qkv, dims.p, saves_input=saves)
    return replace(c, params=0, matrices=0, factored=0, weights_read=0,
                   bytes_unfused=c.bytes_unfused - c.weights_read + dims.p * dims.d * dims.h * dims.d_h)


def _term(spec: Spec, dims: Dims, shape: Shape) -> Cost:
    """c2p or p2c: B h q_len x d_h by d_h x 2k, gathered to q_len x span, scaled and added."""
    B, h, d_h, p = dims.B, dims.h, dims.d_h, dims.p
    full = B * h * shape.q_len * dims.n_rel  # the product before the gather
    scores = B * h * shape.q_len * shape.span
    return Cost(
        matmul=2 * d_h * full,
        matmul_eff=2 * d_h * full,
        other=TERM_FLOPS * scores,
        # read the content side and the projected table (repeated over the batch), write the
        # product; the gather reads it at the buckets' indices and writes the scores' size; the
        # scale and the add read and write them.
        bytes_unfused=p * (B * h * shape.q_len * d_h + B * h * dims.n_rel * d_h + full)
        + (p + ID_BYTES) * scores + p * scores + p * 5 * scores,
        gemms=(gemm(B * h, shape.q_len, d_h, dims.n_rel),),
        saved=_kept(spec, dims, shape),
    )


def _kept(spec: Spec, dims: Dims, shape: Shape) -> Any:
    """What c2p or p2c keeps for backward, as PyTorch's batched matmul and gather keep it: the
    product the gather reads (B h q_len 2k), and the matmul's operands batched over B x h:
    the content side is a copy out of its heads' layout only when B, h and q_len all exceed 1
    and no per-head QK-norm has laid it out head-major already (otherwise a view of the tensor
    the content scores keep already); the table side is
    repeated over the batch (a copy, as transformers' ``.repeat``) unless h or B is 1. The
    bucket indices are the stack's (``kept_once``). Symbolic sizes count the general case."""
    B, h, d_h, p = dims.B, dims.h, dims.d_h, dims.p
    copied = _over_one(B, h, shape.q_len) and spec.qk_norm is not QKNorm.head
    content = B * h * shape.q_len * d_h if copied else 0
    table = dims.n_rel * h * d_h * (B if _over_one(h) else 1)
    return p * (content + table + B * h * shape.q_len * dims.n_rel)


def _over_one(*sizes: Any) -> bool:
    return all(not isinstance(n, int) or n > 1 for n in sizes)


def leaves(spec: Spec, dims: Dims, shape: Shape) -> list[tuple[str, Cost]]:
    """The per-layer leaves of disentangled attention, beside the content scores. In training
    each layer first drops out the table at the hidden rate (transformers' ``pos_dropout``,
    ``DisentangledSelfAttention.forward``); its projections then keep that layer's copy."""
    dropped = spec.dropout > 0
    out = [("rel_q", _projection(spec, dims, saves=dropped)), ("rel_k", _projection(spec, dims, saves=False)),
           ("c2p", _term(spec, dims, shape)), ("p2c", _term(spec, dims, shape))]
    return ([("rel_dropout", dropout(dims, dims.n_rel * dims.d))] if dropped else []) + out


# --- the element ------------------------------------------------------------------------------


def label(spec: Spec) -> str | None:
    if spec.position is not Position.disentangled:
        return None
    buckets = f", {spec.position_buckets} buckets" if spec.position_buckets else ""
    return f"disentangled, 2k={2 * spec.relative_span}{buckets}"


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    if data.get("position") != "disentangled":
        return
    data["n_kv_heads"] = data["n_heads"]  # DeBERTa is multi-head: the table goes through k for every head
    data["position_buckets"] = choose([0, 4, 8])
    data["max_relative_positions"] = choose([3, 16])


ELEMENTS = (
    Element(
        "disentangled attention", ("position_buckets", "max_relative_positions"),
        describe=label, choices=(("relative table", lambda s: label(s) or "-"),),
        swaps=None, sample=_sample,
        symbols={"n_rel": Symbol("rows of DeBERTa's relative-position table (2k)",
                                 lambda s: 2 * s.relative_span if s.position is Position.disentangled
                                 else None)},
    ),
)
