"""Multi-head latent attention, MLA (DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and
Efficient Mixture-of-Experts Language Model", section 2.1; also DeepSeek-V3, 2024).

Keys and values are compressed into one latent of r_kv = kv_lora_rank elements per token, and the
positions ride on a separate, decoupled RoPE key of d_r = qk_rope_head_dim elements shared by all
heads; the cache holds only these (r_kv + d_r) elements per token per layer (DeepSeek-V3:
512 + 64 = 576, against 2*128*128 = 32,768 for MHA with its 128 heads of 128). The modules, in
the names transformers gives them (modeling_deepseek_v3.py):

  q_a      d -> r_q           queries' down projection (absent when q_lora_rank is null: then
  q_norm   RMSNorm of r_q      q is one d -> h*(d_n + d_r) projection)
  q_b      r_q -> h*(d_n + d_r)   per head: d_n content and d_r rotary features
  kv_a     d -> r_kv + d_r    the latent and the shared rotary key (kv_a_proj_with_mqa)
  kv_norm  RMSNorm of r_kv     on the latent (kv_a_layernorm)
  kv_b     r_kv -> h*(d_n + d_v)  the latent's up projection: W_UK and W_UV for every head
  out      h*d_v -> d

Two conventions execute the same weights (both are exact; they differ in where kv_b runs):

- naive: the cached latent is re-expanded through kv_b into per-head keys and values at every
  pass, as transformers executes it: kv_b runs over every key the scores span, and the scores and
  AV are those of an h-head MHA of width d_n + d_r (keys) and d_v (values).
- absorbed: W_UK is folded into the query (q_nope W_UK, per head, into the latent space) and W_UV
  applied after AV (o W_UV, per head, before out), as DeepSeek's inference code (attn_impl
  "absorb") and production kernels run it: kv_b runs over the queries only, and the scores and
  AV read the latent itself, shared by every head (an MQA of width r_kv + d_r and r_kv). A cached
  token then costs 2*h*(r_kv + d_r) FLOPs of scores and 2*h*r_kv of AV: 2*h*(2*r_kv + d_r).

Decode with many cached tokens favours absorbed (kv_b once per step instead of once per cached
token); prefill favours naive (its per-pair cost 2*h*(d_n + d_r + d_v) is the smaller).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from costmodel.components.element import Alternative, Choose, Symbol
from costmodel.components.norm import norm
from costmodel.components.scores import Shape, heads_kind, mha_label, probabilities
from costmodel.cost import Cost, Dims, gemm, linear, plus, runs
from costmodel.spec import MLA, Spec

# components.attention imports this module (MLA is a kind of its "attention heads" element);
# what both kinds share (the Shape, probabilities, the head kinds) is in components.scores.


class Convention(str, Enum):
    """Where kv_b runs: over the cached keys (naive) or folded into queries and output (absorbed)."""

    naive = "naive"
    absorbed = "absorbed"


ROPE_FLOPS = 3  # as components.position: x*cos + rotate_half(x)*sin per rotated element


def latent_attention(spec: Spec, dims: Dims, shape: Shape, rope: bool, score_bias: bool) -> list[tuple[str,
                                                                                                       Cost]]:
    """The leaves of one MLA sub-block (norms, dropout and residual are the block's), in the
    convention ``dims.mla`` names. The leaf names are the same in both; kv_b, scores and av
    (and their bytes) differ.
    """
    B, h, d, p = dims.B, dims.h, dims.d, dims.p
    r_kv, d_n, d_r, d_v = dims.r_kv, dims.d_n, dims.d_r, dims.d_v
    q_tokens, kv_tokens = B * shape.q_len, B * shape.kv_len
    q_width = h * (d_n + d_r)
    absorbed = Convention(dims.mla) is Convention.absorbed
    m = spec.attention
    assert isinstance(m, MLA)

    out: list[tuple[str, Cost]] = []
    if m.q_lora_rank is None:
        out.append(("q", linear(q_tokens, d, q_width, False, p)))
    else:
        out.append(("q_a", linear(q_tokens, d, dims.r_q, spec.bias.qkv, p)))
        out.append(("q_norm", norm(spec, dims, q_tokens, dims.r_q)))
        out.append(("q_b", linear(q_tokens, dims.r_q, q_width, False, p)))
    # kv_a reads the sub-block's input, which q (or q_a) keeps for backward already
    out.append(("kv_a", linear(kv_tokens, d, r_kv + d_r, spec.bias.qkv, p, saves_input=False)))
    out.append(("kv_norm", norm(spec, dims, kv_tokens, r_kv)))
    if rope:  # the d_r rotary features of h query heads and of the one shared key
        rotated = q_tokens * h + kv_tokens
        out.append(("rope", Cost(
            other=ROPE_FLOPS * rotated * d_r,
            bytes_unfused=p * (2 * rotated * d_r + 2 * shape.q_len * d_r),  # read, write; cos and sin
        )))
    if shape.cached is not None:
        row = B * (r_kv + d_r) * p  # bytes of one token's latent and rotary key, every sequence
        out.append(("kv_cache", Cost(
            bytes_unfused=row * (shape.kv_len + shape.written),
            kv_read=row * shape.cache_reads,
            kv_write=row * shape.written,
            kv_cache=row * shape.cached,
        )))
    if absorbed:
        # q_nope (h x d_n) -> latent (h x r_kv) through W_UK; AV's latent output -> values
        # (h x d_v) through W_UV: 2*h*r_kv*(d_n + d_v) per query token, weights read once.
        params = r_kv * h * (d_n + d_v)
        read = p * params * runs(q_tokens)
        out.append(("kv_b", Cost(
            params=params,
            matmul=2 * q_tokens * params,
            matmul_eff=2 * q_tokens * params,
            bytes_unfused=p * q_tokens * h * (d_n + 2 * r_kv + d_v) + read,
            weights_read=read,
            gemms=(gemm(B * h, shape.q_len, d_n, r_kv), gemm(B * h, shape.q_len, r_kv, d_v)),
            saved=p * q_tokens * h * (d_n + r_kv),  # its two inputs: q_nope, AV's latent output
            matrices=params,
            factored=r_kv + h * (d_n + d_v),  # one r_kv x h(d_n + d_v) matrix, as naive's linear
        )))
        k_width, v_width, k_heads = r_kv + d_r, r_kv, 1  # the latent itself, shared by the heads
        groups, rows = B, h * shape.q_len  # the h heads' queries stacked against the one latent
    else:
        # every key the scores span is re-expanded: the cached ones and this pass's
        out.append(("kv_b", linear(B * shape.span, r_kv, h * (d_n + d_v), False, p)))
        k_width, v_width, k_heads = d_n + d_r, d_v, h
        groups, rows = B * h, shape.q_len
    # Products with the sizes and the seq factors first, the batch last: over arrays (the time
    # grid) one pass each for a full-size product (integers below 2^53: the same floats)
    scores = h * shape.q_len * shape.span * B
    out.append(("scores", Cost(
        matmul=2 * h * k_width * shape.q_len * shape.span * B,
        matmul_eff=2 * h * k_width * shape.pairs * B,
        bytes_unfused=p * (h * k_width * q_tokens + k_heads * k_width * shape.span * B + scores),
        gemms=(gemm(groups, rows, k_width, shape.span),),
        saved=p * (h * k_width * q_tokens + k_heads * k_width * shape.span * B),  # Q and K
    )))
    out.extend(probabilities(spec, dims, shape, score_bias))
    dropped = spec.attention_dropout_rate > 0  # AV then keeps the dropped-out probabilities
    out.append(("av", Cost(
        matmul=2 * h * v_width * shape.q_len * shape.span * B,
        matmul_eff=2 * h * v_width * shape.pairs * B,
        bytes_unfused=p * (scores + k_heads * v_width * shape.span * B + h * v_width * q_tokens),
        gemms=(gemm(groups, rows, shape.span, v_width),),
        # V (absorbed: the latent, which the scores keep already), and dropped-out probabilities
        saved=plus(0 if absorbed else p * h * d_v * shape.span * B, p * scores if dropped else 0),
    )))
    out.append(("out", linear(q_tokens, h * d_v, d, spec.bias.attn_out, p)))
    return out


# --- the registry: MLA is a kind of the "attention heads" element (components.attention) ------

SYMBOLS = {
    "r_q": Symbol("query latent rank, q_lora_rank (MLA)", lambda s: s.mla.q_lora_rank if s.mla else None),
    "r_kv": Symbol("key/value latent rank, kv_lora_rank (MLA)",
                   lambda s: s.mla.kv_lora_rank if s.mla else None),
    "d_n": Symbol("query/key head width without positions, qk_nope_head_dim (MLA)",
                  lambda s: s.mla.qk_nope_head_dim if s.mla else None),
    "d_r": Symbol("decoupled RoPE width per head, qk_rope_head_dim (MLA)",
                  lambda s: s.mla.qk_rope_head_dim if s.mla else None),
    "d_v": Symbol("value head width, v_head_dim (MLA)", lambda s: s.mla.v_head_dim if s.mla else None),
}


def label(m: MLA) -> str:
    """compare's word for the attention: "MLA 576/token" (elements cached per token per layer)."""
    return f"MLA {m.cache_width}/token"


def describe(spec: Spec, m: MLA) -> str:
    ranks = f"r_q={m.q_lora_rank} " if m.q_lora_rank is not None else ""
    return (f"h={spec.n_heads} · MLA {ranks}r_kv={m.kv_lora_rank} d_n={m.qk_nope_head_dim} "
            f"d_r={m.qk_rope_head_dim} d_v={m.v_head_dim} ({m.cache_width}/token)")


def to_latent(spec: Spec) -> Alternative | None:
    """Multi-head attention -> MLA with DeepSeek-V2's ratios (section 2.1.4: d_c = 4 d_h,
    d_h^R = d_h / 2, d_n = d_v = d_h), queries projected directly; None where MLA cannot
    stand in (not RoPE, QK-norm, an encoder-decoder, d_h not a multiple of 4)."""
    d_h = spec.head_dim
    if (spec.position.value != "rope" or spec.qk_norm.value != "none" or spec.is_encoder_decoder
            or d_h % 4):
        return None
    m = MLA(kv_lora_rank=4 * d_h, qk_nope_head_dim=d_h, qk_rope_head_dim=d_h // 2, v_head_dim=d_h)
    heads = label(spec.mla) if spec.mla is not None else mha_label(spec.n_heads, spec.n_kv_heads)
    return (f"{heads} -> {label(m)} (DeepSeek-V2 ratios: r_kv = 4 d_h, d_r = d_h/2)",
            {"attention": m.model_dump(exclude_defaults=True) | {"kind": "mla"}, "rotary_fraction": None})


def from_latent(spec: Spec, m: MLA, gqa: int | None) -> list[Alternative]:
    """MLA -> multi-head attention of its h heads of d_n (the baseline of DeepSeek-V2's Table 1),
    with k = h, a GQA k, or 1 key/value heads."""
    h = spec.n_heads
    out = []
    for k in dict.fromkeys([h, *([gqa] if gqa else []), 1]):
        out.append((f"{label(m)} -> {heads_kind(h, k)} k={k} of d_h={m.qk_nope_head_dim}",
                    {"attention": {"kind": "mha", "n_kv_heads": k, "head_dim": m.qk_nope_head_dim}}))
    return out


def sample(choose: Choose, data: dict[str, Any]) -> None:
    """A small latent attention (the positions and QK-norm samples then keep RoPE and no QK-norm)."""
    data["attention"] = {
        "kind": "mla", "q_lora_rank": choose([None, 3, 6]), "kv_lora_rank": choose([2, 4, 6]),
        "qk_nope_head_dim": choose([2, 4]), "qk_rope_head_dim": choose([2, 4]), "v_head_dim": choose([2, 3]),
    }


def is_latent(data: dict[str, Any]) -> bool:
    """Whether a spec mapping (as the samples build it) has latent attention."""
    att = data.get("attention")
    return isinstance(att, dict) and att.get("kind") == "mla"
