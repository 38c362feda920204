"""SVG primitives for ``costmodel report``'s page and every ``--plot`` file, written as text (no
plotting library, no JavaScript): horizontal bars, paired bars, stacked bars, and x-y charts
(`xy`: lines or points on log or linear axes, with a roof, named limits, a legend), lanes of
points under an x-y chart (`strips`), charts one under another (`stack`) and a waterfall.

Long because: one file of primitives sharing their private parts (ticks spaced by their width,
margins, markers, legends, the title); split, each chart would import another's privates.

Every chart is an ``<svg>`` with a ``<title>`` and a visible title saying what it shows and where,
axes with ticks and units, and one element per datum carrying its value (``data-value``; bars
``class="bar"``, stacked segments ``class="seg"``, points ``class="point"``), so a test (or a
reader's tool) can count and read them. Tick labels are spaced by their estimated width: they
never overlap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

Fmt = Callable[[float], str]

#: Colour-blind-safe (Okabe and Ito 2008), in order of use.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CHAR_W = 6.6  # px per character at the 11 px font used for labels (an upper estimate)
FONT = 'font-family="sans-serif" font-size="11"'
#: An axis's tick labels and its name (with the unit), each in a group of its own: what a test
#: reads to check that labels never overlap and that every axis says its unit.
TICKS = '<g class="ticks" data-axis="{}">'
NAME = '<g class="axis-name" data-axis="{}">'


def _text_w(text: str) -> float:
    return len(text) * CHAR_W


def _open(width: float, height: float, title: str) -> list[str]:
    t = escape(title)
    size = title_size(title, width)
    return [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT}>', f"<title>{t}</title>",
            f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-size="{size}" '
            f'font-weight="bold">{t}</text>']


def title_size(title: str, width: float) -> int:
    """The visible title's font size: 13 px, smaller (down to 9) when a long title would run past
    the chart's edges (bold text is about 0.65 em a character)."""
    for size in (13, 12, 11, 10):
        if len(title) * size * 0.65 <= width - 16:
            return size
    return 9


def nice_ticks(top: float, most: int) -> list[float]:
    """Ticks 0, s, 2s, ... covering [0, top], s a 1-2-5 step, at most `most` of them."""
    if top <= 0:
        return [0.0]
    for k in range(-30, 30):
        for m in (1, 2, 5):
            step = m * 10.0 ** k
            n = math.ceil(top / step - 1e-9)
            if n + 1 <= max(most, 2):
                return [i * step for i in range(n + 1)]
    return [0.0, top]


def log_ticks(lo: float, hi: float, most: int) -> list[float]:
    """Powers of ten spanning [lo, hi], every k-th decade so that at most `most` are drawn."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b == a:
        b += 1
    k = max(1, math.ceil((b - a + 1) / max(most, 2)))
    return [10.0 ** e for e in range(a, b + 1, k)]


def _fits(labels: Sequence[str], span: float) -> bool:
    """Labels evenly spread over `span` px, each centred on its tick, do not touch."""
    if len(labels) < 2:
        return True
    gap = span / (len(labels) - 1)
    return all((_text_w(x) + _text_w(y)) / 2 + 6 <= gap for x, y in zip(labels, labels[1:], strict=False))


def _linear_axis(top: float, span: float, fmt: Fmt) -> list[float]:
    for most in range(8, 1, -1):
        ticks = nice_ticks(top, most)
        if _fits([fmt(t) for t in ticks], span):
            return ticks
    return [0.0, nice_ticks(top, 2)[-1]]


def _label_margin(labels: Sequence[str], width: int) -> float:
    """The left margin that holds the longest row label (at most 45% of the chart)."""
    return min(max(_text_w(x) for x in labels) + 12, width * 0.45) if labels else 60


def _x_axis(ticks: Sequence[float], left: float, scale: float, top: float, bottom: float, fmt: Fmt,
            name: str, width: float) -> list[str]:
    """A linear x axis under horizontal bars: a grid line and label per tick, the axis's name."""
    out = [f'<line x1="{left + t * scale:.1f}" y1="{top}" x2="{left + t * scale:.1f}" y2="{bottom}" '
           'stroke="#ddd"/>' for t in ticks]
    out.append(TICKS.format("x"))
    out += [f'<text x="{left + t * scale:.1f}" y="{bottom + 14}" text-anchor="middle">{escape(fmt(t))}</text>'
            for t in ticks]
    out.append("</g>")
    out.append(NAME.format("x") + f'<text x="{left + width / 2:.1f}" y="{bottom + 32}" text-anchor="middle">'
               f"{escape(name)}</text></g>")
    return out


def hbars(title: str, labels: Sequence[str], values: Sequence[float], fmt: Fmt, axis: str,
          width: int = 760) -> str:
    """One horizontal bar per label, on a linear axis from 0 labelled `axis` (its unit)."""
    left = _label_margin(labels, width)
    row, top_pad = 22, 30
    plot_w = width - left - 90
    height = top_pad + row * len(labels) + 48
    ticks = _linear_axis(max(values, default=0) or 1, plot_w, fmt)
    scale = plot_w / (ticks[-1] or 1)
    y_axis = top_pad + row * len(labels)
    out = _open(width, height, title) + _x_axis(ticks, left, scale, top_pad, y_axis, fmt, axis, plot_w)
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = top_pad + i * row
        w = max(v, 0) * scale
        out.append(f'<text x="{left - 6:.1f}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect class="bar" data-label="{escape(label)}" data-value="{v!r}" x="{left:.1f}" '
                   f'y="{y + 4}" width="{w:.2f}" height="{row - 8}" fill="{PALETTE[0]}">'
                   f"<title>{escape(label)}: {escape(fmt(v))}</title></rect>")
        out.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}">{escape(fmt(v))}</text>')
    out.append(f'<line x1="{left:.1f}" y1="{top_pad}" x2="{left:.1f}" y2="{y_axis}" stroke="#333"/>')
    out.append("</svg>")
    return "\n".join(out)


def paired_bars(title: str, labels: Sequence[str], series: Sequence[str],
                values: Sequence[Sequence[float]], width: int = 760) -> str:
    """Shares (0 to 1) per label, one bar per series side by side: FLOP share against time share."""
    left = _label_margin(labels, width)
    group = 14 * len(series) + 14
    top_pad = 30
    plot_w = width - left - 70
    height = top_pad + group * len(labels) + 48 + 18
    fmt: Fmt = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    ticks = _linear_axis(1.0, plot_w, fmt)
    y_axis = top_pad + group * len(labels)
    out = _open(width, height, title) + _x_axis(ticks, left, plot_w, top_pad, y_axis, fmt,
                                                "share of the phase (%)", plot_w)
    for i, label in enumerate(labels):
        y = top_pad + i * group
        out.append(f'<text x="{left - 6:.1f}" y="{y + group / 2 + 4:.1f}" text-anchor="end">'
                   f"{escape(label)}</text>")
        for j, name in enumerate(series):
            v = values[i][j]
            w = max(v, 0) * plot_w
            by = y + 7 + 14 * j
            out.append(f'<rect class="bar" data-label="{escape(label)}" data-series="{escape(name)}" '
                       f'data-value="{v!r}" x="{left:.1f}" y="{by}" width="{w:.2f}" height="12" '
                       f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)}, {escape(name)}: '
                       f"{100 * v:.2f}%</title></rect>")
            out.append(f'<text x="{left + w + 4:.1f}" y="{by + 10}">{100 * v:.2f}%</text>')
    out.append(f'<line x1="{left:.1f}" y1="{top_pad}" x2="{left:.1f}" y2="{y_axis}" stroke="#333"/>')
    out += _legend(series, left, height - 12)
    out.append("</svg>")
    return "\n".join(out)


def _legend(names: Sequence[str], x0: float, y: float) -> list[str]:
    out, x = [], x0
    for j, name in enumerate(names):
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" '
                   f'fill="{PALETTE[j % len(PALETTE)]}"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{y:.1f}">{escape(name)}</text>')
        x += 14 + _text_w(name) + 16
    return out


def stacked_bars(title: str, labels: Sequence[str], parts: Sequence[str], values: Sequence[Sequence[float]],
                 fmt: Fmt, axis: str, limit: tuple[str, float] | None = None, width: int = 760) -> str:
    """One horizontal bar per label, stacked from `parts` (zero parts drawn as nothing, still
    listed in the table); `limit`: a named vertical line (a device's memory)."""
    left = _label_margin(labels, width)
    row, top_pad = 30, 30 if limit is None else 44  # room for the line's name below the title
    plot_w = width - left - 90
    height = top_pad + row * len(labels) + 48 + 18
    top = max([sum(v) for v in values] + ([limit[1]] if limit else []), default=1) or 1
    ticks = _linear_axis(top, plot_w, fmt)
    scale = plot_w / (ticks[-1] or 1)
    y_axis = top_pad + row * len(labels)
    out = _open(width, height, title) + _x_axis(ticks, left, scale, top_pad, y_axis, fmt, axis, plot_w)
    for i, label in enumerate(labels):
        y = top_pad + i * row
        out.append(f'<text x="{left - 6:.1f}" y="{y + 19}" text-anchor="end">{escape(label)}</text>')
        x = left
        for j, name in enumerate(parts):
            v = values[i][j]
            w = max(v, 0) * scale
            out.append(f'<rect class="seg" data-label="{escape(label)}" data-series="{escape(name)}" '
                       f'data-value="{v!r}" x="{x:.2f}" y="{y + 5}" width="{w:.2f}" height="{row - 10}" '
                       f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)}, {escape(name)}: '
                       f"{escape(fmt(v))}</title></rect>")
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 19}">{escape(fmt(sum(values[i])))}</text>')
    if limit is not None:
        x = left + limit[1] * scale
        out.append(f'<line x1="{x:.1f}" y1="{top_pad - 4}" x2="{x:.1f}" y2="{y_axis}" stroke="#D55E00" '
                   'stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x - 4:.1f}" y="{top_pad - 6}" text-anchor="end" fill="#D55E00">'
                   f"{escape(limit[0])}</text>")
    out.append(f'<line x1="{left:.1f}" y1="{top_pad}" x2="{left:.1f}" y2="{y_axis}" stroke="#333"/>')
    out += _legend(parts, left, height - 8)
    out.append("</svg>")
    return "\n".join(out)


def _decade(x: float, unit: str) -> str:
    """A log-axis tick (a decade, or 2 and 5 times one) with an SI prefix: 20 ms, 1 PFLOP/s."""
    e = math.floor(math.log10(x) + 1e-9)
    prefixes = {-9: "n", -6: "\u00b5", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
    base = 3 * math.floor(e / 3)
    if base < 0 and unit != "s":  # 0.1 FLOP/B, not 100 mFLOP/B; but 20 ms
        return f"{x:.3g} {unit}".strip()
    if base in prefixes:
        return f"{x / 10.0 ** base:.3g} {prefixes[base]}{unit}".strip()
    return f"{x:.0e} {unit}".strip()


@dataclass(frozen=True)
class Axis:
    """One axis of an `xy` chart: its name with the unit (what the reader sees under or beside it),
    log or linear, and how a tick is written (`unit` appended to decades on a log axis)."""

    name: str
    unit: str = ""
    log: bool = True
    fmt: Fmt | None = None  # a tick's text (default: 3 significant digits; decades with an SI prefix)
    ticks: Sequence[float] = ()  # where ticks may go (powers of two for tokens), thinned to fit

    def text(self, v: float) -> str:
        if self.fmt is not None:
            return self.fmt(v)
        return _decade(v, self.unit) if self.log else f"{v:.3g}"


@dataclass(frozen=True)
class Series:
    """Points of one kind, in one colour (its index in the chart's list, or `colour`, a palette
    index shared by series of one variant), named in the legend; `line` joins them in order;
    `labels` name each point (its tooltip and ``data-label``), and with `annotate` are written
    beside it (a few points whose x is not their name: a batch size on a latency-throughput
    curve); `marker`: "disc", "ring" or "square", a second kind beside the colour (a phase)."""

    name: str
    points: Sequence[tuple[float, float]]
    line: bool = False
    labels: Sequence[str] = ()
    dashed: bool = False
    annotate: bool = False
    colour: int | None = None
    marker: str = "disc"


def _colour(s: Series, g: int) -> str:
    return PALETTE[(g if s.colour is None else s.colour) % len(PALETTE)]


def _mark(s: Series, colour: str, cx: float, cy: float, r: float, attrs: str = "", tip: str = "") -> str:
    """One marker: a disc, a ring (white inside) or a square, carrying `attrs` (its data)."""
    paint = (f'fill="white" stroke="{colour}" stroke-width="1.5"' if s.marker == "ring"
             else f'fill="{colour}" fill-opacity="0.8"')
    tail = f"<title>{tip}</title>" if tip else ""
    if s.marker == "square":
        return (f'<rect{attrs} x="{cx - r:.1f}" y="{cy - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" '
                f'{paint}>{tail}</rect>')
    return f'<circle{attrs} cx="{cx:.1f}" cy="{cy:.1f}" r="{r:g}" {paint}>{tail}</circle>'


def _series_legend(series: Sequence[Series], x0: float, right: float) -> list[tuple[float, int]]:
    """Where each named series' legend entry goes: (x, row), rows wrapped at `right`."""
    out, x, row = [], x0, 0
    for s in series:
        w = 24 + _text_w(s.name) + 14
        if x > x0 and x + w - 14 > right:
            x, row = x0, row + 1
        out.append((x, row))
        x += w
    return out


def _draw_legend(series: Sequence[Series], places: Sequence[tuple[float, int]], y0: float) -> list[str]:
    out = []
    for g, (s, (x, row)) in enumerate(zip(series, places, strict=True)):
        if not s.name:
            continue
        y, colour = y0 + 16 * row, _colour(s, g)
        if s.line:
            dash = ' stroke-dasharray="6 3"' if s.dashed else ""
            out.append(f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 18:.1f}" y2="{y - 4:.1f}" '
                       f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(_mark(s, colour, x + 9, y - 4, 3.5))
        out.append(f'<text x="{x + 24:.1f}" y="{y:.1f}">{escape(s.name)}</text>')
    return out


def _range(values: Sequence[float], log: bool) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if log:
        return (lo / 2, hi * 2) if lo < hi else (lo / 4, hi * 4)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.1 or 1.0
    return (0.0 if lo >= 0 and lo - pad < 0 else lo - pad), hi + pad


def _ticks(axis: Axis, lo: float, hi: float, span: float, along: bool) -> list[float]:
    """Tick values in [lo, hi]: decades on a log axis, a 1-2-5 step on a linear one, as many as
    fit: along x, labels spaced by their width; along y, 16 px apart."""
    if axis.ticks:
        candidates = [t for t in axis.ticks if lo <= t <= hi]
        for k in range(1, len(candidates) + 1):
            ticks = candidates[::k]
            if len(ticks) < 2 or _fits_along(axis, ticks, lo, hi, span, along):
                return ticks
    fine = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi] if axis.log else []
    for most in range(12, 1, -1):
        ticks = ([t for t in log_ticks(lo, hi, most) if lo <= t <= hi] if axis.log
                 else [t for t in nice_ticks(hi, most) if lo <= t <= hi])  # none past the frame
        if axis.log and len(ticks) < 3 and len(fine) <= most:  # under three decades: 1-2-5 ticks
            ticks = fine
        if len(ticks) >= 2 and _fits_along(axis, ticks, lo, hi, span, along):
            return ticks
    return ticks


def _fits_along(axis: Axis, ticks: Sequence[float], lo: float, hi: float, span: float, along: bool) -> bool:
    """Along x, the widest label fits between the closest two ticks (in pixels); along y, 16 px
    apart."""
    f = math.log10 if axis.log else (lambda v: v)
    gap = span * min(f(b) - f(a) for a, b in zip(ticks, ticks[1:], strict=False)) / (f(hi) - f(lo))
    return gap >= ((max(_text_w(axis.text(t)) for t in ticks) + 6) if along else 16)


XY_LEFT, XY_RIGHT = 96, 20  # an x-y chart's margins: the y tick labels clear of the rotated axis name


def x_span(series: Sequence[Series], x: Axis, roof: tuple[float, float] | None = None,
           x_limits: Sequence[tuple[str, float]] = ()) -> tuple[float, float]:
    """The x range `xy` draws these series over (`strips` below it takes the same, to align)."""
    lo, hi = _range([p[0] for s in series for p in s.points] + [v for _, v in x_limits] or [1.0], x.log)
    if roof is not None:
        ridge = roof[0] / roof[1]
        lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
    return lo, hi


def _inside(ticks: Sequence[float], px: Callable[[float], float], text: Fmt, width: float) -> list[float]:
    """The x ticks whose centred labels stay inside the chart (one at the plot's edge may not)."""
    return [t for t in ticks if _text_w(text(t)) / 2 <= px(t) <= width - _text_w(text(t)) / 2]


def _tick_labels(axis: str, texts: Sequence[str]) -> list[str]:
    return [TICKS.format(axis), *texts, "</g>"]


def xy(title: str, series: Sequence[Series], x: Axis, y: Axis, roof: tuple[float, float] | None = None,
       x_limits: Sequence[tuple[str, float]] = (), y_limits: Sequence[tuple[str, float]] = (),
       width: int = 760, height: int = 480, callouts: Sequence[tuple[str, float, float]] = ()) -> str:
    """Series of (x, y) points (> 0 on a log axis) as markers (``class="point"``, one per point,
    ``data-x``/``data-y`` exact) and, for a `line` series, a polyline through them; `roof`:
    (peak, bandwidth), the roofline min(peak, bandwidth * x) with its ridge marked; `x_limits`,
    `y_limits`: named dashed lines (a device's memory, a latency target); `callouts`: (text, x, y),
    a ring around a point and its name beside it, on the side with more room (the best layout).
    A legend of many series wraps onto more rows, each making the chart 16 px taller."""
    left, top_pad, bottom = XY_LEFT, 30, 74
    pw, ph = width - left - XY_RIGHT, height - top_pad - bottom
    places = _series_legend(series, left, width - XY_RIGHT)
    height += 16 * max((row for _, row in places), default=0)
    x_lo, x_hi = x_span(series, x, roof, x_limits)
    y_lo, y_hi = _range([p[1] for s in series for p in s.points] + [v for _, v in y_limits] or [1.0], y.log)
    if roof is not None:
        peak, bw = roof
        y_hi = max(y_hi, peak * 2)
        y_lo = min(y_lo, bw * x_lo)
    f = math.log10

    def px(v: float) -> float:
        return left + ((f(v) - f(x_lo)) / (f(x_hi) - f(x_lo)) if x.log else (v - x_lo) / (x_hi - x_lo)) * pw

    def py(v: float) -> float:
        frac = (f(v) - f(y_lo)) / (f(y_hi) - f(y_lo)) if y.log else (v - y_lo) / (y_hi - y_lo)
        return top_pad + ph - frac * ph

    out = _open(width, height, title)
    x_ticks, y_ticks = _ticks(x, x_lo, x_hi, pw, along=True), _ticks(y, y_lo, y_hi, ph, along=False)
    x_ticks = _inside(x_ticks, px, x.text, width)
    out += [f'<line x1="{px(t):.1f}" y1="{top_pad}" x2="{px(t):.1f}" y2="{top_pad + ph}" stroke="#eee"/>'
            for t in x_ticks]
    out += [f'<line x1="{left}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
            for t in y_ticks]
    # the frame over the grid: a tick on the plot's edge would hide it
    out.append(f'<rect x="{left}" y="{top_pad}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out += _tick_labels("x", [f'<text x="{px(t):.1f}" y="{top_pad + ph + 14}" text-anchor="middle">'
                              f"{escape(x.text(t))}</text>" for t in x_ticks])
    out += _tick_labels("y", [f'<text x="{left - 4}" y="{py(t) + 4:.1f}" text-anchor="end">'
                              f"{escape(y.text(t))}</text>" for t in y_ticks])
    out.append(NAME.format("x") + f'<text x="{left + pw / 2:.1f}" y="{top_pad + ph + 32}" '
               f'text-anchor="middle">{escape(x.name)}</text></g>')
    out.append(NAME.format("y") + f'<text transform="translate(14 {top_pad + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y.name)}</text></g>')
    if roof is not None:
        peak, bw = roof
        ridge = peak / bw
        out.append(f'<polyline class="roof" fill="none" stroke="#D55E00" stroke-width="2" points="'
                   f'{px(x_lo):.1f},{py(bw * x_lo):.1f} {px(ridge):.1f},{py(peak):.1f} '
                   f'{px(x_hi):.1f},{py(peak):.1f}"/>')
        # left of the ridge, above the sloped roof: never past the plot's right edge
        out.append(f'<text x="{px(ridge) - 4:.1f}" y="{py(peak) - 5:.1f}" text-anchor="end" fill="#D55E00">'
                   f"roof: ridge at {ridge:.3g} FLOP/B</text>")
    out += _limits(x_limits, y_limits, px, py, (left, top_pad, pw, ph))
    for g, s in enumerate(series):
        colour = _colour(s, g)
        if s.line and len(s.points) > 1:
            dash = ' stroke-dasharray="6 3"' if s.dashed else ""
            coords = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in s.points)
            out.append(f'<polyline class="line" data-series="{escape(s.name)}" fill="none" stroke="{colour}" '
                       f'stroke-width="2"{dash} points="{coords}"/>')
        for i, (a, b) in enumerate(s.points):
            label = s.labels[i] if i < len(s.labels) else s.name
            data = (f' class="point" data-label="{escape(label)}" data-series="{escape(s.name)}" '
                    f'data-x="{a!r}" data-y="{b!r}" data-group="{g}"')
            out.append(_mark(s, colour, px(a), py(b), 3 if s.line else 4, data,
                             f"{escape(label)}: {escape(x.text(a))}, {escape(y.text(b))}"))
            if s.annotate:  # right of the point (left where the text would leave the plot), below
                # it where the line rises to the next point, above it otherwise: clear of the line
                flip = px(a) + 5 + _text_w(label) > left + pw
                below = i + 1 < len(s.points) and py(s.points[i + 1][1]) < py(b)
                tx, ty = px(a) + (-5 if flip else 5), py(b) + (14 if below else -5)
                out.append(f'<text x="{tx:.1f}" y="{ty:.1f}" '
                           f'text-anchor="{"end" if flip else "start"}" fill="#333">{escape(label)}</text>')
    for text, a, b in callouts:
        cx, cy = px(a), py(b)
        right_side = cx - left < pw / 2
        tx = cx + 10 if right_side else cx - 10
        out.append(f'<circle class="callout" cx="{cx:.1f}" cy="{cy:.1f}" r="8" fill="none" stroke="#000" '
                   'stroke-width="1.5"/>')
        out.append(f'<text x="{tx:.1f}" y="{cy + 18:.1f}" text-anchor="{"start" if right_side else "end"}" '
                   f'font-weight="bold">{escape(text)}</text>')
    out += _draw_legend(series, places, top_pad + ph + 64)
    out.append("</svg>")
    return "\n".join(out)


def _limits(x_limits: Sequence[tuple[str, float]], y_limits: Sequence[tuple[str, float]],
            px: Callable[[float], float], py: Callable[[float], float],
            frame: tuple[float, float, float, float]) -> list[str]:
    """An `xy` chart's named dashed lines, each named inside the plot (`frame`: left, top, w, h)."""
    left, top_pad, pw, ph = frame
    out = []
    for name, v in x_limits:
        out.append(f'<line class="limit" x1="{px(v):.1f}" y1="{top_pad}" x2="{px(v):.1f}" '
                   f'y2="{top_pad + ph}" '
                   'stroke="#D55E00" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{px(v) - 4:.1f}" y="{top_pad + 12}" text-anchor="end" fill="#D55E00">'
                   f"{escape(name)}</text>")
    for name, v in y_limits:
        out.append(f'<line class="limit" x1="{left}" y1="{py(v):.1f}" x2="{left + pw}" y2="{py(v):.1f}" '
                   'stroke="#D55E00" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{left + pw - 4}" y="{py(v) - 4:.1f}" text-anchor="end" fill="#D55E00">'
                   f"{escape(name)}</text>")
    return out


def strips(title: str, series: Sequence[Series], x: Axis, x_range: tuple[float, float],
           x_limits: Sequence[tuple[str, float]] = (), shade_below: float | None = None,
           width: int = 760) -> str:
    """One lane per series, its points along a shared x axis (`x_range`, from `x_span`, so that
    the lanes line up under an `xy` chart of the same points): series that share a stretch of
    that chart stay apart here. Each lane is named on the left (wrapped at spaces; lanes grow to
hold the longest name, 13 px a line); its
    leftmost and rightmost points are named above them (their ``labels``) where the two fit.
    Points are ``class="point"`` with ``data-x`` exact and ``data-lane``; `shade_below`: an x
    under which the lanes are shaded (the memory-bound side of a ridge)."""
    left, top_pad = XY_LEFT, 30 + (14 if x_limits else 0)
    lines = max((len(_wrap(s.name, int((left - 8) / CHAR_W))) for s in series), default=1)
    lane = max(36, 13 * lines + 10)
    pw = width - left - XY_RIGHT
    ph = lane * len(series)
    height = top_pad + ph + 46
    lo, hi = x_range
    f = math.log10 if x.log else (lambda v: v)

    def px(v: float) -> float:
        return left + (f(v) - f(lo)) / (f(hi) - f(lo)) * pw

    out = _open(width, height, title)
    if shade_below is not None:
        out.append(f'<rect x="{left}" y="{top_pad}" width="{max(0.0, px(shade_below) - left):.1f}" '
                   f'height="{ph}" fill="#f2f2f2"/>')
    ticks = _inside(_ticks(x, lo, hi, pw, along=True), px, x.text, width)
    out += [f'<line x1="{px(t):.1f}" y1="{top_pad}" x2="{px(t):.1f}" y2="{top_pad + ph}" stroke="#e4e4e4"/>'
            for t in ticks]
    out += [f'<line x1="{left}" y1="{top_pad + g * lane}" x2="{left + pw}" y2="{top_pad + g * lane}" '
            'stroke="#e4e4e4"/>' for g in range(1, len(series))]
    out.append(f'<rect x="{left}" y="{top_pad}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out += _tick_labels("x", [f'<text x="{px(t):.1f}" y="{top_pad + ph + 14}" text-anchor="middle">'
                              f"{escape(x.text(t))}</text>" for t in ticks])
    out.append(NAME.format("x") + f'<text x="{left + pw / 2:.1f}" y="{top_pad + ph + 32}" '
               f'text-anchor="middle">{escape(x.name)}</text></g>')
    for name, v in x_limits:
        out.append(f'<line class="limit" x1="{px(v):.1f}" y1="{top_pad - 12}" x2="{px(v):.1f}" '
                   f'y2="{top_pad + ph}" stroke="#D55E00" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{px(v) - 4:.1f}" y="{top_pad - 4}" text-anchor="end" fill="#D55E00">'
                   f"{escape(name)}</text>")
    for g, s in enumerate(series):
        out += _lane(s, g, top_pad + g * lane, lane, px, (left, left + pw), x)
    out.append("</svg>")
    return "\n".join(out)


def _lane(s: Series, g: int, top: float, height: float, px: Callable[[float], float],
          edges: tuple[float, float], x: Axis) -> list[str]:
    """One lane of `strips`: its name, its points, its leftmost and rightmost points named."""
    (x0, x1), colour, mid = edges, _colour(s, g), top + height - 11
    out = []
    names = _wrap(s.name, int((x0 - 8) / CHAR_W))
    for k, line in enumerate(names):
        y = top + height / 2 + 4 + 13 * (k - (len(names) - 1) / 2)
        out.append(f'<text x="{x0 - 6}" y="{y:.1f}" text-anchor="end">{escape(line)}</text>')
    for i, (a, _) in enumerate(s.points):
        label = s.labels[i] if i < len(s.labels) else s.name
        data = (f' class="point" data-label="{escape(label)}" data-series="{escape(s.name)}" data-x="{a!r}" '
                f'data-lane="{g}"')
        out.append(_mark(s, colour, px(a), mid, 3.5, data, f"{escape(label)}: {escape(x.text(a))}"))
    if s.points and s.labels:
        first = min(range(len(s.points)), key=lambda i: s.points[i][0])
        last = max(range(len(s.points)), key=lambda i: s.points[i][0])
        low, high = s.labels[first], s.labels[last]
        xa = min(px(s.points[first][0]), x1 - _text_w(low))  # starts at its point, ends inside the plot
        xb = max(px(s.points[last][0]), x0 + _text_w(high))  # ends at its point, starts inside the plot
        out.append(f'<text x="{xa:.1f}" y="{top + 13}" fill="#444">{escape(low)}</text>')
        if last != first and xb - _text_w(high) >= xa + _text_w(low) + 8:
            out.append(f'<text x="{xb:.1f}" y="{top + 13}" text-anchor="end" fill="#444">'
                       f"{escape(high)}</text>")
    return out


def _wrap(text: str, chars: int) -> list[str]:
    """`text` in lines of at most `chars` characters, broken at spaces (a longer word stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def stack(title: str, charts: Sequence[str], subtitle: str = "") -> str:
    """Charts one under another in one SVG under `title` (and a `subtitle` line: the ranges drawn),
    each kept whole as a nested ``<svg>``: a roofline above its lanes, one panel per value of a
    second axis."""
    sizes = [(float(m.group(1)), float(m.group(2))) for m in
             (re.match(r'<svg [^>]*width="([\d.]+)" height="([\d.]+)"', c) for c in charts) if m]
    width = max(w for w, _ in sizes)
    out, y = [], 40.0 if subtitle else 24.0
    if subtitle:
        out.append(f'<text x="{width / 2:.1f}" y="34" text-anchor="middle">{escape(subtitle)}</text>')
    for chart, (_, h) in zip(charts, sizes, strict=True):
        out.append(chart.replace("<svg ", f'<svg x="0" y="{y:.0f}" ', 1))
        y += h + 6
    return "\n".join([*_open(width, y, title), *out, "</svg>"])


def waterfall(title: str, labels: Sequence[str], values: Sequence[float], groups: Sequence[int],
              group_names: Sequence[str], fmt: Fmt, axis: str, total: str = "total",
              hidden: Sequence[float] = (), hidden_name: str = "overlapped", width: int = 760) -> str:
    """Floating horizontal bars in order, each starting where the one above it ended
    (``class="bar"``, ``data-start`` and ``data-value`` exact), coloured by group (`group_names`,
    in the legend), then one bar from 0 to their sum named `total` (``class="total"``). `hidden`:
    per bar, time that ran beside the bars above it and adds nothing, drawn as a dashed outline
    ending where its bar starts (``class="hidden"``, named `hidden_name` in the legend). The total
    bar has no value beside it (it spans the axis): put it in `total`."""
    names = [*labels, total]
    left = _label_margin(names, width)
    row, top_pad = 22, 30
    plot_w = width - left - 16
    height = top_pad + row * len(names) + 48 + 18
    starts, at = [], 0.0
    for v in values:
        starts.append(at)
        at += v
    ticks = _linear_axis(at or 1.0, plot_w - 70, fmt)
    scale = plot_w / (ticks[-1] or 1)
    y_axis = top_pad + row * len(names)
    out = _open(width, height, title) + _x_axis(ticks, left, scale, top_pad, y_axis, fmt, axis, plot_w)

    def value_text(x0: float, x1: float, y: float, text: str) -> str:
        """Beside the bar's end, or before its start where the end is too near the right edge."""
        if x1 + 4 + _text_w(text) <= width - 2:
            return f'<text x="{x1 + 4:.1f}" y="{y + 15}">{escape(text)}</text>'
        return f'<text x="{x0 - 4:.1f}" y="{y + 15}" text-anchor="end">{escape(text)}</text>'

    for i, (label, v, g) in enumerate(zip(labels, values, groups, strict=True)):
        y = top_pad + i * row
        x0, w = left + starts[i] * scale, max(v, 0) * scale
        out.append(f'<text x="{left - 6:.1f}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        h = hidden[i] if i < len(hidden) else 0.0
        if h > 0:
            hx = max(left, x0 - h * scale)
            out.append(f'<rect class="hidden" data-label="{escape(label)}" data-value="{h!r}" x="{hx:.2f}" '
                       f'y="{y + 5}" width="{x0 - hx:.2f}" height="{row - 10}" fill="#999" '
                       f'fill-opacity="0.15" stroke="#666" stroke-dasharray="3 2"><title>{escape(label)}: '
                       f"{escape(fmt(h))} {escape(hidden_name)}</title></rect>")
        colour = PALETTE[g % len(PALETTE)]
        out.append(f'<rect class="bar" data-label="{escape(label)}" data-start="{starts[i]!r}" '
                   f'data-value="{v!r}" data-group="{escape(group_names[g])}" x="{x0:.2f}" y="{y + 4}" '
                   f'width="{w:.2f}" height="{row - 8}" fill="{colour}"><title>{escape(label)}: '
                   f"{escape(fmt(v))}</title></rect>")
        share = f" ({100 * v / at:.1f}%)" if at > 0 else ""
        out.append(value_text(max(left, x0 - h * scale) if h > 0 else x0, x0 + w, y, fmt(v) + share))
    y = top_pad + len(labels) * row
    out.append(f'<text x="{left - 6:.1f}" y="{y + 15}" text-anchor="end" font-weight="bold">'
               f"{escape(total)}</text>")
    out.append(f'<rect class="total" data-label="{escape(total)}" data-value="{at!r}" x="{left:.1f}" '
               f'y="{y + 4}" width="{at * scale:.2f}" height="{row - 8}" fill="#555">'
               f"<title>{escape(total)}: {escape(fmt(at))}</title></rect>")
    out.append(f'<line x1="{left:.1f}" y1="{top_pad}" x2="{left:.1f}" y2="{y_axis}" stroke="#333"/>')
    used = sorted(set(groups))  # the legend from the left edge: the label margin may be wide
    out += _legend_of([(group_names[g], PALETTE[g % len(PALETTE)]) for g in used], 10, height - 8)
    if any(h > 0 for h in hidden):
        x = 10 + sum(14 + _text_w(group_names[g]) + 16 for g in used)
        out.append(f'<rect x="{x:.1f}" y="{height - 17:.1f}" width="10" height="10" fill="#999" '
                   'fill-opacity="0.15" stroke="#666" stroke-dasharray="3 2"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{height - 8:.1f}">{escape(hidden_name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _legend_of(entries: Sequence[tuple[str, str]], x0: float, y: float) -> list[str]:
    """A legend of (name, colour) entries, for groups not numbered from 0 in order."""
    out, x = [], x0
    for name, colour in entries:
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{y:.1f}">{escape(name)}</text>')
        x += 14 + _text_w(name) + 16
    return out
