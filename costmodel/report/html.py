"""`costmodel report`: one self-contained HTML page per spec (and device), readable from disk.

No server, no network, no JavaScript: every chart is inline SVG written by ``report.svg``, and
every chart's data is also in the page as an HTML table (accessibility, copying). The numbers come
from the library: ``runtime.on_device.analyze`` (counts, roofline), ``runtime.timing.predict``
(the calibrated time model, docs/time.md), ``studies.op_classes`` (Ivanov et al. 2021's operator
classes, docs/op-classes.md) and ``runtime.memory`` (what ``costmodel memory`` prints). What is on
the page and what is left: docs/report.md.
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
from costmodel.report.tables import describe, grouped

if TYPE_CHECKING:
    from costmodel.devices.hardware import Hardware
    from costmodel.runtime.memory import Memory
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


def roofline_section(a: DeviceAnalysis, hw: Hardware) -> Section:
    """Each component a point: intensity (the FLOPs it executes over the bytes it moves) against
    achieved FLOP/s (those FLOPs over its predicted time), under the device's roof. Under flash
    attention the core's products execute only the unmasked pairs (``flops_matmul_effective``,
    as ``runtime.timing.executed_flops`` counts them); their bytes are the component's unfused
    count, which the fused kernel does not move (it never writes the scores), so those points
    (drawn in a colour of their own) may sit above the bandwidth slope."""
    from costmodel.runtime.timing import predict

    k = a.assumed_kernels
    pred = predict(a, hw, k)
    counted = {r.path: r for r in a.rows}
    rows: list[tuple[Cell, ...]] = []
    for r in pred.rows:
        fused = k.flash_attention and r.key.attention_core
        c = counted.get(r.path)
        flops = r.flops - (c.flops_matmul - c.flops_matmul_effective) if fused and c is not None else r.flops
        if flops > 0 and r.bytes > 0 and r.time_s > 0:
            rows.append((r.path, "flash attention" if fused else r.kind, flops, r.bytes, flops / r.bytes,
                         r.time_s, flops / r.time_s))
    peak, bw = hw.peak(a.dtype), hw.memory_bandwidth
    kinds = ("own kernel", "flash attention (bytes: unfused)")
    chart = svg.loglog(f"Per-component roofline: {a.spec.name}, {a.phase} on {hw.name} ({a.dtype})",
                       [(str(r[0]), float(r[4]), float(r[6]), int(r[1] == "flash attention")) for r in rows],
                       "FLOP/B", "FLOP/s", "arithmetic intensity (FLOP/B, log)", "achieved (FLOP/s, log)",
                       roof=(peak, bw), groups=kinds)
    return Section(f"roofline-{a.phase}", f"{a.phase}: per-component roofline on {hw.name}", chart,
                   ("component", "kernel", "FLOPs executed", "bytes", "intensity", "predicted time",
                    "achieved"), rows,
                   (f"roof: min({units.flops(peak)}/s, {units.bandwidth(hw.memory_bandwidth)} x intensity); "
                    "achieved: the FLOPs a component's kernel executes over its predicted time "
                    "(runtime.timing, " + ("calibrated" if pred.calibrated else "roofline: no tables")
                    + "); components folded into another kernel (no time of their own) are left out. "
                    "Flash attention's scores and AV: the unmasked pairs' FLOPs, and bytes the unfused "
                    "count the kernel does not move (it keeps the scores on chip), so they may sit above "
                    "the bandwidth slope.",),
                   fmt=("", "", "flops", "bytes", "intensity", "s", "rate"))


def memories(spec: Spec, analyses: Sequence[DeviceAnalysis], hw: Hardware | None) -> list[Memory]:
    """What `costmodel memory` holds per device, phase by phase, at its defaults (AdamW,
    bf16-mixed for training; `dtype` at inference), kernels as on `hw`."""
    from costmodel.runtime import kernels
    from costmodel.runtime.memory import Run, memory

    out = []
    for a in analyses:
        flash = kernels.KERNELS[kernels.resolve(None, hw, "train")].flash_attention
        mla = kernels.default_mla(hw)
        training = PHASES[a.phase].training
        run = Run(flash=flash, mla=mla) if training else Run(flash=flash, dtype=a.dtype, mla=mla)
        out.append(memory(spec, a.phase, a.batch, a.seq, a.enc_seq, run))
    return out


def memory_section(ms: Sequence[Memory], hw: Hardware | None) -> Section:
    from costmodel.runtime.memory import CATEGORIES

    parts = [c if c != "activations" else "activations (peak)" for c in CATEGORIES]

    def held(m: Memory) -> list[int]:
        return [m.peak_activations if c == "activations" else m.total(c) for c in CATEGORIES]

    rows: list[tuple[Cell, ...]] = [(m.phase, *held(m), m.peak) for m in ms]
    limit = (f"{hw.name}: {units.nbytes(hw.memory_bytes)}", float(hw.memory_bytes)) if hw else None
    chart = svg.stacked_bars(f"Memory per GPU: {ms[0].spec}, batch {ms[0].batch}", [m.phase for m in ms],
                             parts, [[float(x) for x in held(m)] for m in ms], units.nbytes, "bytes per GPU",
                             limit)
    return Section("memory", "Memory per GPU", chart, ("phase", *parts, "peak"), rows,
                   ("runtime.memory (costmodel memory): training with AdamW, bf16-mixed, no recompute, one "
                    "device; activations: all saved for backward (training) or the live peak (inference).",),
                   fmt=("", *("count",) * (len(parts) + 1)))


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
