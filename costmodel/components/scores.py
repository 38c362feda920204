"""What every kind of attention shares (``components.attention``'s multi-head, and
``components.mla``'s latent attention): the tokens a layer sees (``Shape``), scores to
probabilities (scale, bias, mask, soft-cap, softmax, sinks), and the names of the head kinds.

Both attention modules import it; it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.components import stability
from costmodel.cost import Cost, Dims, Num, elementwise, runs
from costmodel.spec import Spec
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


def probabilities(spec: Spec, dims: Dims, shape: Shape, score_bias: bool) -> list[tuple[str, Cost]]:
    """Scores to probabilities: scale, position bias, mask, soft-cap, softmax (and its sinks).

    Every kind of attention (multi-head, latent) runs these over its B x h x S x span scores.
    """
    p = dims.p
    scores = dims.h * shape.q_len * shape.span * dims.B  # (over arrays the batch last: one full pass)
    out = [("scale", elementwise(scores, SCALE_FLOPS, p))]
    if score_bias:
        bias = dims.h * shape.q_len * shape.span
        out.append(("position_bias", elementwise(scores, BIAS_FLOPS, p, extra_bytes=p * bias)))
    if shape.masked:
        mask = shape.q_len * shape.span
        out.append(("mask", elementwise(scores, MASK_FLOPS, p, extra_bytes=MASK_BYTES * mask)))
    if spec.attn_softcap is not None:
        out.append(("softcap", stability.softcap(dims, scores)))
    out.append(("softmax", elementwise(scores, SOFTMAX_FLOPS, p, saves=1)))  # its output
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
    return Cost(params=dims.h, other=SOFTMAX_FLOPS * rows, bytes_unfused=2 * dims.p * rows + read,
                weights_read=read,
                saved=dims.p * rows,  # the softmax keeps its output, one column wider
                factored=dims.h)  # a vector: every element its own second moment


def heads_kind(h: int, k: int) -> str:
    """MHA, GQA or MQA by the number of key/value heads."""
    return "MHA" if k == h else "MQA" if k == 1 else "GQA"


def mha_label(h: int, k: int) -> str:
    """Multi-head attention's kind as compare shows it: "MHA", "GQA 4:1", "MQA"."""
    kind = heads_kind(h, k)
    return f"GQA {h // k}:1" if kind == "GQA" else kind
