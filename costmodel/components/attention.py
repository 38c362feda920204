"""Attention: projections, QK-norm, scores, softmax, AV, output, and the KV cache.

One definition covers every variant. The number of key/value heads k makes MHA (k = h),
GQA (1 < k < h; Ainslie et al. 2023, "GQA") and MQA (k = 1; Shazeer 2019, "Fast
Transformer Decoding: One Write-Head is All You Need"). The ``Shape`` of a layer says which
tokens it sees: causal self-attention with or without a sliding window (Child et al. 2019;
Beltagy et al. 2020, "Longformer"; Mistral 7B), bidirectional encoder self-attention, and
cross-attention over the encoder output (Vaswani et al. 2017). Phases only substitute
S and C (and S_e, C_e), so prefill and decode share every formula below.

Scores and AV follow the dense convention of DESIGN.md: the S x span score matrix is computed
whole, as a plain implementation does; ``matmul_eff`` counts only the (query, key) pairs a
mask-skipping kernel would compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.components import position, stability
from costmodel.components.norm import norm
from costmodel.cost import Cost, Dims, Num, elementwise, floor_div, half, linear, runs, smax, smin, triangle
from costmodel.spec import QKNorm, Spec
from costmodel.symbols import MASK_BYTES

SCALE_FLOPS = 1  # scores * 1/sqrt(d_h)
MASK_FLOPS = 1  # masked_fill of the scores
BIAS_FLOPS = 1  # + position bias
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide


@dataclass(frozen=True)
class Shape:
    """The tokens one attention layer sees in one pass, per sequence.

    q_len    queries this pass
    kv_len   keys and values projected this pass
    span     keys the dense score matrix spans
    pairs    (query, key) pairs the mask allows, summed over the queries
    cached   tokens held in the KV cache after the pass (None: this layer keeps no cache)
    written  tokens written into the cache this pass
    masked   a causal or window mask is applied to the scores
    """

    q_len: Num
    kv_len: Num
    span: Num
    pairs: Num
    cached: Num | None
    written: Num
    masked: bool

    @property
    def cache_reads(self) -> Num:
        """Cached tokens this pass reads: the span less the keys projected in it."""
        return self.span - self.kv_len


def causal(dims: Dims, window: bool) -> Shape:
    """Decoder self-attention: S new queries at the end of a context of C tokens.

    Query j (1-based position in the context) sees min(j, w) keys. The S queries of a pass sit
    at positions C-S+1 .. C, so they span min(C, w + S - 1) keys and allow
        sum_{j=C-S+1}^{C} min(j, w) = S(2C-S+1)/2 - T(max(C-w, 0)) + T(max(C-S-w, 0))
    pairs, T(n) = n(n+1)/2. Without a window, S(2C-S+1)/2. Prefill (S = C) gives C(C+1)/2
    and decode (S = 1) gives C, or min(C, w). A rolling cache (Mistral 7B) keeps min(C, w).
    """
    S, C = dims.S, dims.C
    full_pairs = half(S * (2 * C - S + 1))
    if not window:
        return Shape(S, S, C, full_pairs, cached=C, written=S, masked=True)
    w = dims.w
    pairs = full_pairs - triangle(smax(C - w, 0)) + triangle(smax(C - S - w, 0))
    return Shape(S, S, smin(C, w + S - 1), pairs, cached=smin(C, w), written=smin(S, w), masked=True)


def chunked(dims: Dims) -> Shape:
    """Chunked local attention (Llama 4, Meta 2025): the context is cut into chunks of c tokens
    and a query sees the keys of its own chunk up to itself, so query j (1-based) sees
    ((j - 1) mod c) + 1 keys, where a window would see min(j, w). Summed over queries 1..n,
        F(n) = floor(n/c) * T(c) + T(n - c*floor(n/c)),
    the S queries at C-S+1 .. C allow F(C) - F(C-S) pairs: prefill C(C+1)/2 while C <= c, then
    about C*c/2 (a window of the same size allows about C*w). The keys live in a rolling buffer of
    min(C, c) slots, as transformers keeps them (cache_utils: "sliding and chunked are the same
    in how they should behave, only the mask differs"); a decode step's dense scores span it,
    masking the slots of the previous chunk; a prompt spans its own S keys.
    """
    S, C, c = dims.S, dims.C, dims.c

    def before(n: Num) -> Num:  # F(n): pairs of the first n queries
        chunks = floor_div(n, c)
        return chunks * triangle(c) + triangle(n - c * chunks)

    pairs = before(C) - before(C - S)
    return Shape(S, S, smin(C, c + S - 1), pairs, cached=smin(C, c), written=smin(S, c), masked=True)


def bidirectional(dims: Dims) -> Shape:
    """Encoder self-attention of the S_e tokens of this pass over themselves; nothing is cached
    (the encoder runs once). The span is S_e, not C_e: they are equal whenever the encoder
    runs, and a decode step (S_e = 0) must read no encoder keys."""
    return Shape(dims.S_e, dims.S_e, dims.S_e, dims.S_e * dims.S_e, cached=None, written=0,
                 masked=False)


def cross(dims: Dims) -> Shape:
    """Decoder queries over the C_e encoder outputs; K and V are projected once (S_e tokens,
    0 in decode) and cached for every later step."""
    return Shape(dims.S, dims.S_e, dims.C_e, dims.S * dims.C_e, cached=dims.C_e, written=dims.S_e,
                 masked=False)


def probabilities(spec: Spec, dims: Dims, shape: Shape, score_bias: bool) -> list[tuple[str, Cost]]:
    """Scores to probabilities: scale, position bias, mask, soft-cap, softmax (and its sinks).

    Every kind of attention (multi-head, latent) runs these over its B x h x S x span scores.
    """
    p = dims.p
    scores = dims.B * dims.h * shape.q_len * shape.span
    out = [("scale", elementwise(scores, SCALE_FLOPS, p))]
    if score_bias:
        bias = dims.h * shape.q_len * shape.span
        out.append(("position_bias", elementwise(scores, BIAS_FLOPS, p, extra_bytes=p * bias)))
    if shape.masked:
        mask = shape.q_len * shape.span
        out.append(("mask", elementwise(scores, MASK_FLOPS, p, extra_bytes=MASK_BYTES * mask)))
    if spec.attn_softcap is not None:
        out.append(("softcap", stability.softcap(dims, scores)))
    out.append(("softmax", elementwise(scores, SOFTMAX_FLOPS, p)))
    if spec.attention_sinks:
        out.append(("sinks", sinks(dims, dims.B * dims.h * shape.q_len)))
    return out


def sinks(dims: Dims, rows: Num) -> Cost:
    """Attention sinks as gpt-oss has them (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card";
    after Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks"): one
    learned logit per head joins every row of scores as one column more in the softmax, and is
    dropped after it, so a head can put weight on no token. h parameters per layer; the softmax
    does its SOFTMAX_FLOPS over `rows` more elements, reading the logits and writing the column.
    """
    read = dims.p * dims.h * runs(rows)
    return Cost(params=dims.h, other=SOFTMAX_FLOPS * rows, bytes=2 * dims.p * rows + read, weights_read=read)


def attention(
    spec: Spec, dims: Dims, shape: Shape, rope: bool, score_bias: bool
) -> list[tuple[str, Cost]]:
    """The leaves of one attention sub-block (norms, dropout and residual are the block's)."""
    B, h, k, d_h, p = dims.B, dims.h, dims.k, dims.d_h, dims.p
    q_tokens, kv_tokens = B * shape.q_len, B * shape.kv_len
    scores = B * h * shape.q_len * shape.span  # elements of the score matrix
    kv_row = 2 * B * k * d_h * p  # bytes of K and V for one token of every sequence
    dense = 2 * B * h * shape.q_len * shape.span * d_h
    effective = 2 * B * h * shape.pairs * d_h

    out: list[tuple[str, Cost]] = [
        ("q", linear(q_tokens, dims.d, h * d_h, spec.bias.qkv, p)),
        ("k", linear(kv_tokens, dims.d, k * d_h, spec.bias.qkv, p)),
        ("v", linear(kv_tokens, dims.d, k * d_h, spec.bias.qkv, p)),
    ]
    if spec.qk_norm is not QKNorm.none:
        per_head = spec.qk_norm is QKNorm.head
        out.append((
            "qk_norm",
            norm(spec, dims, q_tokens, h * d_h, d_h if per_head else None)
            + norm(spec, dims, kv_tokens, k * d_h, d_h if per_head else None),
        ))
    if rope:
        out.append(("rope", position.rope(dims, shape.q_len, shape.kv_len)))
    if shape.cached is not None:
        out.append(("kv_cache", Cost(
            bytes=kv_row * (shape.kv_len + shape.written),  # read the new K, V; store them
            kv_read=kv_row * shape.cache_reads,
            kv_write=kv_row * shape.written,
            kv_cache=kv_row * shape.cached,
        )))
    out.append(("scores", Cost(
        matmul=dense,
        matmul_eff=effective,
        bytes=p * (q_tokens * h * d_h + B * shape.span * k * d_h + scores),
    )))
    out.extend(probabilities(spec, dims, shape, score_bias))
    out.append(("av", Cost(
        matmul=dense,
        matmul_eff=effective,
        bytes=p * (scores + B * shape.span * k * d_h + q_tokens * h * d_h),
    )))
    out.append(("out", linear(q_tokens, h * d_h, dims.d, spec.bias.attn_out, p)))
    return out

