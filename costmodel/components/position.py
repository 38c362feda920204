"""Position schemes: added to the input (sinusoidal, learned) or applied in every attention
layer (RoPE, T5 relative bias, ALiBi); ``none`` is NoPE.

- Sinusoidal: Vaswani et al. 2017, "Attention Is All You Need", section 3.5. No parameters.
- Learned absolute: GPT-2 (Radford et al. 2019). n_pos * d parameters.
- RoPE: Su et al. 2021, "RoFormer". Rotates r of the d_h dimensions of every query and key
  head: x*cos + rotate_half(x)*sin, 3 FLOPs per rotated element. No parameters.
- T5 relative bias: Raffel et al. 2020, "Exploring the Limits of Transfer Learning", section
  2.1: one table of n_buckets * h scalars per stack (held by its first layer), gathered into
  an h x S x C bias once per stack and added to the scores of every layer.
- ALiBi: Press et al. 2022, "Train Short, Test Long": a fixed slope per head times the
  query-key distance (1 FLOP per element), added to the scores. No parameters.
- Disentangled (DeBERTa, He et al. 2021; encoder-only): ``components.disentangled``.
"""

from __future__ import annotations

from typing import Any

from costmodel.components.element import Alternative, Choose, Element, Symbol
from costmodel.cost import Cost, Dims, Num, runs
from costmodel.spec import Position, Spec
from costmodel.symbols import ID_BYTES

ROPE_FLOPS = 3  # x*cos + rotate_half(x)*sin per rotated element


def input_positions(spec: Spec, dims: Dims, tokens: Num, positions: Num) -> Cost:
    """Absolute positions added to `tokens` embeddings spread over `positions` distinct rows."""
    if spec.position not in (Position.learned, Position.sinusoidal):
        return Cost()
    learned = spec.position is Position.learned
    rows = positions * dims.d
    return Cost(
        params=dims.n_pos * dims.d if learned else 0,
        factored=dims.n_pos + dims.d if learned else 0,
        other=tokens * dims.d,
        bytes_unfused=dims.p * (2 * tokens * dims.d + rows),
        weights_read=dims.p * rows if learned else 0,
        saved=ID_BYTES * positions if learned else 0,  # the position ids, for the table's gradient
    )


def rope(dims: Dims, q_len: Num, kv_len: Num) -> Cost:
    """Rotate r dims of the h query heads over q_len positions and k key heads over kv_len.

    Unfused, q and k are read and written whole, and the cos and sin tables are read.
    """
    q, kv = dims.B * q_len * dims.h, dims.B * kv_len * dims.k
    return Cost(
        other=ROPE_FLOPS * (q + kv) * dims.r,
        bytes_unfused=dims.p * (2 * (q + kv) * dims.d_h + 2 * q_len * dims.r),
    )


def score_bias(spec: Spec, dims: Dims, q_len: Num, span: Num) -> Cost:
    """The h x q_len x span bias of a stack (T5 relative or ALiBi), built once per stack."""
    elements = dims.h * q_len * span
    if spec.position is Position.t5_relative:
        params = dims.n_buckets * dims.h
        return Cost(
            params=params,
            factored=dims.n_buckets + dims.h,
            bytes_unfused=dims.p * 2 * elements,  # gather from the table, write the bias
            weights_read=dims.p * params * runs(q_len),
            saved=ID_BYTES * q_len * span,  # the bucket of every (query, key), for the table
        )
    if spec.position is Position.alibi:
        return Cost(other=elements, bytes_unfused=dims.p * elements)
    return Cost()


# --- the element ------------------------------------------------------------------------------


def label(spec: Spec) -> str:
    """The scheme as describe and compare show it: "rope (0.25 of d_h)"."""
    frac = f" ({spec.rotary_fraction:g} of d_h)" if spec.rotary_fraction != 1 else ""
    return spec.position.value + frac


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    out: list[Alternative] = []
    for pos in Position:
        if pos is spec.position or (pos is Position.disentangled and not spec.is_encoder):
            continue
        changes: dict[str, Any] = {"position": pos.value}
        if spec.position is Position.rope:
            changes["rotary_fraction"] = None
        if spec.position is Position.t5_relative:
            changes["relative_buckets"] = None
        if spec.position is Position.disentangled:
            changes.update(position_buckets=None, max_relative_positions=None)
        if spec.global_nope and not pos.per_layer:
            changes["global_nope"] = None
        out.append((f"{spec.position.value} -> {pos.value}", changes))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    att = data.get("attention")
    if isinstance(att, dict) and att.get("kind") == "mla":  # latent attention: decoupled RoPE
        data["position"] = "rope"
        return
    encoder = data.get("architecture") == "encoder"  # DeBERTa's positions: encoder-only
    # an encoder draws DeBERTa's positions as often as all the others together
    position = data["position"] = choose([p.value for p in Position if p is not Position.disentangled]
                                         + [Position.disentangled.value] * (6 if encoder else 0))
    if position == "learned" and choose([True, False]):
        data["position_offset"] = 2  # OPT
    if position == "rope" and data["head_dim"] % 4 == 0:
        data["rotary_fraction"] = choose([0.5, 1.0])
    if position == "t5_relative":
        data["relative_buckets"] = choose([4, 8, 32])


ELEMENTS = (
    Element(
        "positions", ("position", "rotary_fraction", "relative_buckets", "position_offset"),
        describe=label, choices=(("position", label),), swaps=_swaps, sample=_sample,
        symbols={
            "r": Symbol("rotary dimensions per head (d_h, or a fraction of it)", lambda s: s.rotary_dims),
            "n_pos": Symbol("rows of a learned position table (max_seq_len)", lambda s: s.position_rows),
            "n_buckets": Symbol("T5 relative-position buckets", lambda s: s.relative_buckets),
        },
    ),
)
