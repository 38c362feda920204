"""Variants of a spec: the same model with other key/value heads or another attention window.

A variant is a new ``Spec`` built from the original's fields with a few changed, and validated
again from scratch (``spec_from_dict`` -> ``Spec.model_validate``), so an impossible variant
(h not divisible by k, a window on an encoder-decoder) is one ``SpecError`` line, like a bad
file. Nothing here computes a cost: every number comes from the one component tree.

Key/value heads: k = h is multi-head attention (Vaswani et al. 2017), k = 1 multi-query
attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"), and
1 < k < h grouped-query attention (Ainslie et al. 2023, "GQA").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.spec import LayerKind, Spec, spec_from_dict


@dataclass(frozen=True)
class Variant:
    label: str  # "MHA", "GQA k=8", "window 4096", ...
    spec: Spec
    own: bool  # the spec's own configuration


def derive(spec: Spec, label: str, **changes: Any) -> Spec:
    """`spec` with `changes` applied, validated again; `label` names the variant in errors."""
    data = spec.model_dump(exclude_unset=True, exclude={"published"})
    data.update(changes)
    return spec_from_dict(data, origin=f"{spec.name} ({label})")


def heads_name(h: int, k: int) -> str:
    """MHA, GQA or MQA, as the papers name them."""
    return "MHA" if k == h else "MQA" if k == 1 else "GQA"


def heads_label(h: int, k: int) -> str:
    return f"{heads_name(h, k)} k={k}"


def with_kv_heads(spec: Spec, k: int) -> Spec:
    return derive(spec, f"n_kv_heads={k}", n_kv_heads=k)


def default_kv_heads(spec: Spec) -> list[int]:
    """MHA (k = h), the spec's own k, and MQA (k = 1), without repeats."""
    return list(dict.fromkeys((spec.n_heads, spec.n_kv_heads, 1)))


def kv_head_variants(spec: Spec, kv_heads: Sequence[int] | None = None) -> list[Variant]:
    """One variant per k (default: h, the spec's own k, 1); the spec itself keeps its k."""
    out = []
    for k in dict.fromkeys(kv_heads or default_kv_heads(spec)):
        s = spec if k == spec.n_kv_heads else with_kv_heads(spec, k)
        out.append(Variant(heads_label(spec.n_heads, k), s, own=k == spec.n_kv_heads))
    return out


def full_attention(spec: Spec) -> Spec:
    """Every layer attends to the whole context, with positions on every layer."""
    if spec.window is None:
        return spec
    return derive(spec, "full attention", window=None, layer_pattern=[LayerKind.global_.value],
                  global_nope=False)


def pattern_label(spec: Spec) -> str:
    """``w=1024 local``, ``w=1024 5:1 local:global``; ``full`` without a window."""
    if spec.window is None:
        return "full"
    counts = {kind: list(spec.layer_pattern).count(kind) for kind in LayerKind}
    if counts[LayerKind.global_] == 0:
        return f"w={spec.window} local"
    return f"w={spec.window} {counts[LayerKind.local]}:{counts[LayerKind.global_]} local:global"


def window_variants(spec: Spec, window: int | None = None) -> list[Variant]:
    """Full attention; every layer local with window w (the spec's, or `window`); and the
    spec's own local/global pattern when it has one (with `window` if given)."""
    w = window or spec.window
    out = [Variant("full", full_attention(spec), own=spec.window is None)]
    if w is None:
        return out
    all_local = derive(spec, f"window={w}", window=w, layer_pattern=[LayerKind.local.value],
                       global_nope=False)
    out.append(Variant(pattern_label(all_local), all_local,
                       own=all_local.window == spec.window and all_local.layer_pattern == spec.layer_pattern))
    if spec.window is not None and LayerKind.global_ in spec.layer_pattern:
        mixed = spec if w == spec.window else derive(spec, f"window={w}", window=w)
        out.append(Variant(pattern_label(mixed), mixed, own=w == spec.window))
    return out
