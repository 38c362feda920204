"""Variants of a spec: one design element changed at a time, and what each change costs.

A variant is a new, fully re-validated ``Spec``: the fields the original spec gave, with some
changed, through ``spec_from_dict`` (so a bad change is one line naming the field and the
problem). Changing one field changes only that field: ``head_dim`` is not re-derived when
``n_heads`` changes. A value of ``None`` (``null`` on the command line) removes a field, so it
takes its default again or is re-derived (``n_kv_heads`` = ``n_heads``, ``head_dim`` =
``d_model / n_heads``, ``layer_pattern`` from ``window``).

- ``ablate``: one spec before and after a set of changes, every quantity in every phase.
- ``swaps`` and ``rank_elements``: each design element swapped in turn for each of its
  alternatives (declared by the element itself, ``Element.swaps`` in costmodel/components/),
  ranked by the effect on parameters, training FLOPs, decode bytes per token and KV cache:
  the numbers behind "which design elements matter most".

Fields of the FFN and attention unions are changed by their shorthand names too
(``n_kv_heads=8`` sets ``attention.n_kv_heads``); metadata (``spec.METADATA``) is never an
architectural change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from costmodel.analysis import Analysis, AnalysisError, analyze, default_seq
from costmodel.components import ELEMENTS
from costmodel.components.attention import DEFAULT_WINDOW, GQA_KV_HEADS, gqa_kv_heads
from costmodel.components.ffn import equal_params_d_ff
from costmodel.components.loss import GPT2_DROPOUT
from costmodel.components.stability import GEMMA2_SOFTCAPS, PALM_Z_LOSS
from costmodel.loading import LoadError, load_yaml
from costmodel.phases import LABELS, PHASES
from costmodel.precision import Widths
from costmodel.spec import _DEFAULT_KIND, METADATA, SHORTHANDS, Spec, SpecError, spec_from_dict

__all__ = ["DEFAULT_WINDOW", "GEMMA2_SOFTCAPS", "GPT2_DROPOUT", "GQA_KV_HEADS", "PALM_Z_LOSS",
           "equal_params_d_ff", "gqa_kv_heads"]

PHASE_ORDER = ("train", "prefill", "decode")


# --- making variants ----------------------------------------------------------------------


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["norm=layernorm", "n_kv_heads=1"]`` -> {"norm": "layernorm", "n_kv_heads": 1}.

    Values follow YAML's scalar rules: 8 is an int, 1e-4 a float, true a bool, null (or
    nothing) None, [local, global] a list. A dotted field reaches into a mapping (bias.qkv).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set: expected FIELD=VALUE, got {item!r}")
        shown = item if len(item) <= 80 else item[:77] + "..."
        try:  # read as a spec file is (costmodel.loading): alias loops and 5,000-digit ints refused
            out[key], _ = load_yaml(raw)
        except LoadError as e:
            raise SpecError(f"--set {shown}: {str(e).partition(': ')[2] or e}") from None
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise SpecError(f"--set {shown}: malformed value: {problem}") from None
    return out


def show(value: Any) -> str:
    """A field value as one would write it in a spec: enums by value, lists in brackets."""
    if value is None:
        return "null"
    if hasattr(value, "value"):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)


def describe_changes(changes: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={show(v)}" for k, v in changes.items())


def variant(spec: Spec, changes: Mapping[str, Any], name: str | None = None) -> Spec:
    """`spec` with `changes` applied, validated again as a whole; SpecError names the change."""
    data = spec.model_dump(exclude_unset=True)
    data.pop("published", None)  # a variant is no longer the published model
    data["name"] = name or f"{spec.name}[{describe_changes(changes)}]"
    origin = f"{spec.name} with {describe_changes(changes)}"
    for key, value in changes.items():
        union = SHORTHANDS.get(key.split(".")[0])
        if union is not None and isinstance(data.get(union), dict):
            key = f"{union}.{key}"  # d_ff=... changes ffn.d_ff
        *parents, leaf = key.split(".")
        target = data
        for i, part in enumerate(parents):
            node = target.get(part, {})
            if not isinstance(node, dict):
                raise SpecError(f"{origin}: {key}: {'.'.join(parents[: i + 1])} is not a mapping")
            target = target.setdefault(part, node)
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return spec_from_dict(data, origin)


def changed_fields(before: Spec, after: Spec) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for every architectural field that differs, derived ones too.

    Fields of the FFN and attention unions are named by their shorthand where they have one
    (d_ff, n_kv_heads), else in full (ffn.kind)."""
    a, b = before.model_dump(), after.model_dump()
    out = []
    for key in a:
        if key in METADATA:
            continue
        if isinstance(a[key], dict):
            keys = [*a[key], *(k for k in b[key] if k not in a[key])]
            for k in keys:
                old, new = a[key].get(k), b[key].get(k)
                if old != new:
                    short = key in _DEFAULT_KIND and SHORTHANDS.get(k) == key
                    out.append((k if short else f"{key}.{k}", old, new))
        elif a[key] != b[key]:
            out.append((key, a[key], b[key]))
    return out


# --- ablation: before and after, every quantity, every phase --------------------------------


@dataclass(frozen=True)
class Delta:
    """One quantity before and after a change."""

    phase: str
    quantity: str
    before: float
    after: float

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        return None if self.before == 0 else self.change / self.before


QUANTITY_LABELS = LABELS  # one list of labels: phases.LABELS


def _quantities(a: Analysis) -> dict[str, float]:
    t = a.total()
    out: dict[str, float] = {"flops": t.flops, "flops_matmul": t.flops_matmul, "flops_other": t.flops_other,
           "bytes_unfused": t.bytes_unfused, "bytes_fused": t.bytes_fused}
    if a.phase != "train":
        out["kv_cache"] = t.kv_cache
    out["intensity"] = a.arithmetic_intensity
    return out


@dataclass(frozen=True)
class Ablation:
    """A spec before and after `changes`, in every phase at one shape."""

    before: Spec
    after: Spec
    changes: dict[str, Any]
    fields: tuple[tuple[str, Any, Any], ...]
    analyses: dict[str, tuple[Analysis, Analysis]]
    deltas: tuple[Delta, ...]

    def to_dict(self) -> dict[str, Any]:
        first = next(iter(self.analyses.values()))[0]
        return {
            "spec": self.before.name,
            "changes": {k: show(v) if v is None else v for k, v in self.changes.items()},
            "fields": [{"field": f, "before": show(b), "after": show(a)} for f, b, a in self.fields],
            "batch": first.batch,
            "dtype": first.dtype,
            "seq": {p: pair[0].seq for p, pair in self.analyses.items()},
            "deltas": [{"phase": d.phase, "quantity": d.quantity, "before": d.before, "after": d.after,
                        "change": d.change, "relative": d.relative} for d in self.deltas],
        }


def ablate(
    spec: Spec, changes: Mapping[str, Any], batch: int = 1, seq: int | None = None,
    dtype: str = "bf16", enc_seq: int | None = None, widths: Widths = Widths(),
) -> Ablation:
    """`spec` before and after `changes`: every quantity of every phase, with its change.

    `seq` means what it means for ``analyze``; by default each phase takes the original spec's
    default, so both sides run at the same shape. Both sides' prefill and decode hold weights
    and cache at `widths` (``costmodel.precision``; training at `dtype`).
    """
    after = variant(spec, changes)
    analyses = {}
    deltas = []
    for phase in PHASE_ORDER:
        s = default_seq(spec, phase) if seq is None else seq
        at = {} if PHASES[phase].training else widths.options()
        pair = (analyze(spec, phase, batch, s, dtype, enc_seq, **at),
                analyze(after, phase, batch, s, dtype, enc_seq, **at))
        analyses[phase] = pair
        if phase == PHASE_ORDER[0]:
            deltas.append(Delta("all", "params", pair[0].total().params, pair[1].total().params))
        q0, q1 = _quantities(pair[0]), _quantities(pair[1])
        deltas += [Delta(phase, q, q0[q], q1[q]) for q in q0]
    return Ablation(spec, after, dict(changes), tuple(changed_fields(spec, after)), analyses, tuple(deltas))


# --- design elements, each swapped for each alternative -------------------------------------

@dataclass(frozen=True)
class Swap:
    """One design element changed to one alternative."""

    element: str
    label: str
    changes: dict[str, Any]


def swaps(spec: Spec, window: int = DEFAULT_WINDOW) -> list[Swap]:
    """Every design element of `spec` swapped for each of its alternatives, one at a time
    (each element's alternatives are its own: ``Element.swaps``)."""
    return [Swap(e.name, label, changes)
            for e in ELEMENTS if e.swaps is not None for label, changes in e.swaps(spec, window)]


#: What a swap is ranked by: key -> (label, what it measures).
METRICS = {
    "params": "parameters",
    "train_flops": "training FLOPs (one step at B x seq)",
    "decode_bytes": "decode bytes per generated token (fused: weights and KV cache read once)",
    "kv_cache": "KV cache at the decode context",
}


def metrics(
    spec: Spec, batch: int, seq: dict[str, int], dtype: str, enc_seq: int | None = None,
    widths: Widths = Widths(),
) -> dict[str, float]:
    """The four quantities a swap is ranked by, at one shape (decode's at `widths`)."""
    train = analyze(spec, "train", batch, seq["train"], dtype, enc_seq)
    out = {"params": float(train.total().params), "train_flops": float(train.total().flops),
           "decode_bytes": 0.0, "kv_cache": 0.0}  # an encoder-only model decodes nothing
    if not spec.is_encoder:
        decode = analyze(spec, "decode", batch, seq["decode"], dtype, enc_seq, **widths.options())
        out.update(decode_bytes=decode.total().bytes_fused / batch, kv_cache=float(decode.total().kv_cache))
    return out


@dataclass(frozen=True)
class SwapEffect:
    """A swap's variant and its four quantities beside the original's."""

    swap: Swap
    variant: Spec
    before: dict[str, float]
    after: dict[str, float]

    def relative(self, metric: str) -> float | None:
        b = self.before[metric]
        return None if b == 0 else (self.after[metric] - b) / b

    def effect(self, by: str) -> float:
        """The size of the effect: |relative change| of `by`, or the largest of the four."""
        keys = METRICS if by == "max" else (by,)
        return max(abs(self.relative(m) or 0.0) for m in keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "element": self.swap.element,
            "swap": self.swap.label,
            "changes": {k: v for k, v in self.swap.changes.items()},
            "after": self.after,
            "change": {m: self.after[m] - self.before[m] for m in METRICS},
            "relative": {m: self.relative(m) for m in METRICS},
        }


@dataclass(frozen=True)
class ElementRanking:
    """Every swap of one spec, ranked by the size of its effect."""

    spec: Spec
    batch: int
    seq: dict[str, int]
    dtype: str
    by: str
    baseline: dict[str, float]
    effects: tuple[SwapEffect, ...]  # largest effect first
    skipped: tuple[tuple[Swap, str], ...] = field(default_factory=tuple)
    widths: Widths = Widths()  # decode's weights and cache

    def elements(self) -> list[tuple[str, SwapEffect]]:
        """Each element once, by its largest swap, largest first."""
        best: dict[str, SwapEffect] = {}
        for e in self.effects:  # already sorted: the first seen is the largest
            best.setdefault(e.swap.element, e)
        return list(best.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": self.dtype,
            "weights_dtype": self.widths.weights or self.dtype,
            "kv_dtype": self.widths.kv or self.dtype,
            "ranked_by": self.by,
            "baseline": self.baseline,
            "swaps": [e.to_dict() for e in self.effects],
            "elements": [{"element": name, "largest_swap": e.swap.label, "effect": e.effect(self.by)}
                         for name, e in self.elements()],
            "skipped": [{"element": s.element, "swap": s.label, "reason": why} for s, why in self.skipped],
        }


RANK_KEYS = ("max", *METRICS)


def rank_elements(
    spec: Spec, batch: int = 1, seq: int | None = None, dtype: str = "bf16", by: str = "max",
    window: int | None = None, enc_seq: int | None = None, widths: Widths = Widths(),
) -> ElementRanking:
    """Swap every design element of `spec` for each alternative and rank the swaps by effect.

    `by` is one of ``max`` (the largest relative change of the four quantities), ``params``,
    ``train_flops``, ``decode_bytes``, ``kv_cache``. `window` is the window of the
    sliding-window swaps of a spec without one: by default 1024 (Gemma 3's), or half the
    decode context if that is shorter. A swap that leaves an invalid spec, or a
    shape the variant cannot run (a learned position table shorter than seq), is skipped
    with its reason. The decode quantities hold weights and cache at `widths`.
    """
    if by not in RANK_KEYS:
        raise AnalysisError(f"by: unknown ranking {by!r}; expected one of {', '.join(RANK_KEYS)}")
    shape = {p: default_seq(spec, p) if seq is None else seq for p in ("train", "decode")}
    if window is None:  # a window as long as the context would change nothing
        window = min(DEFAULT_WINDOW, max(1, (shape["decode"] + 1) // 2))
    base = metrics(spec, batch, shape, dtype, enc_seq, widths)
    effects, skipped = [], []
    for sw in swaps(spec, window):
        try:
            v = variant(spec, sw.changes, name=f"{spec.name}[{sw.label}]")
            effects.append(SwapEffect(sw, v, base, metrics(v, batch, shape, dtype, enc_seq, widths)))
        except (SpecError, AnalysisError) as e:
            skipped.append((sw, str(e).split(": ", 1)[-1]))
    effects.sort(key=lambda e: (-e.effect(by), e.swap.element, e.swap.label))
    return ElementRanking(spec, batch, shape, dtype, by, base, tuple(effects), tuple(skipped), widths)


@dataclass(frozen=True)
class ElementSummary:
    """One design element over many specs: the size of its largest swap in each."""

    element: str
    effects: tuple[tuple[str, SwapEffect], ...]  # (spec name, its largest swap of this element)
    by: str

    @property
    def median(self) -> float:
        values = sorted(e.effect(self.by) for _, e in self.effects)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    @property
    def largest(self) -> tuple[str, SwapEffect]:
        return max(self.effects, key=lambda item: item[1].effect(self.by))

    def to_dict(self) -> dict[str, Any]:
        name, e = self.largest
        return {"element": self.element, "models": len(self.effects), "median_effect": self.median,
                "largest_effect": e.effect(self.by), "largest_in": name, "largest_swap": e.swap.label}


def elements_across(rankings: list[ElementRanking]) -> list[ElementSummary]:
    """Which elements matter most over many specs: each element by the median, over the specs,
    of its largest swap's effect; largest median first."""
    by = rankings[0].by
    found: dict[str, list[tuple[str, SwapEffect]]] = {}
    for r in rankings:
        for element, e in r.elements():
            found.setdefault(element, []).append((r.spec.name, e))
    out = [ElementSummary(element, tuple(effects), by) for element, effects in found.items()]
    return sorted(out, key=lambda s: (-s.median, s.element))
