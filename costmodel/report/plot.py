"""The serving charts still drawn by matplotlib (the optional `plot` extra): `inference --plot`
and `deploy --plot`. The sweep's charts are ``report.sweep_figures``' (SVG, ``report.svg``).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from costmodel.analysis import AnalysisError
from costmodel.runtime.serving import Serving

if TYPE_CHECKING:  # matplotlib is the optional `plot` extra: imported when a chart is drawn
    from costmodel.deploy.search import Search


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


def plot_serving(sv: Serving, path: str) -> str:
    """Latency against throughput, one point per batch size (matplotlib, the `plot` extra);
    returns the file written (a path without a suffix gets .png, as matplotlib writes it)."""
    path = str(plot_path(path))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p.tokens_per_s for p in sv.points]
    ys = [p.latency_s for p in sv.points]
    ax.plot(xs, ys, "o-")
    for p in sv.points:
        ax.annotate(f"B={p.batch}", (p.tokens_per_s, p.latency_s), textcoords="offset points", xytext=(4, 4))
    ax.set_xscale("log")
    ax.set_xlabel("tokens/s per device")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_title(f"{sv.spec.name} on {sv.hardware.name}: prompt {sv.prompt}, output {sv.output}")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    _save(plt, fig, path)
    return path


def plot_deploy(r: Search, path: str) -> str:
    """Tokens/s per GPU against tokens/s per user: every fitting deployment, the Pareto front
    joined, those meeting the targets filled (matplotlib, the `plot` extra)."""
    path = str(plot_path(path))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ok = [d for d in r.deployments if d.stable]
    ax.scatter([d.tokens_per_s_per_user for d in ok], [d.tokens_per_s_per_gpu for d in ok], s=12,
               facecolors=["C0" if d.meets else "none" for d in ok], edgecolors="C0", label="deployments")
    ax.plot([d.tokens_per_s_per_user for d in r.front], [d.tokens_per_s_per_gpu for d in r.front], "C1-",
            label="Pareto front")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{r.spec.name} on {r.gpus} {r.cluster.hardware.name}")
    ax.grid(True, alpha=0.3)
    ax.legend()
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
