"""Writing what `report -o` and `--plot` produce: whole or not at all, in a format named by the
file's suffix.

A chart is SVG text (``report.svg``); ``.svg`` is written as it is, ``.png`` and ``.pdf`` are that
SVG rasterised by vl-convert (resvg inside; the optional `plot` extra, imported when a PNG or PDF
is asked for), so a chart has one drawing whatever the file. Every name is checked before any
work (`plot_path`, `html.check_output`): a folder, a missing folder, a folder that cannot be
written or an unknown suffix is one line of bad input.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from costmodel.analysis import AnalysisError

SUFFIXES = (".svg", ".png", ".pdf")
PNG_SCALE = 2  # pixels per SVG unit: a 760 px wide chart is a 1520 px PNG, sharp on a slide


def checked_path(path: str | Path, option: str, suffixes: tuple[str, ...], add_suffix: bool = True) -> Path:
    """`path` as a file `option` may write: not empty, not a folder, in a folder that exists and
    can be written, its suffix one of `suffixes` (the first is added to a name without one, with
    `add_suffix`; else a name without one is refused)."""
    text = str(path)
    kinds = ", ".join(suffixes)
    if not text.strip():
        raise AnalysisError(f"{option}: give a file name ({kinds})")
    shown = text if len(text) <= 120 else text[:117] + "..."
    p = Path(text)
    try:
        if p.is_dir() or text.endswith(("/", "\\")):
            raise AnalysisError(f"{option}: {shown} is a folder; give a file in it ({kinds})")
        folder = p.parent
        if not folder.is_dir():
            raise AnalysisError(f"{option}: {shown}: no folder {str(folder)[:120]}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise AnalysisError(f"{option}: {shown}: folder {str(folder)[:120]} is not writable")
    except OSError as e:  # a name too long for the file system
        raise AnalysisError(f"{option}: {shown}: {e.strerror or e}") from None
    if not p.suffix and add_suffix:
        p = p.with_name(p.name + suffixes[0])
    if p.suffix.lower() not in suffixes:
        raise AnalysisError(f"{option}: {shown}: unknown format {p.suffix or '(none)'!r}; use {kinds}")
    return p


def plot_path(path: str | Path) -> Path:
    """The file `--plot` writes (.svg, .png or .pdf; .svg added to a name without a suffix)."""
    return checked_path(path, "--plot", SUFFIXES)


def write_atomic(data: str | bytes, p: Path, option: str) -> Path:
    """Write `data` to `p` whole or not at all: a temporary file in the same folder, renamed over
    `p` (a rename within one file system is atomic)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        mask = os.umask(0)  # mkstemp's file is private (0600): give it the mode any new file gets
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, p)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise AnalysisError(f"{option}: cannot write {p}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def standalone(svg: str) -> str:
    """A chart as a file of its own: the XML declaration and a white ground (a PNG of the bare
    SVG would be transparent, unreadable on a dark viewer)."""
    head, sep, rest = svg.partition(">")
    ground = '<rect width="100%" height="100%" fill="white"/>'
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{head}{sep}\n{ground}{rest}'


def save_plot(svg: str, path: str | Path) -> Path:
    """Write the chart `svg` to `path` in the format its suffix names (checked by `plot_path`)."""
    p = plot_path(path)
    text = standalone(svg)
    if p.suffix.lower() == ".svg":
        return write_atomic(text, p, "--plot")
    try:
        import vl_convert  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        kind = p.suffix.lower()[1:].upper()
        raise AnalysisError(f"--plot: {kind} needs vl-convert-python: install it with "
                            "pip install 'costmodel[plot]', or give a name ending in .svg") from None
    data = (vl_convert.svg_to_png(text, scale=PNG_SCALE) if p.suffix.lower() == ".png"
            else vl_convert.svg_to_pdf(text))
    return write_atomic(bytes(data), p, "--plot")
