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
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from costmodel.cost import Cost, Dims, linear, runs

if TYPE_CHECKING:
    from costmodel.components.attention import Shape
    from costmodel.spec import Spec

_Positive = Annotated[StrictInt, Field(gt=0)]


class MLA(BaseModel):
    """The ``attention: {kind: mla, ...}`` fields, in DeepSeek's config names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["mla"] = "mla"
    q_lora_rank: _Positive | None = None  # r_q; null: queries projected directly from d_model
    kv_lora_rank: _Positive  # r_kv
    qk_nope_head_dim: _Positive  # d_n
    qk_rope_head_dim: _Positive  # d_r
    v_head_dim: _Positive  # d_v

    @field_validator("qk_rope_head_dim")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even: RoPE rotates pairs of dimensions")
        return v

    @property
    def cache_width(self) -> int:
        """Elements cached per token per layer: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class Convention(str, Enum):
    """Where kv_b runs: over the cached keys (naive) or folded into queries and output (absorbed)."""

    naive = "naive"
    absorbed = "absorbed"


ROPE_FLOPS = 3  # as components.position: x*cos + rotate_half(x)*sin per rotated element


def latent_attention(
    spec: Spec, dims: Dims, shape: Shape, rope: bool, score_bias: bool, convention: Convention
) -> list[tuple[str, Cost]]:
    """The leaves of one MLA sub-block (norms, dropout and residual are the block's).

    The leaf names are the same in both conventions; kv_b, scores, av (and their bytes) differ.
    """
    from costmodel.components.attention import probabilities
    from costmodel.components.norm import norm

    B, h, d, p = dims.B, dims.h, dims.d, dims.p
    r_kv, d_n, d_r, d_v = dims.r_kv, dims.d_n, dims.d_r, dims.d_v
    q_tokens, kv_tokens = B * shape.q_len, B * shape.kv_len
    q_width = h * (d_n + d_r)
    absorbed = convention is Convention.absorbed
    m: MLA = spec.attention  # type: ignore[assignment]

    out: list[tuple[str, Cost]] = []
    if m.q_lora_rank is None:
        out.append(("q", linear(q_tokens, d, q_width, False, p)))
    else:
        out.append(("q_a", linear(q_tokens, d, dims.r_q, spec.bias.qkv, p)))
        out.append(("q_norm", norm(spec, dims, q_tokens, dims.r_q)))
        out.append(("q_b", linear(q_tokens, dims.r_q, q_width, False, p)))
    out.append(("kv_a", linear(kv_tokens, d, r_kv + d_r, spec.bias.qkv, p)))
    out.append(("kv_norm", norm(spec, dims, kv_tokens, r_kv)))
    if rope:  # the d_r rotary features of h query heads and of the one shared key
        rotated = q_tokens * h + kv_tokens
        out.append(("rope", Cost(
            other=ROPE_FLOPS * rotated * d_r,
            bytes=p * (2 * rotated * d_r + 2 * shape.q_len * d_r),  # read, write; cos and sin
        )))
    if shape.cached is not None:
        row = B * (r_kv + d_r) * p  # bytes of one token's latent and rotary key, every sequence
        out.append(("kv_cache", Cost(
            bytes=row * (shape.kv_len + shape.written),
            kv_read=row * shape.cache_reads,
            kv_write=row * shape.written,
            kv_cache=row * shape.cached,
        )))
    pair = 2 * B * h * shape.q_len
    if absorbed:
        # q_nope (h x d_n) -> latent (h x r_kv) through W_UK; AV's latent output -> values
        # (h x d_v) through W_UV: 2*h*r_kv*(d_n + d_v) per query token, weights read once.
        params = r_kv * h * (d_n + d_v)
        read = p * params * runs(q_tokens)
        out.append(("kv_b", Cost(
            params=params,
            matmul=2 * q_tokens * params,
            matmul_eff=2 * q_tokens * params,
            bytes=p * q_tokens * h * (d_n + 2 * r_kv + d_v) + read,
            weights_read=read,
        )))
        k_width, v_width, k_heads = r_kv + d_r, r_kv, 1  # the latent itself, shared by the heads
    else:
        # every key the scores span is re-expanded: the cached ones and this pass's
        out.append(("kv_b", linear(B * shape.span, r_kv, h * (d_n + d_v), False, p)))
        k_width, v_width, k_heads = d_n + d_r, d_v, h
    scores = B * h * shape.q_len * shape.span
    out.append(("scores", Cost(
        matmul=pair * shape.span * k_width,
        matmul_eff=2 * B * h * shape.pairs * k_width,
        bytes=p * (q_tokens * h * k_width + B * shape.span * k_heads * k_width + scores),
    )))
    out.extend(probabilities(spec, dims, shape, score_bias))
    out.append(("av", Cost(
        matmul=pair * shape.span * v_width,
        matmul_eff=2 * B * h * shape.pairs * v_width,
        bytes=p * (scores + B * shape.span * k_heads * v_width + q_tokens * h * v_width),
    )))
    out.append(("out", linear(q_tokens, h * d_v, d, spec.bias.attn_out, p)))
    return out
