"""Many points at once: the symbolic formulas lambdified once, evaluated with numpy.

sympy runs on the cold path only: one symbolic tree per (variant, phase), the spec's sizes
substituted, the sums over the chosen component lambdified into numpy functions of (batch,
seq). Every point after that is array arithmetic (float64: exact to 2^53, about 9e15; beyond,
relative error below 1e-15), so 10,000 points take milliseconds (bench/sweep_speed.py).

Axes follow the CLI: ``seq`` is the prompt in prefill and the cached tokens in decode (which
attends to seq + 1), as in ``analysis.analyze``; an encoder-decoder's encoder length follows seq.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import sympy

from costmodel import model
from costmodel import symbols as sym
from costmodel.analysis import AnalysisError, analyze, default_seq, in_component, select, symbolic_tree
from costmodel.devices.hardware import Hardware, hardware_dict
from costmodel.devices.kernels import Reads
from costmodel.phases import DECODE, PHASES
from costmodel.precision import Widths
from costmodel.runtime import kernels as kernel_sets
from costmodel.runtime.step_grid import on_tables, step_grid
from costmodel.runtime.timing import Kernels, predict
from costmodel.spec import Position, Spec
from costmodel.studies.attention_variants import Variant, kv_head_variants
from costmodel.symbols import DTYPE_BYTES

AXES = ("seq", "batch")
MAX_POINTS = 100_000  # per grid (seq x batch): a table of more says nothing a plot of fewer cannot
MAX_VALUE = 2**53  # float64 evaluation is exact up to here; past it nothing is a token count
#: quantity -> unit. time: the calibrated model on the profile's tables (``timing.predict``, over
#: the grid ``timing_grid.predict_grid``), the roofline where it has none; roofline: max(FLOPs /
#: peak, fused bytes / bandwidth), the lower bound.
QUANTITIES = {"intensity": "FLOP/B", "kv_cache": "B", "time": "s", "roofline": "s"}
_SEQ = sympy.Symbol("seq", integer=True, positive=True)  # the user's --seq, before the phase's offset


@dataclass(frozen=True)
class Axis:
    name: str  # seq or batch
    values: np.ndarray  # int64, increasing


def parse_axis(text: str) -> Axis:
    """``seq=512:131072`` (powers of two from 512, and 131072), ``seq=512:131072:100`` (100
    points, geometrically spaced, rounded to integers), ``batch=1,8,64`` (a list)."""
    m = re.fullmatch(r"\s*(\w+)\s*=\s*(.+?)\s*", text)
    if not m or m.group(1) not in AXES:
        raise AnalysisError(f"--over: {text!r}: expected NAME=START:STOP[:POINTS] or NAME=A,B,C "
                            f"with NAME one of {', '.join(AXES)}")
    name, body = m.groups()
    parts = body.split(":") if ":" in body else body.split(",")
    shown = body if len(body) <= 60 else body[:57] + "..."
    if len(parts) > MAX_POINTS:
        raise AnalysisError(f"--over {name}: {len(parts):,} values; at most {MAX_POINTS:,} points")
    try:
        numbers = [int(x) for x in parts if len(x.strip()) <= 20]
    except ValueError:
        numbers = []
    if len(numbers) != len(parts):
        raise AnalysisError(f"--over {name}: {shown!r} is not START:STOP[:POINTS] nor a list of "
                            "integers") from None
    stops = numbers if ":" not in body else numbers[:2]
    if max(stops) > MAX_VALUE:
        raise AnalysisError(f"--over {name}: {max(stops)} is past {MAX_VALUE} (2^53), where float64 "
                            "counts stop being exact")
    if ":" in body and len(numbers) == 3 and numbers[2] > MAX_POINTS:
        raise AnalysisError(f"--over {name}: {numbers[2]:,} points; at most {MAX_POINTS:,}")
    if ":" not in body:
        values = np.unique(np.array(numbers, dtype=np.int64))
        if values[0] < 1:
            raise AnalysisError(f"--over {name}: values must be at least 1 (got {values[0]})")
        return Axis(name, values)
    if len(numbers) not in (2, 3):
        raise AnalysisError(f"--over {name}: {body!r} is not START:STOP[:POINTS] nor a list of integers")
    start, stop = numbers[:2]
    if start < 1 or stop < start:
        raise AnalysisError(f"--over {name}: need 1 <= START <= STOP (got {start}:{stop})")
    if len(numbers) == 3:
        if numbers[2] < 1:
            raise AnalysisError(f"--over {name}: POINTS must be at least 1 (got {numbers[2]})")
        values = np.unique(np.rint(np.geomspace(start, stop, numbers[2])).astype(np.int64))
    else:
        doubling = start * 2 ** np.arange(int(np.log2(stop / start)) + 1, dtype=np.int64)
        values = np.unique(np.append(doubling, stop))
    return Axis(name, values)


def default_axis(spec: Spec) -> Axis:
    """seq from 512 to the trained context (one less with learned positions, so that decode,
    which attends to seq + 1, stays inside the table), doubling."""
    stop = spec.max_seq_len - (DECODE.seq_offset if spec.position is Position.learned else 0)
    return parse_axis(f"seq={min(512, stop)}:{stop}")


class Evaluator:
    """FLOPs, fused bytes and KV cache of one spec in one phase, as numpy functions of
    (batch, seq), summed over `component` (a path prefix; the whole model by default)."""

    def __init__(self, spec: Spec, phase: str, dtype: str, component: str = "", mla: str = "naive",
                 widths: Widths = Widths()) -> None:
        ph = PHASES[phase]
        tree = symbolic_tree(spec, phase, mla, widths=widths, dtype=dtype)
        values = {**model.spec_values(spec), sym.p: DTYPE_BYTES[dtype],
                  getattr(sym, ph.seq_symbol): _SEQ + ph.seq_offset, getattr(sym, ph.enc_symbol): _SEQ}
        exprs = [select(tree, q, component, spec.name).xreplace(values) for q in ("flops", "bytes_fused",
                                                                                  "kv_cache")]
        self._fn: Callable[..., list[Any]] = sympy.lambdify((sym.B, _SEQ), exprs, "numpy")

    def __call__(self, batch: np.ndarray, seq: np.ndarray) -> dict[str, np.ndarray]:
        b, s = np.broadcast_arrays(np.asarray(batch, dtype=np.float64), np.asarray(seq, dtype=np.float64))
        flops, nbytes, kv = (np.broadcast_to(x, b.shape).astype(np.float64) for x in self._fn(b, s))
        return {"flops": flops, "bytes_fused": nbytes, "kv_cache": kv}


@dataclass(frozen=True)
class Series:
    """One variant in one phase over its grid. A swept axis is the same in every series; an
    axis held fixed may differ by phase (the default seq: 2048 prompt tokens, 2047 cached)."""

    variant: str
    kv_heads: int
    phase: str
    seq: np.ndarray
    batch: np.ndarray
    values: np.ndarray  # shape (len(seq), len(batch))

    @property
    def label(self) -> str:
        return f"{self.variant} {self.phase}"

    def fixed(self, swept: Sequence[str]) -> str:
        """The axes held fixed, as text: ``seq=2047``."""
        return " ".join(f"{a}={getattr(self, a)[0]}" for a in AXES if a not in swept)


@dataclass(frozen=True)
class Sweep:
    spec: str
    quantity: str
    unit: str
    dtype: str
    component: str
    hardware: Hardware
    swept: tuple[str, ...]  # the axes given with --over, in order
    series: tuple[Series, ...]
    widths: Widths = Widths()  # the weights' and the cache's
    # quantity time: the kernels assumed, whether the profile's tables timed it ("calibrated")
    # or the roofline did (and why), and what the largest point read of the measured tables
    kernels: Kernels | None = None
    timed: str = ""
    reads: Reads = Reads()

    @property
    def points(self) -> int:
        return sum(s.values.size for s in self.series)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec, "quantity": self.quantity, "unit": self.unit, "dtype": self.dtype,
            "weights_dtype": self.widths.weights or self.dtype, "kv_dtype": self.widths.kv or self.dtype,
            "component": self.component or "total", "hardware": hardware_dict(self.hardware, self.dtype),
            "swept": list(self.swept),
            **({"time_model": self.timed, "kernels": kernel_sets.to_dict(self.kernels),
                **self.reads.to_dict()} if self.kernels is not None else {}),
            "series": [{"variant": s.variant, "kv_heads": s.kv_heads, "phase": s.phase, "seq": s.seq.tolist(),
                        "batch": s.batch.tolist(), "values": _json_values(s.values.tolist())}
                       for s in self.series],
            # A component with no bytes of its own at the fused bound (the softmax inside flash
            # attention) has no intensity: null in JSON (RFC 8259 has no Infinity), inf in tables.
            "null": "no bytes at the fused lower bound: no intensity",
        }


def _json_values(v: Any) -> Any:
    """A (nested) list of floats with inf and NaN as null: JSON has neither."""
    if isinstance(v, list):
        return [_json_values(x) for x in v]
    return v if math.isfinite(v) else None


def quantity_of(q: str, numbers: dict[str, np.ndarray], hw: Hardware, dtype: str) -> np.ndarray:
    """intensity (FLOPs / fused bytes), kv_cache (bytes) or roofline seconds."""
    if q == "intensity":
        ratio: np.ndarray = numbers["flops"] / numbers["bytes_fused"]
        return ratio
    if q == "kv_cache":
        return numbers["kv_cache"]
    return np.maximum(numbers["flops"] / hw.peak(dtype), numbers["bytes_fused"] / hw.memory_bandwidth)


def time_model(hw: Hardware, dtype: str, widths: Widths) -> str:
    """How ``sweep --quantity time`` times a pass on `hw`: "calibrated" (its tables), or the
    roofline and why."""
    if on_tables(hw, dtype, widths):
        return "calibrated"
    if hw.tables_for(dtype):
        return (f"roofline: {hw.name}'s tables were measured with {dtype} weights and cache, not "
                f"{widths.label(dtype).strip(' ()')}")
    return f"roofline: {hw.name} has no efficiency tables for {dtype}"


def sweep(
    spec: Spec, quantity: str, axes: Sequence[Axis], hw: Hardware, *, batch: int = 1,
    seq: int | None = None, phases: Sequence[str] = ("prefill", "decode"), dtype: str = "bf16",
    kv_heads: Sequence[int] | None = None, component: str = "", widths: Widths = Widths(),
    kernels: Kernels | None = None,
) -> Sweep:
    """`quantity` over the grid of `axes` (the rest fixed at `batch`, `seq`), for each
    key/value-head variant (default: h, the spec's k, 1) and phase; weights and cache at
    `widths` (``costmodel.precision``); a time with `kernels` (default: the device's,
    ``runtime.kernels``)."""
    if quantity not in QUANTITIES:
        raise AnalysisError(f"quantity: unknown quantity {quantity!r}; expected one of "
                            f"{', '.join(QUANTITIES)}")
    given = {a.name: a.values for a in axes}
    if len(given) != len(axes):
        raise AnalysisError("--over: each axis at most once")
    points = int(np.prod([len(a.values) for a in axes]))
    if points > MAX_POINTS:
        raise AnalysisError(f"--over: a grid of {points:,} points; at most {MAX_POINTS:,} "
                            "(fewer values per axis)")
    for name, fixed in (("--batch", batch), ("--seq", seq)):  # the axes' bound, for the fixed values too
        if fixed is not None and fixed > MAX_VALUE:
            raise AnalysisError(f"{name}: {fixed} is past {MAX_VALUE} (2^53), where float64 counts stop "
                                "being exact")
    hw.peak(dtype)
    variants = kv_head_variants(spec, kv_heads)
    timed = time_model(hw, dtype, widths) if quantity == "time" else ""
    kernels = kernels or kernel_sets.KERNELS[kernel_sets.default_kernels(hw)]
    evaluators, predictions = {}, []
    for v in variants:
        for phase in phases:
            grid = {"seq": given.get("seq", [seq or default_seq(spec, phase)]), "batch": given.get("batch",
                                                                                                   [batch])}
            # The largest point through the exact path: it checks the request (learned positions,
            # the component) and costs one analysis; a time says what it read of the tables there.
            a = analyze(v.spec, phase, batch=int(max(grid["batch"])), seq=int(max(grid["seq"])), dtype=dtype,
                        mla=v.mla, **widths.options())
            a.total(component)
            if timed == "calibrated":
                predictions.append(predict(a, hw, kernels))
            evaluators[v.label, phase] = (v, grid, Evaluator(v.spec, phase, dtype, component, v.mla, widths))
    swept = evaluate(spec.name, quantity, evaluators, hw, dtype, component, tuple(given),
                     (widths, kernels) if timed == "calibrated" else None)
    return replace(swept, widths=widths, kernels=kernels if quantity == "time" else None, timed=timed,
                   reads=Reads.union(predictions))


def evaluate(name: str, quantity: str,
             evaluators: dict[tuple[str, str], tuple[Variant, dict[str, np.ndarray | list[int]], Evaluator]],
             hw: Hardware, dtype: str, component: str, swept: tuple[str, ...],
             calibrated: tuple[Widths, Kernels] | None = None) -> Sweep:
    """The hot path: numpy over every grid (no sympy); a time on the profile's tables
    (`calibrated`: the widths and kernels) through ``step_grid``."""
    out = []
    for (label, phase), (v, grid, ev) in evaluators.items():
        s = np.asarray(grid["seq"], dtype=np.int64)
        b = np.asarray(grid["batch"], dtype=np.int64)
        if calibrated is not None:
            keep = (lambda k: in_component(k, component)) if component else None
            values = step_grid(v.spec, phase, b[np.newaxis, :], s[:, np.newaxis], hw, dtype, *calibrated,
                               mla=v.mla, select=keep)
        else:
            numbers = ev(b[np.newaxis, :], s[:, np.newaxis])
            values = quantity_of("roofline" if quantity == "time" else quantity, numbers, hw, dtype)
        out.append(Series(label, v.spec.n_kv_heads, phase, s, b, values))
    return Sweep(name, quantity, QUANTITIES[quantity], dtype, component, hw, swept, tuple(out))
