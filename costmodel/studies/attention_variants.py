"""Attention variants of one spec, and what each costs on a device: `costmodel attention`.

A variant is ``variants.variant``: a new ``Spec`` from the original's fields with a few
changed, validated again from scratch, so an impossible variant (h not divisible by k, a window
on an encoder-decoder) is one ``SpecError`` line, like a bad file. Every number comes from
``analysis.analyze`` on a variant: the one component tree, no second copy of a formula.

- key/value heads: k = h is multi-head attention (Vaswani et al. 2017), k = 1 multi-query
  attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"),
  1 < k < h grouped-query attention (Ainslie et al. 2023, "GQA"); in prefill and decode: KV
  cache, the attention sub-blocks' FLOPs, bytes and intensity, their roofline and the whole
  pass's, and the largest batch that fits (``roofline.fit``);
- windows: full attention, every layer local, the spec's local/global pattern: KV cache and
  attention work as the context grows;
- latent attention (DeepSeek-V2): the naive and absorbed conventions of ``components.mla`` side
  by side, phase by phase, as the dense and masked counts are;
- the key/value-head variants' decode step as the context grows (``heads_by_context``: KV cache
  and the attention's intensity, the report's attention charts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.analysis import Analysis, AnalysisError, Row, analyze, require_decode
from costmodel.components.attention import heads, pattern
from costmodel.components.mla import Convention
from costmodel.components.scores import heads_kind
from costmodel.devices.hardware import Hardware
from costmodel.phases import DECODE
from costmodel.precision import Widths
from costmodel.runtime.roofline import Fit, Roofline, attention_total, fit, roofline_dict, roofline_of
from costmodel.spec import LayerKind, Position, Spec
from costmodel.studies.variants import gqa_kv_heads, variant


@dataclass(frozen=True)
class Variant:
    label: str  # "MHA k=32", "GQA k=8", "w=4096, all local", ...
    spec: Spec
    own: bool  # the spec's own configuration
    mla: str = "naive"  # the convention a latent-attention variant runs in (components.mla)


def with_kv_heads(spec: Spec, k: int) -> Spec:
    return variant(spec, {"n_kv_heads": k})


def default_kv_heads(spec: Spec) -> list[int]:
    """MHA (k = h), the spec's own k, and MQA (k = 1), without repeats."""
    return list(dict.fromkeys((spec.n_heads, spec.n_kv_heads, 1)))


def standard_attention(spec: Spec) -> Spec:
    """A latent-attention spec with multi-head attention in its place: h heads of d_n =
    qk_nope_head_dim, the d_h of DeepSeek-V2's comparison (section 2.1, Table 1: MHA caches
    2*h*d_h elements a token a layer, MLA d_c + d_h^R = 4.5 d_h)."""
    if spec.mla is None:
        return spec
    return variant(spec, {"attention": {"kind": "mha", "n_kv_heads": spec.n_heads,
                                        "head_dim": spec.mla.qk_nope_head_dim}})


def kv_head_variants(spec: Spec, kv_heads: Sequence[int] | None = None) -> list[Variant]:
    """One variant per k (default: h, the spec's own k, 1); the spec itself keeps its k.

    A latent-attention spec comes first, as itself in both conventions (naive: what
    transformers runs; absorbed: what DeepSeek's kernels run), then the k variants of its
    multi-head counterpart (``standard_attention``): MLA beside MHA, GQA and MQA of its heads.
    """
    if spec.mla is not None:
        latent = [Variant(f"{heads(spec)} {c.value}", spec, own=True, mla=c.value) for c in Convention]
        h = spec.n_heads
        gqa = gqa_kv_heads(h)
        rest = kv_head_variants(standard_attention(spec), kv_heads or [h, *([gqa] if gqa else []), 1])
        return latent + [Variant(v.label, v.spec, own=False) for v in rest]
    out = []
    for k in dict.fromkeys(kv_heads or default_kv_heads(spec)):
        s = spec if k == spec.n_kv_heads else with_kv_heads(spec, k)
        out.append(Variant(f"{heads_kind(s.n_heads, k)} k={k}", s, own=k == spec.n_kv_heads))
    return out


def full_attention(spec: Spec) -> Spec:
    """Every layer attends to the whole context, with positions on every layer."""
    if spec.window is None and spec.attention_chunk is None:
        return spec
    drop_chunks = {"attention_chunk": None} if spec.attention_chunk is not None else {}
    return variant(spec, {"window": None, **drop_chunks, "layer_pattern": None, "global_nope": None})


def window_label(spec: Spec) -> str:
    """``full``, ``w=4096, all local``, ``w=1024, 5 local : 1 global``, ``c=8192, 3 chunked : 1 global``."""
    sizes = [f"{name}={v}" for name, v in (("w", spec.window), ("c", spec.attention_chunk)) if v is not None]
    return ", ".join([*sizes, pattern(spec)]) if sizes else "full"


def window_variants(spec: Spec, window: int | None = None) -> list[Variant]:
    """Full attention; every layer local with window w (the spec's, or `window`); the spec's own
    local/global pattern when it has one (with `window` if given); and the spec itself when it
    has chunked layers (Llama 4's chunks, which differ from a window of their size in pairs)."""
    w = window or spec.window
    local_or_chunked = spec.window is not None or spec.attention_chunk is not None
    out = [Variant("full", full_attention(spec), own=not local_or_chunked)]
    if w is not None:
        drop_chunks = {"attention_chunk": None} if spec.attention_chunk is not None else {}
        local = variant(spec, {"window": w, **drop_chunks, "layer_pattern": [LayerKind.local.value],
                               "global_nope": None})
        out.append(Variant(window_label(local), local,
                           own=local.window == spec.window and local.layer_pattern == spec.layer_pattern))
    if spec.window is not None and LayerKind.global_ in spec.layer_pattern:
        mixed = spec if w == spec.window else variant(spec, {"window": w})
        out.append(Variant(window_label(mixed), mixed, own=w == spec.window))
    if spec.attention_chunk is not None and not any(v.spec is spec for v in out):
        out.append(Variant(window_label(spec), spec, own=True))
    return out


# --- what each variant costs ---------------------------------------------------------------

INFERENCE = ("prefill", "decode")
CONTEXTS = (1024, 4096, 16384, 65536, 131072)


@dataclass(frozen=True)
class HeadsRow:
    """One key/value-head variant in one phase."""

    variant: str
    kv_heads: int | None  # None: latent attention, whose cache is not per head
    own: bool  # the spec's own k
    phase: str
    shape: dict[str, int]
    kv_per_token: float  # KV cache of one sequence / its context C, bytes
    kv_cache: int  # whole batch, bytes
    attention: Row  # every attention sub-block, summed over layers
    attention_roofline: Roofline
    step_roofline: Roofline  # the whole forward pass
    fit: Fit

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "kv_heads": self.kv_heads, "own": self.own, "phase": self.phase,
            "shape": self.shape, "kv_bytes_per_token": self.kv_per_token, "kv_cache_bytes": self.kv_cache,
            "attention": {**self.attention.numbers(), "flops": self.attention.flops,
                          "roofline": roofline_dict(self.attention_roofline)},
            "step_roofline": roofline_dict(self.step_roofline),
            "fit": self.fit.to_dict(),
        }


def heads_row(label: str, k: int | None, own: bool, a: Analysis, hw: Hardware) -> HeadsRow:
    att = attention_total(a)
    t = a.total()
    f = fit(a, hw)
    return HeadsRow(label, k, own, a.phase, dict(a.shape), f.kv_bytes_per_sequence / a.shape["C"],
                    t.kv_cache, att, roofline_of(att, hw, a.dtype), roofline_of(t, hw, a.dtype), f)


def compare_kv_heads(
    spec: Spec, hw: Hardware, batch: int = 1, seq: int | None = None, dtype: str = "bf16",
    kv_heads: Sequence[int] | None = None, enc_seq: int | None = None, widths: Widths = Widths(),
) -> list[HeadsRow]:
    """Prefill and decode of each key/value-head variant (default: h, the spec's k, 1), weights
    and cache at `widths`."""
    rows = []
    for v in kv_head_variants(spec, kv_heads):
        for phase in INFERENCE:
            a = analyze(v.spec, phase, batch=batch, seq=seq, dtype=dtype, enc_seq=enc_seq, mla=v.mla,
                        **widths.options())
            k = None if v.spec.mla is not None else v.spec.n_kv_heads
            rows.append(heads_row(v.label, k, v.own, a, hw))
    return rows


@dataclass(frozen=True)
class WindowRow:
    """One window variant at one context length C."""

    variant: str
    own: bool
    context: int
    kv_cache: int  # whole batch, bytes, after a decode step at this context
    prefill: Row  # attention of a prefill of `context` tokens
    decode: Row  # attention of one decode step attending to `context` tokens
    decode_roofline: Roofline

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "own": self.own, "context": self.context,
            "kv_cache_bytes": self.kv_cache,
            "prefill_attention": {**self.prefill.numbers(), "flops": self.prefill.flops},
            "decode_attention": {**self.decode.numbers(), "flops": self.decode.flops,
                                 "roofline": roofline_dict(self.decode_roofline)},
        }


def default_contexts(spec: Spec) -> list[int]:
    """1K to 128K tokens; a learned position table stops at its max_seq_len."""
    if spec.position is not Position.learned:
        return list(CONTEXTS)
    return sorted({c for c in CONTEXTS if c < spec.max_seq_len} | {spec.max_seq_len})


def compare_windows(
    spec: Spec, hw: Hardware, batch: int = 1, contexts: Sequence[int] | None = None,
    dtype: str = "bf16", window: int | None = None, widths: Widths = Widths(),
) -> list[WindowRow]:
    """Full attention, all-local with window w, and the spec's pattern, as the context grows
    (weights and cache at `widths`)."""
    contexts = sorted(set(contexts or default_contexts(spec)))
    if DECODE.seq_for(contexts[0]) < 1:  # a decode step attends to the cached tokens and itself
        raise AnalysisError(f"contexts: must be at least {DECODE.context(1)} (got {contexts[0]})")
    rows = []
    for v in window_variants(spec, window):
        for c in contexts:
            pre = analyze(v.spec, "prefill", batch=batch, seq=c, dtype=dtype, **widths.options())
            dec = analyze(v.spec, "decode", batch=batch, seq=DECODE.seq_for(c), dtype=dtype,
                          **widths.options())
            att = attention_total(dec)
            rows.append(WindowRow(v.label, v.own, c, dec.total().kv_cache, attention_total(pre), att,
                                  roofline_of(att, hw, dtype)))
    return rows


@dataclass(frozen=True)
class LatentRow:
    """One phase of a latent-attention spec in one convention (components.mla.Convention)."""

    phase: str
    convention: str
    shape: dict[str, int]
    attention: Row  # every attention sub-block, summed over layers
    total: Row  # the whole pass

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "convention": self.convention, "shape": self.shape,
                "attention": {**self.attention.numbers(), "flops": self.attention.flops},
                "total": {**self.total.numbers(), "flops": self.total.flops}}


def compare_latent(
    spec: Spec, phases: Sequence[str] = ("train", "prefill", "decode"), batch: int = 1,
    seq: int | None = None, dtype: str = "bf16",
) -> list[LatentRow]:
    """Each phase of a latent-attention spec in both conventions: the same weights and cache,
    different work (naive re-expands every cached latent; absorbed folds W_UK and W_UV into the
    query and output). Empty for multi-head attention."""
    if spec.mla is None:
        return []
    rows = []
    for phase in phases:
        for c in Convention:
            a = analyze(spec, phase, batch=batch, seq=seq, dtype=dtype, mla=c.value)
            rows.append(LatentRow(phase, c.value, dict(a.shape), attention_total(a), a.total()))
    return rows


@dataclass(frozen=True)
class ContextRow:
    """One key/value-head (or latent) variant's decode step at context C: the step attends to C
    tokens, C - 1 of them cached (``costmodel attention``'s decode row at ``--seq C-1``)."""

    variant: str
    kv_heads: int | None  # None: latent attention
    own: bool
    mla: str  # the convention a latent variant runs in
    context: int
    kv_cache: int  # whole batch, bytes
    attention: Row  # every attention sub-block of the step, summed over layers
    total: Row  # the whole step

    @property
    def intensity(self) -> float:
        """The attention sub-blocks' FLOPs over their fused bytes (``attention``'s intensity)."""
        return self.attention.flops / self.attention.bytes_fused

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "kv_heads": self.kv_heads, "own": self.own, "context": self.context,
                "kv_cache_bytes": self.kv_cache, "attention": {**self.attention.numbers(),
                                                               "flops": self.attention.flops},
                "intensity": self.intensity}


def trained_contexts(spec: Spec, least: int = 256) -> list[int]:
    """Powers of two from `least` to the spec's max_seq_len, and max_seq_len itself: every context
    the model was trained to take (no RoPE past its length)."""
    out = [c for c in (least << i for i in range(40)) if c < spec.max_seq_len]
    return [*out, spec.max_seq_len]


def heads_by_context(spec: Spec, batch: int = 1, contexts: Sequence[int] | None = None, dtype: str = "bf16",
                     widths: Widths = Widths()) -> list[ContextRow]:
    """The decode step of each key/value-head variant (``kv_head_variants``: MHA, the spec's k,
    MQA; a latent spec in both conventions beside its multi-head counterpart's) at each context
    (default ``trained_contexts``): the KV cache and the attention's work as the context grows."""
    require_decode(spec, "a KV cache")
    contexts = sorted(set(contexts or trained_contexts(spec)))
    if DECODE.seq_for(contexts[0]) < 1:
        raise AnalysisError(f"contexts: must be at least {DECODE.context(1)} (got {contexts[0]})")
    rows = []
    for v in kv_head_variants(spec):
        k = None if v.spec.mla is not None else v.spec.n_kv_heads
        for c in contexts:
            a = analyze(v.spec, "decode", batch=batch, seq=DECODE.seq_for(c), dtype=dtype, mla=v.mla,
                        **widths.options())
            t = a.total()
            rows.append(ContextRow(v.label, k, v.own, v.mla, c, t.kv_cache, attention_total(a), t))
    return rows
