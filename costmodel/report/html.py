"""`costmodel report`: one self-contained HTML page per spec (and device), readable from disk.

No server, no network, no JavaScript: every chart is inline SVG written by ``report.svg``, and
every chart's data is also in the page as an HTML table (accessibility, copying). The numbers come
from the library: ``runtime.on_device.analyze`` (counts, roofline), ``runtime.timing.predict``
(the calibrated time model, docs/time.md), ``studies.op_classes`` (Ivanov et al. 2021's operator
classes, docs/op-classes.md) and ``runtime.memory`` (what ``costmodel memory`` prints). What is on
the page and what is left: docs/report.md. The roofline and memory sections are
``report.spec_figures``' (``analyze --plot`` and ``memory --plot`` draw them too).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel import units
from costmodel.analysis import phases_of
from costmodel.phases import PHASES
from costmodel.report import files, svg
from costmodel.report.section import FORMATS, Cell, Section
from costmodel.report.spec_figures import memories, memory_section, roofline_section
from costmodel.report.tables import describe, grouped

if TYPE_CHECKING:
    from costmodel.devices.hardware import Hardware
    from costmodel.runtime.on_device import DeviceAnalysis
    from costmodel.spec import Spec

def check_output(path: str | Path) -> Path:
    """The file `-o` writes: an .html name in a folder that exists and can be written, or bad
    input in one line; checked before anything is computed."""
    return files.checked_path(path, "--output", (".html", ".htm"), add_suffix=False)


def write(text: str, path: str | Path) -> Path:
    """Write the page to `path` whole or not at all (``files.write_atomic``)."""
    return files.write_atomic(text, check_output(path), "--output")


# --- the sections ------------------------------------------------------------------------------


def card(spec: Spec, analyses: Sequence[DeviceAnalysis], hw: Hardware | None) -> Section:
    a0 = analyses[0]
    rows: list[tuple[Cell, ...]] = [("spec", spec.name), ("description", describe(spec)),
                                    ("parameters", a0.total().params)]
    for a in analyses:
        rows.append((f"{a.phase}: context", f"batch {a.batch}, seq {a.seq}, {a.dtype}"))
    rows.append(("device", "none (counts only)" if hw is None else
                 f"{hw.name}: {units.flops(hw.peak(a0.dtype))}/s {a0.dtype}, "
                 f"{units.bandwidth(hw.memory_bandwidth)}, {units.decimal_bytes(hw.memory_bytes)}"))
    return Section("card", f"{spec.name}", "", ("field", "value"), rows,
                   fmt=("", "count"))


def params_section(a: DeviceAnalysis) -> Section:
    """Parameters by layer sub-block, as `analyze`'s Parameters table groups them."""
    rows: list[tuple[Cell, ...]] = []
    for name, members in grouped(a.rows):
        n = sum(r.params for r in members)
        if n:
            rows.append((name, n, n / a.total().params))
    chart = svg.hbars(f"Parameters by component: {a.spec.name}", [str(r[0]) for r in rows],
                      [float(r[1]) for r in rows], units.count, "parameters")
    total = a.total().params
    return Section("params", "Parameters by component", chart, ("component", "params", "share"), rows,
                   (f"total {total:,}; weights {units.nbytes(a.bytes_weights)} in {a.weights_dtype}",),
                   fmt=("", "count", "share"))


def phases_section(analyses: Sequence[DeviceAnalysis]) -> Section:
    rows: list[tuple[Cell, ...]] = []
    for a in analyses:
        t = a.total()
        rows.append((a.phase, t.flops, t.bytes_fused, t.bytes_unfused, a.arithmetic_intensity,
                     a.arithmetic_intensity_unfused))
    chart = svg.hbars(f"FLOPs per phase: {analyses[0].spec.name}, batch {analyses[0].batch}",
                      [str(r[0]) for r in rows], [float(r[1]) for r in rows], units.flops, "FLOPs")
    return Section("phases", "Per phase: FLOPs, bytes, arithmetic intensity", chart,
                   ("phase", "FLOPs", "bytes fused", "bytes unfused", "intensity (fused)",
                    "intensity (unfused)"), rows,
                   ("bytes fused: the lower bound (each weight and activation moved once); unfused: every "
                    "op reads its inputs and writes its output. decode: one token over seq cached.",),
                   fmt=("", "flops", "bytes", "bytes", "intensity", "intensity"))


def classes_section(a: DeviceAnalysis) -> Section:
    """FLOP share against time share by operator class (Ivanov et al. 2021), one phase."""
    from costmodel.studies.op_classes import phase_classes

    c = phase_classes(a)
    rows: list[tuple[Cell, ...]] = [
        (r.op_class.value, r.flops, r.flop_share, r.time_s or 0.0, r.time_share or 0.0) for r in c.rows]
    chart = svg.paired_bars(f"FLOP share vs time share by operator class: {a.spec.name}, {a.phase} on "
                            f"{c.hardware}", [str(r[0]) for r in rows], ("FLOP share", "time share"),
                            [(float(r[2]), float(r[4])) for r in rows])
    return Section(f"classes-{a.phase}", f"{a.phase}: FLOP share vs time share by operator class", chart,
                   ("class", "FLOPs", "FLOP share", "time", "time share"), rows,
                   (f"time: the calibrated time model under kernels {c.kernels or 'custom'} "
                    "(docs/time.md); classes: docs/op-classes.md (Ivanov et al. 2021).",),
                   fmt=("", "flops", "share", "s", "share"))


def sections(spec: Spec, hw: Hardware | None = None, batch: int = 1, seq: int | None = None,
             dtype: str = "bf16", enc_seq: int | None = None) -> list[Section]:
    """The page's sections for `spec` (on `hw` when given), in order."""
    from costmodel.runtime import kernels
    from costmodel.runtime.on_device import analyze

    def mla(p: str) -> str:
        return "naive" if PHASES[p].training else kernels.default_mla(hw)

    analyses = [analyze(spec, p, batch=batch, seq=seq, dtype=dtype, enc_seq=enc_seq, hardware=hw, mla=mla(p))
                for p in phases_of(spec)]
    out = [card(spec, analyses, hw), params_section(analyses[0]), phases_section(analyses)]
    if hw is not None:
        out += [classes_section(a) for a in analyses]
        out += [roofline_section(a, hw) for a in analyses]
    out.append(memory_section(memories(spec, analyses, hw), hw))
    from costmodel.report import serving_figures  # attention variants; serving with a device

    out += serving_figures.sections(spec, hw, batch, seq, dtype)
    return out


# --- the page ----------------------------------------------------------------------------------

STYLE = """body{font-family:sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px}
td.num{text-align:right;font-variant-numeric:tabular-nums}p.note{color:#555;font-size:90%}
section{margin-bottom:2.5em}nav a{margin-right:1em}"""


def _cell(v: Cell, fmt: str) -> str:
    if isinstance(v, str) or not fmt:
        return f"<td>{escape(str(v))}</td>"
    return f'<td class="num" data-value="{v!r}">{escape(FORMATS[fmt](v))}</td>'


def render_section(s: Section) -> str:
    fmts = s.fmt or ("",) * len(s.columns)
    head = "".join(f'<th scope="col">{escape(c)}</th>' for c in s.columns)
    body = "\n".join("<tr>" + "".join(_cell(v, fmts[i] if i < len(fmts) else "") for i, v in enumerate(r))
                     + "</tr>" for r in s.rows)
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in s.notes)
    chart = f'<figure>{s.chart}</figure>' if s.chart else ""
    return (f'<section id="{s.id}"><h2>{escape(s.title)}</h2>{chart}\n'
            f'<table><caption>{escape(s.title)} (the data)</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>\n{body}\n</tbody></table>{notes}</section>")


def page(spec: Spec, parts: Sequence[Section]) -> str:
    nav = "".join(f'<a href="#{s.id}">{escape(s.title)}</a>' for s in parts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>costmodel report: {escape(spec.name)}</title><style>{STYLE}</style></head><body>\n"
            f"<h1>costmodel report: {escape(spec.name)}</h1><nav>{nav}</nav>\n"
            + "\n".join(render_section(s) for s in parts) + "\n</body></html>\n")


def build(spec: Spec, hw: Hardware | None = None, batch: int = 1, seq: int | None = None,
          dtype: str = "bf16", enc_seq: int | None = None) -> str:
    """The whole page as text."""
    return page(spec, sections(spec, hw, batch, seq, dtype, enc_seq))
