"""Architectures side by side: every design choice, what stays and what varies, and the costs
at one common shape.

The study note this project grew from (../shared/seeds/lecture-notes-architectures.zh.txt,
section 4, "Hyperparameters") reads many transformers side by side and quotes rules of thumb
for their shapes; ``compare`` lays the chosen specs out that way, in order of year, marks each
choice as the same across them or varying, and flags the shapes outside the rules:

- d_ff / d_model about 4, or 8/3 for a gated (GLU) FFN, which keeps the FFN's parameters
  equal (Shazeer 2020); flagged outside 25% of the rule (T5 11B's 64 is the note's outlier);
- d_model / n_layers about 128 (the note's aspect ratio; Kaplan et al. 2020, Figure 5, find
  the loss flat over a wide range); flagged outside a factor of two (64 to 256), per stack;
- d_model = n_heads * head_dim; flagged when not equal (Gemma 2, T5 11B);
- vocabularies of 30k-50k (monolingual) up to 100k-250k (multilingual); flagged outside
  30k-250k by more than 10%.

Costs are exact (``analyze``) at one batch and sequence length for every model: parameters,
training FLOPs per token, prefill arithmetic intensity, decode bytes per generated token and KV
cache per cached token; with paper conventions (``conventions``) their counts too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze, count_params, default_seq
from costmodel.components import ELEMENTS
from costmodel.components.attention import heads, pattern, window
from costmodel.components.bias import label as biases
from costmodel.components.block import label as block
from costmodel.components.embedding import label as embeddings
from costmodel.components.position import label as position
from costmodel.components.shape import layers
from costmodel.components.stability import softcaps
from costmodel.precision import Widths
from costmodel.spec import Spec, SpecError
from costmodel.studies.conventions import ConventionRow, compare_conventions

# Rules of thumb (docs/reference.md, "Shape rules of thumb"; the study note, section 4).
FF_RATIO = Fraction(4)
FF_RATIO_GATED = Fraction(8, 3)
FF_TOLERANCE = 0.25  # relative
ASPECT_RATIO = 128
ASPECT_RANGE = (64, 256)  # a factor of two either side
VOCAB_RANGE = (30_000, 250_000)
VOCAB_SLACK = 0.10


def expand(args: Sequence[str]) -> list[Spec]:
    """Specs named on a command line: files, bundled names, or folders (their *.yaml files)."""
    specs: list[Spec] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            files = sorted(path.glob("*.yaml"))
            if not files:
                raise SpecError(f"{arg}: no *.yaml specs in this folder")
            specs += [catalog.load(str(f)) for f in files]
        else:
            specs.append(catalog.load(arg))
    if not specs:
        raise SpecError("specs: name at least one spec")
    return specs


def by_year(specs: Sequence[Spec]) -> list[Spec]:
    """Oldest first; within a year, smallest first (GPT-3 125M before 175B)."""
    return sorted(specs, key=lambda s: (s.year if s.year is not None else 10**4, count_params(s), s.name))


# --- design choices ---------------------------------------------------------------------------


def ff_ratio(spec: Spec) -> Fraction:
    return Fraction(spec.d_ff, spec.d_model)


def ff_rule(spec: Spec) -> Fraction:
    return FF_RATIO_GATED if spec.activation.gated else FF_RATIO


def ff_outside(spec: Spec) -> bool:
    return abs(ff_ratio(spec) / ff_rule(spec) - 1) > FF_TOLERANCE


def aspect(spec: Spec) -> Fraction:
    """d_model over the layers of one stack (the decoder's, in an encoder-decoder)."""
    return Fraction(spec.d_model, spec.decoder_layers)


def aspect_outside(spec: Spec) -> bool:
    lo, hi = ASPECT_RANGE
    return not lo <= aspect(spec) <= hi


def attn_width_ratio(spec: Spec) -> Fraction:
    return Fraction(spec.n_heads * spec.head_dim, spec.d_model)


def vocab_outside(spec: Spec) -> bool:
    lo, hi = VOCAB_RANGE
    return not lo * (1 - VOCAB_SLACK) <= spec.vocab_size <= hi * (1 + VOCAB_SLACK)


@dataclass(frozen=True)
class Choice:
    """One design choice (or shape ratio) of every model: raw values, and flags for those
    outside a rule of thumb."""

    label: str
    values: tuple[Any, ...]
    rule: str | None = None
    flags: tuple[bool, ...] = ()

    @property
    def distinct(self) -> int:
        return len({str(v) for v in self.values})

    @property
    def invariant(self) -> bool:
        return self.distinct == 1


_Getter = Callable[[Spec], Any]
#: Rows of the metadata, then each element's rows, in the registry's order.
_CHOICES: tuple[tuple[str, _Getter], ...] = (
    ("family", lambda s: s.family or ""),
    ("year", lambda s: s.year),
    *(choice for e in ELEMENTS for choice in e.choices),
)

__all__ = ["biases", "block", "embeddings", "heads", "layers", "pattern", "position", "softcaps", "window"]

_RULES: tuple[tuple[str, Callable[[Spec], Fraction | int], str, Callable[[Spec], bool]], ...] = (
    ("d_ff/d_model", ff_ratio, "about 4, or 8/3 gated (within 25%)", ff_outside),
    ("d_model/n_layers", aspect, "about 128 (64 to 256, per stack)", aspect_outside),
    ("h*d_h/d_model", attn_width_ratio, "1 (d = h * d_h)", lambda s: attn_width_ratio(s) != 1),
    ("vocab V", lambda s: s.vocab_size, "30k-50k monolingual to 100k-250k multilingual (10% slack)",
     vocab_outside),
)


def choices(specs: Sequence[Spec]) -> list[Choice]:
    """Every design choice of every spec, then the shape ratios with their rules of thumb."""
    out = [Choice(label, tuple(get(s) for s in specs)) for label, get in _CHOICES]
    for label, get, rule, outside in _RULES:
        out.append(Choice(label, tuple(get(s) for s in specs), rule, tuple(outside(s) for s in specs)))
    return out


# --- costs at a common shape ------------------------------------------------------------------

COSTS = {
    "params": "parameters",
    "train_flops_per_token": "training FLOPs per token",
    "prefill_intensity": "prefill intensity (fused)",
    "decode_bytes_per_token": "decode bytes per token (fused)",
    "kv_cache_per_token": "KV cache per cached token",
}


@dataclass(frozen=True)
class CostRow:
    key: str
    label: str
    values: tuple[float | None, ...]  # None: the model cannot run this shape


def common_seq(specs: Sequence[Spec], seq: int | None) -> dict[str, int]:
    """The sequence of each phase for every model: `seq` (as ``analyze`` reads it), or the
    longest default every model allows (2048 tokens of context or the shortest max_seq_len)."""
    return {p: seq if seq is not None else min(default_seq(s, p) for s in specs)
            for p in ("train", "prefill", "decode")}


def costs(spec: Spec, batch: int, seq: dict[str, int], dtype: str, widths: Widths = Widths()
          ) -> dict[str, float | None]:
    """The compared quantities of one spec at one shape (AnalysisError if it cannot run it);
    prefill and decode hold weights and cache at `widths` (training runs at `dtype`). An
    encoder-only spec has no decode: its decode quantities are None."""
    train = analyze(spec, "train", batch, seq["train"], dtype)
    prefill = analyze(spec, "prefill", batch, seq["prefill"], dtype, **widths.options())
    t = train.total()
    out: dict[str, float | None] = {
        "params": t.params,
        "train_flops_per_token": t.flops / (batch * train.shape["S"]),
        "prefill_intensity": prefill.arithmetic_intensity,
        "decode_bytes_per_token": None,
        "kv_cache_per_token": None,
    }
    if not spec.is_encoder:
        decode = analyze(spec, "decode", batch, seq["decode"], dtype, **widths.options())
        dec = decode.total()
        out.update(decode_bytes_per_token=dec.bytes_fused / batch,
                   kv_cache_per_token=dec.kv_cache / (batch * decode.shape["C"]))
    return out


@dataclass(frozen=True)
class SideBySide:
    """Specs side by side (oldest first): design choices, costs, paper conventions."""

    specs: tuple[Spec, ...]
    batch: int
    seq: dict[str, int]
    dtype: str
    choices: tuple[Choice, ...]
    costs: tuple[CostRow, ...]
    conventions: dict[str, tuple[ConventionRow | None, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    widths: Widths = Widths()  # prefill's and decode's weights and cache

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            return float(v) if isinstance(v, Fraction) else v

        return {
            "models": self.names,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": self.dtype,
            "weights_dtype": self.widths.weights or self.dtype,
            "kv_dtype": self.widths.kv or self.dtype,
            "choices": [{"choice": c.label, "values": [plain(v) for v in c.values], "invariant": c.invariant,
                         **({"rule": c.rule, "outside_rule": list(c.flags)} if c.rule else {})}
                        for c in self.choices],
            "invariant": [c.label for c in self.choices if c.invariant],
            "varying": [c.label for c in self.choices if not c.invariant],
            "costs": [{"quantity": r.key, "label": r.label, "values": list(r.values)} for r in self.costs],
            "conventions": {name: [r.to_dict() if r else None for r in rows]
                            for name, rows in self.conventions.items()},
            "notes": list(self.notes),
        }


def compare(
    specs: Sequence[Spec], batch: int = 1, seq: int | None = None, dtype: str = "bf16",
    conventions: tuple[str, ...] = (), widths: Widths = Widths(),
) -> SideBySide:
    """`specs` side by side, oldest first, at one shape: `seq` means what it means for
    ``analyze`` (prompt for train and prefill, cached tokens for decode); by default the
    longest context every model allows. `conventions` names paper conventions to count beside
    ours (``conventions.PAPER_CONVENTIONS``); `widths` holds prefill's and decode's weights and
    KV cache at other widths than `dtype` (``costmodel.precision``)."""
    widths.check()
    ordered = tuple(by_year(specs))
    shape = common_seq(ordered, seq)
    notes = []
    per_model: list[dict[str, float | None] | None] = []
    for s in ordered:
        try:
            per_model.append(costs(s, batch, shape, dtype, widths))
        except AnalysisError as e:
            per_model.append(None)
            notes.append(f"{s.name}: {e}")
    rows = tuple(CostRow(key, label, tuple(m[key] if m else None for m in per_model))
                 for key, label in COSTS.items())
    conv: dict[str, list[ConventionRow | None]] = {}
    for i, (s, m) in enumerate(zip(ordered, per_model, strict=False)):
        if m is not None and conventions:
            for row in compare_conventions(s, shape["train"], conventions):
                conv.setdefault(row.count.convention, [None] * len(ordered))[i] = row
    return SideBySide(ordered, batch, shape, dtype, tuple(choices(ordered)), rows,
                      {k: tuple(v) for k, v in conv.items()}, tuple(notes), widths)
