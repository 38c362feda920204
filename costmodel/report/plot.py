"""Charts of a sweep (matplotlib, the optional `plot` extra).

- intensity: a roofline (Williams, Waterman & Patterson 2009). x = arithmetic intensity
  (FLOP/B), y = attainable FLOP/s = min(peak, intensity x bandwidth), both logarithmic; the
  roof, the ridge point, and one marker style per variant and phase (colour = variant,
  shape = phase), each point where that pass sits on the roof.
- kv_cache, time: a line chart over the first swept axis (log 2), one line per variant and
  phase (and up to three values of a second swept axis); the KV-cache chart marks the device's
  memory.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from costmodel import units
from costmodel.analysis import AnalysisError
from costmodel.report.attention import fixed_text
from costmodel.studies.sweep import Sweep

if TYPE_CHECKING:  # matplotlib is the optional `plot` extra: imported when a chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.ticker import FuncFormatter

    from costmodel.studies.sweep import Series

PHASE_MARKERS = {"prefill": "o", "decode": "^", "train": "s"}
PHASE_LINES = {"prefill": "-", "decode": "--", "train": ":"}


def _pyplot() -> ModuleType:
    try:
        import matplotlib
    except ImportError:
        raise AnalysisError("--plot: needs matplotlib; "
                            "install it with pip install 'costmodel[plot]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


SUFFIXES = (".png", ".svg", ".pdf")


def plot_path(path: str | Path) -> Path:
    """The file `--plot` writes: `path`, with .png added when it has no suffix (as matplotlib
    would); checked before anything is computed. An empty name, a folder, a folder that does
    not exist and a suffix matplotlib would refuse are bad input, in one line."""
    text = str(path)
    if not text.strip():
        raise AnalysisError("--plot: give a file name (.png, .svg, .pdf)")
    path = Path(text)
    shown = text if len(text) <= 120 else text[:117] + "..."
    try:
        if path.is_dir() or text.endswith(("/", "\\")):
            raise AnalysisError(f"--plot: {shown} is a folder; give a file in it (.png, .svg, .pdf)")
        folder = path.parent
        if not folder.is_dir():
            raise AnalysisError(f"--plot: {shown}: no folder {str(folder)[:120]}")
    except OSError as e:  # a name too long for the file system
        raise AnalysisError(f"--plot: {shown}: {e.strerror or e}") from None
    if not path.suffix:  # matplotlib would append .png itself; name the file it writes
        path = path.with_name(path.name + ".png")
    if path.suffix.lower() not in SUFFIXES:
        raise AnalysisError(f"--plot: {shown}: unknown format {path.suffix!r}; use {', '.join(SUFFIXES)}")
    return path


def plot(sw: Sweep, path: str | Path) -> Path:
    """Draw `sw` into `path` (the format follows the suffix: .png, .svg, .pdf; none: .png is
    added: ``plot_path``). Returns the path written."""
    path = plot_path(path)
    plt = _pyplot()
    colours: dict[str, str] = {}
    for s in sw.series:
        colours.setdefault(s.variant, f"C{len(colours)}")
    if sw.quantity == "intensity":
        fig, (ax, lanes) = plt.subplots(
            2, 1, sharex=True, figsize=(10, 7 + 0.25 * len(sw.series)), dpi=120,
            gridspec_kw={"height_ratios": [3, 0.5 + 0.3 * len(sw.series)]})
        _roofline(ax, lanes, sw, colours)
    else:
        fig, ax = plt.subplots(figsize=(12, 6.5), dpi=120)
        _lines(ax, sw, colours)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    _save(plt, fig, path)
    return path


def _save(plt: ModuleType, fig: Any, path: str | Path) -> None:
    """Write `fig` to `path` and close it; a write that fails is one line of bad input."""
    try:
        fig.savefig(path)
    except (OSError, ValueError) as e:
        raise AnalysisError(f"--plot: cannot write {path}: {e}") from None
    finally:
        plt.close(fig)


def _span(sw: Sweep) -> str:
    parts = []
    for axis in sw.swept:
        values = getattr(sw.series[0], axis)
        parts.append(f"{axis} {values[0]:,}..{values[-1]:,} ({len(values)} values)")
    fixed = fixed_text(sw)
    return ", ".join(parts + ([fixed] if fixed else []))


def _roofline(ax: Axes, lanes: Axes, sw: Sweep, colours: dict[str, str]) -> None:
    """Top: the roof and every point on it. Bottom: one lane per variant and phase, the same
    points spread out, so that series sharing a stretch of roof stay apart."""
    hw, dtype = sw.hardware, sw.dtype
    peak, bw, ridge = hw.peak(dtype), hw.memory_bandwidth, hw.ridge(dtype)
    xs = np.concatenate([s.values.ravel() for s in sw.series])
    lo, hi = min(xs.min(), ridge) / 4, max(xs.max(), ridge) * 4
    roof_x = np.geomspace(lo, hi, 400)
    ax.loglog(roof_x, np.minimum(peak, roof_x * bw), color="0.2", lw=2, zorder=2,
              label=f"{hw.name} roof: {units.bandwidth(bw)} x intensity, capped at {units.flops(peak)}/s "
                    f"{dtype}")
    for axis in (ax, lanes):
        axis.axvline(ridge, color="0.4", ls=":", lw=1.2)
        axis.axvspan(lo, ridge, color="0.5", alpha=0.06, lw=0)
    ax.annotate(f"ridge point {ridge:.0f} FLOP/B", (ridge, peak), xytext=(6, -16),
                textcoords="offset points", fontsize=9, color="0.25")
    ax.text(0.02, 0.97, "memory-bound (shaded)", transform=ax.transAxes, fontsize=9, color="0.35", va="top")
    ax.text(0.98, 0.03, "compute-bound", transform=ax.transAxes, fontsize=9, color="0.35", ha="right")
    many = xs.size > 60 * len(sw.series)
    for lane, s in enumerate(sw.series):
        x = s.values.ravel()
        style: dict[str, Any] = dict(marker=PHASE_MARKERS.get(s.phase, "o"), color=colours[s.variant],
                                     s=12 if many else 40, alpha=0.5 if many else 0.9, zorder=3,
                                     edgecolors="none" if many else "black", linewidths=0.4)
        ax.scatter(x, np.minimum(peak, x * bw), label=s.label, **style)
        lanes.scatter(x, np.full(x.size, lane), **style)
        for idx, side in ((int(np.argmin(x)), "right"), (int(np.argmax(x)), "left")):
            i, j = np.unravel_index(idx, s.values.shape)
            lanes.annotate(_point_name(sw, s, int(i), int(j)), (x[idx], lane), fontsize=7, color="0.2",
                           va="bottom",
                           xytext=(0, 5), textcoords="offset points", ha=side)
    lanes.set_yticks(range(len(sw.series)), [s.label for s in sw.series], fontsize=8)
    lanes.set_ylim(len(sw.series) - 0.5, -0.5)
    lanes.set_xlim(lo, hi)
    lanes.grid(True, axis="x", alpha=0.3)
    ax.set_ylabel("attainable performance (FLOP/s)")
    lanes.set_xlabel("arithmetic intensity (FLOP per byte; bytes = fused lower bound: weights and KV cache "
                     "once)")
    ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1, 0.08))
    ax.set_title(f"{sw.spec}: where each variant and phase sits on the {hw.name} roofline "
                 f"({sw.component or 'whole model'}, {dtype})\n{_span(sw)}", fontsize=10)


def _point_name(sw: Sweep, s: Series, i: int, j: int) -> str:
    return " ".join(f"{a}={getattr(s, a)[k]:,}" for a, k in (("seq", i), ("batch", j)) if a in sw.swept)


def _lines(ax: Axes, sw: Sweep, colours: dict[str, str]) -> None:
    x_axis = sw.swept[0]
    other = next((a for a in ("seq", "batch") if a != x_axis), "batch")
    for s in sw.series:
        values = s.values if x_axis == "seq" else s.values.T  # rows along x
        x = getattr(s, x_axis)
        others = getattr(s, other)
        picks = sorted({0, len(others) // 2, len(others) - 1}) if other in sw.swept else [0]
        for n, k in enumerate(picks):
            label = s.label + (f", {other}={others[k]:,}" if other in sw.swept else "")
            ax.plot(x, values[:, k], ls=PHASE_LINES.get(s.phase, "-"), color=colours[s.variant],
                    marker=PHASE_MARKERS.get(s.phase, "o"), markersize=4 + 2 * n, markevery=max(1,
                                                                                                len(x) // 12),
                    label=label, alpha=1 - 0.25 * n)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(_tokens_formatter())
    ax.set_xlabel({"seq": "sequence length (prompt tokens in prefill, cached tokens in decode)",
                   "batch": "batch size B (sequences)"}[x_axis])
    if sw.quantity == "kv_cache":
        ax.set_ylabel("KV cache (bytes)")
        mem = sw.hardware.memory_bytes
        ax.axhline(mem, color="0.3", ls=":", lw=1.2)
        ax.annotate(f"{sw.hardware.name} memory {units.decimal_bytes(mem)}", (ax.get_xlim()[0], mem),
                    xytext=(4, 4), textcoords="offset points", fontsize=9, color="0.25")
    else:
        ax.set_ylabel(f"roofline time on {sw.hardware.name} (s)")
    if sw.unit == "B":  # ticks at powers of two, which binary prefixes print as round numbers
        _binary_ticks(ax,
                      np.concatenate([s.values.ravel() for s in sw.series] + [[sw.hardware.memory_bytes]]))
    ax.yaxis.set_major_formatter(_formatter(sw.unit))
    title = {"kv_cache": "KV cache", "time": "roofline time"}.get(sw.quantity, sw.quantity)
    ax.set_title(f"{sw.spec}: {title} of {sw.component or 'the whole model'}, {sw.dtype}\n{_span(sw)}",
                 fontsize=10)


def _formatter(unit: str) -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    fmt = {"B": units.nbytes, "s": units.seconds}.get(unit, units.number)
    return FuncFormatter(lambda v, _pos: fmt(v))


def _tokens_formatter() -> FuncFormatter:
    """512, 1K, 128K: token counts and batch sizes at powers of two."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v / 1024:g}K" if v >= 1024 else f"{v:g}")


def _binary_ticks(ax: Axes, values: np.ndarray) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    lo, hi = np.floor(np.log2(values.min())), np.ceil(np.log2(values.max()))
    step = max(1, int(np.ceil((hi - lo) / 8)))
    ticks = 2.0 ** np.arange(lo - lo % step, hi + step, step)
    # matplotlib's stub asks for Sequence[float]; FixedLocator takes any array (np.asarray)
    ax.yaxis.set_major_locator(FixedLocator(ticks))  # type: ignore[arg-type]
    ax.yaxis.set_minor_locator(NullLocator())
