"""The charts of a sweep (`costmodel sweep --plot FILE`), drawn by ``report.svg`` as every chart is.

- intensity: a roofline (Williams, Waterman & Patterson 2009). x = arithmetic intensity (FLOP/B,
  fused bytes), y = attainable FLOP/s = min(peak, intensity x bandwidth), both logarithmic; the
  roof with its ridge point, and each point where that pass sits on the roof, a colour per
  variant and a marker per phase (prefill a disc, decode a ring, train a square). Under it the
  lanes: one per variant and phase, the same points on the same x axis, spread apart so that
  series sharing a stretch of roof stay readable; the memory-bound side of the ridge shaded, each
  lane's leftmost and rightmost points named.
- kv_cache, time: a line chart over the first swept axis (log), one line per variant and phase
  (decode dashed); with a second swept axis, one panel per value of it (its first, middle and
  last); the KV-cache chart marks the device's memory.

A grid too large to draw point by point is thinned evenly (first and last values kept, at most
`MOST_PER_SERIES` points a series), values a log axis cannot place (0, infinite) are left out,
and the chart's subtitle counts the points drawn; the table (the section's rows) holds
exactly the points drawn, the command's table every point.
"""

from __future__ import annotations

import numpy as np

from costmodel import units
from costmodel.analysis import AnalysisError
from costmodel.report import svg
from costmodel.report.attention import fixed_text
from costmodel.report.section import Cell, Section
from costmodel.studies.sweep import Series, Sweep

MARKERS = {"prefill": "disc", "decode": "ring", "train": "square"}
MOST_PER_SERIES = 300  # points a series draws: enough to show every bend, an SVG of at most a few MB
AXIS_NAMES = {"seq": "sequence length (tokens: the prompt in prefill, cached in decode; log)",
              "batch": "batch size B (sequences, log)"}
QUANTITY_NAMES = {"intensity": "intensity", "kv_cache": "KV cache", "time": "time",
                  "roofline": "roofline time"}
FORMATS = {"intensity": "intensity", "kv_cache": "bytes", "time": "s", "roofline": "s"}


def tokens(v: float) -> str:
    """512, 1K, 128K, 2M: token counts and batch sizes, at powers of two on the axis."""
    for size, prefix in ((2**20, "M"), (2**10, "K")):
        if v >= size:
            return f"{v / size:.3g}{prefix}"
    return f"{v:.3g}"


POWERS_OF_TWO = tuple(2.0**k for k in range(64))


def picks(n: int, most: int) -> list[int]:
    """At most `most` indices of 0..n-1, evenly spread, the first and the last kept."""
    if n <= most:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max(most, 2))})


def _span(sw: Sweep) -> str:
    parts = []
    for axis in sw.swept:
        values = getattr(sw.series[0], axis)
        parts.append(f"{axis} {values[0]:,}..{values[-1]:,} ({len(values)} values)")
    fixed = fixed_text(sw)
    return ", ".join(parts + ([fixed] if fixed else []))


def _point_name(sw: Sweep, s: Series, i: int, j: int) -> str:
    return " ".join(f"{a}={int(getattr(s, a)[k]):,}" for a, k in (("seq", i), ("batch", j)) if a in sw.swept)


def _colours(sw: Sweep) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sw.series:
        out.setdefault(s.variant, len(out))
    return out


Rows = list[tuple[Cell, ...]]


def _grid(s: Series) -> tuple[list[int], list[int]]:
    """The (seq, batch) indices a roofline draws: as many of each axis as keep it under the limit."""
    ns, nb = s.values.shape
    per = max(2, int(np.sqrt(MOST_PER_SERIES))) if ns > 1 and nb > 1 else MOST_PER_SERIES
    return picks(ns, per), picks(nb, per)


def _drawn(drawn: int, sw: Sweep) -> str:
    return "" if drawn == sw.points else f"; {drawn:,} of its {sw.points:,} points drawn"


def _drawable(v: float) -> bool:
    """A value a log axis can place: finite and above 0 (a component that moves no fused bytes
    has an infinite intensity; one that caches nothing, a KV cache of 0)."""
    return bool(np.isfinite(v) and v > 0)


def sweep_section(sw: Sweep) -> Section:
    """The sweep's chart (a roofline with its lanes for intensity, lines otherwise) and the points
    it draws as a table: variant and phase, seq, batch, the value. Values a log axis cannot place
    are left out (the subtitle counts the points drawn); none left is one line of bad input."""
    chart, rows = _roofline(sw) if sw.quantity == "intensity" else _lines(sw)
    if not rows:
        raise AnalysisError(f"--plot: no point of this sweep can go on a log axis (every {sw.quantity} of "
                            f"{sw.component or 'the whole model'} is 0 or infinite)")
    what = time_name(sw) if sw.quantity == "time" else QUANTITY_NAMES.get(sw.quantity, sw.quantity)
    return Section(f"sweep-{sw.quantity}", f"{sw.spec}: {what} of {sw.component or 'the whole model'}", chart,
                   ("variant and phase", "seq", "batch", f"{sw.quantity} ({sw.unit})"), rows,
                   (f"{sw.dtype}{sw.widths.label(sw.dtype)}; {_span(sw)}{_drawn(len(rows), sw)}",),
                   fmt=("", "count", "count", FORMATS[sw.quantity]))


def _roofline(sw: Sweep) -> tuple[str, Rows]:
    """Top: the roof and every point on it. Bottom: one lane per variant and phase."""
    hw, dtype = sw.hardware, sw.dtype
    peak, bw = hw.peak(dtype), hw.memory_bandwidth
    ridge = peak / bw
    colours = _colours(sw)
    on_roof: list[svg.Series] = []
    lanes: list[svg.Series] = []
    rows: Rows = []
    for s in sw.series:
        ii, jj = _grid(s)
        at = [(i, j) for i in ii for j in jj if _drawable(s.values[i, j])]
        xs = [float(s.values[i, j]) for i, j in at]
        labels = [_point_name(sw, s, i, j) for i, j in at]
        rows += [(s.label, int(s.seq[i]), int(s.batch[j]), float(s.values[i, j])) for i, j in at]
        colour, marker = colours[s.variant], MARKERS.get(s.phase, "disc")
        on_roof.append(svg.Series(s.label, [(x, min(peak, x * bw)) for x in xs], labels=labels, colour=colour,
                                  marker=marker))
        lanes.append(svg.Series(s.label, [(x, 0.0) for x in xs], labels=labels, colour=colour, marker=marker))
    x = svg.Axis("arithmetic intensity (FLOP/B; bytes: the fused lower bound, weights and KV cache once; "
                 "log)", "FLOP/B")
    roof = svg.xy("Each point on the roof: min(peak, bandwidth x intensity)", on_roof, x,
                  svg.Axis("attainable performance (FLOP/s, log)", "FLOP/s"), roof=(peak, bw), height=440)
    strip = svg.strips("The same points, one lane per variant and phase (shaded: memory-bound)", lanes, x,
                       svg.x_span(on_roof, x, (peak, bw)), x_limits=[(f"ridge {ridge:.3g} FLOP/B", ridge)],
                       shade_below=ridge)
    chart = svg.stack(f"{sw.spec}: where each variant and phase sits on the {hw.name} roofline "
                      f"({sw.component or 'whole model'}, {dtype})", [roof, strip],
                      f"{_span(sw)}{_drawn(len(rows), sw)}")
    return chart, rows


def time_name(sw: Sweep) -> str:
    """What a swept time is: the calibrated model's on the device's tables, or the roofline's."""
    return "time" if sw.quantity == "time" and sw.timed == "calibrated" else "roofline time"


def _lines(sw: Sweep) -> tuple[str, Rows]:
    """One panel per picked value of the second swept axis (its first, middle and last); in each,
    a line per variant and phase over the first axis. Values of 0 (no cache) have no place on a
    log axis: left out."""
    x_axis = sw.swept[0]
    other = next(a for a in ("seq", "batch") if a != x_axis)
    s0 = sw.series[0]
    n_other = len(getattr(s0, other))
    chosen = sorted({0, n_other // 2, n_other - 1}) if other in sw.swept else [0]
    colours = _colours(sw)
    y = (svg.Axis(f"{time_name(sw)} on {sw.hardware.name} (s, log)", "s")
         if sw.quantity in ("time", "roofline") else svg.Axis("KV cache (bytes, log)", "B"))
    limits = ([(f"{sw.hardware.name} memory {units.decimal_bytes(sw.hardware.memory_bytes)}",
                float(sw.hardware.memory_bytes))] if sw.quantity == "kv_cache" else [])
    x = svg.Axis(AXIS_NAMES[x_axis], fmt=tokens, ticks=POWERS_OF_TWO)
    panels: list[tuple[str, list[svg.Series]]] = []
    rows: Rows = []
    for k in chosen:
        series = []
        held = int(getattr(s0, other)[k])
        for s in sw.series:
            values = s.values if x_axis == "seq" else s.values.T  # rows along x
            along = [i for i in picks(values.shape[0], MOST_PER_SERIES) if _drawable(values[i, k])]
            xs = getattr(s, x_axis)
            series.append(svg.Series(s.label, [(float(xs[i]), float(values[i, k])) for i in along], line=True,
                                     dashed=s.phase == "decode", colour=colours[s.variant],
                                     marker=MARKERS.get(s.phase, "disc"),
                                     labels=[f"{s.label}, {x_axis}={int(xs[i]):,}" for i in along]))
            for i in along:
                at = {x_axis: int(xs[i]), other: int(getattr(s, other)[k])}
                rows.append((s.label, at["seq"], at["batch"], float(values[i, k])))
        panels.append((f"{other} = {held:,}" if other in sw.swept else
                       "One line per variant and phase (decode dashed)", series))
    what = time_name(sw) if sw.quantity == "time" else QUANTITY_NAMES.get(sw.quantity, sw.quantity)
    where = f"on {sw.hardware.name}" if sw.quantity == "time" else f"{sw.hardware.name}'s memory marked"
    height = 400 if len(panels) > 1 else 480
    charts = [svg.xy(t, series, x, y, y_limits=limits, height=height) for t, series in panels]
    title = f"{sw.spec}: {what} of {sw.component or 'the whole model'} against {x_axis}, {sw.dtype}, {where}"
    chart = svg.stack(title, charts, f"{_span(sw)}{_drawn(len(rows), sw)}")
    return chart, rows
