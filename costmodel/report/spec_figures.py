"""The figures of one spec that both ``costmodel report``'s page and a command's ``--plot`` draw:
the per-component roofline (`roofline_section`, `analyze --plot`) and the memory per GPU
(`memory_section`, `memory --plot`). Each is a ``Section``: an SVG chart (``report.svg``) and the
same data as a table.

The numbers come from the library: ``runtime.timing.predict`` (the calibrated time model,
docs/time.md) over ``runtime.on_device.analyze``'s counts, and ``runtime.memory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from costmodel import units
from costmodel.phases import PHASES
from costmodel.report import svg
from costmodel.report.section import Cell, Section

if TYPE_CHECKING:
    from costmodel.devices.hardware import Hardware
    from costmodel.runtime.memory import Memory
    from costmodel.runtime.on_device import DeviceAnalysis
    from costmodel.spec import Spec

ROOFLINE_COLUMNS = ("component", "kernel", "FLOPs executed", "bytes", "intensity", "predicted time",
                    "achieved")
ROOFLINE_FMT = ("", "", "flops", "bytes", "intensity", "s", "rate")
INTENSITY = svg.Axis("arithmetic intensity (FLOP/B, log)", "FLOP/B")
ACHIEVED = svg.Axis("achieved (FLOP/s, log)", "FLOP/s")


def roofline_rows(a: DeviceAnalysis, hw: Hardware) -> tuple[list[tuple[Cell, ...]], bool]:
    """Each component with a time of its own: (path, kernel, FLOPs executed, bytes, intensity,
    predicted time, achieved FLOP/s), and whether the times are calibrated. Under flash attention
    the core's products execute only the unmasked pairs (``flops_matmul_effective``, as
    ``runtime.timing.executed_flops`` counts them); their bytes are the component's unfused
    count, which the fused kernel does not move (it never writes the scores)."""
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
    return rows, pred.calibrated


def _roofline_note(calibrated: bool) -> str:
    return ("achieved: the FLOPs a component's kernel executes over its predicted time (runtime.timing, "
            + ("calibrated" if calibrated else "roofline: no tables")
            + "); components folded into another kernel (no time of their own) are left out. Flash "
            "attention's scores and AV: the unmasked pairs' FLOPs, and bytes the unfused count the kernel "
            "does not move (it keeps the scores on chip), so they may sit above the bandwidth slope.")


def _roofline(analyses: Sequence[DeviceAnalysis], hw: Hardware) -> tuple[list[tuple[Cell, ...]], str, str]:
    """Every component of every phase as (phase, *`roofline_rows`), the chart (a colour per phase,
    flash attention's points as rings, under one roof) and the note, for one phase or several."""
    a0 = analyses[0]
    peak, bw = hw.peak(a0.dtype), hw.memory_bandwidth
    rows: list[tuple[Cell, ...]] = []
    calibrated = True
    for a in analyses:
        mine, cal = roofline_rows(a, hw)
        calibrated = calibrated and cal
        rows += [(a.phase, *r) for r in mine]
    series: list[svg.Series] = []
    for flash in (False, True):  # every phase's own kernels, then flash attention's (rings)
        for g, a in enumerate(analyses):
            picked = [r for r in rows if r[0] == a.phase and (r[2] == "flash attention") == flash]
            if picked:
                series.append(svg.Series(a.phase + (": flash attention (bytes unfused)" if flash else ""),
                                         [(float(r[5]), float(r[7])) for r in picked],
                                         labels=[str(r[1]) for r in picked], colour=g,
                                         marker="ring" if flash else "disc"))
    phases = ", ".join(a.phase for a in analyses)
    context = f"batch {a0.batch}" + (f", seq {a0.seq}" if len(analyses) == 1 else "")
    chart = svg.xy(f"Per-component roofline on {hw.name}: {a0.spec.name}, {phases} ({a0.dtype}, {context})",
                   series, INTENSITY, ACHIEVED, roof=(peak, bw))
    note = (f"roof: min({units.flops(peak)}/s, {units.bandwidth(bw)} x intensity); "
            + _roofline_note(calibrated))
    return rows, chart, note


def roofline_section(a: DeviceAnalysis, hw: Hardware) -> Section:
    """Each component a point: intensity (the FLOPs it executes over the bytes it moves) against
    achieved FLOP/s (those FLOPs over its predicted time), under the device's roof; flash
    attention's points (which may sit above the bandwidth slope: `roofline_rows`) as rings."""
    rows, chart, note = _roofline([a], hw)
    return Section(f"roofline-{a.phase}", f"{a.phase}: per-component roofline on {hw.name}", chart,
                   ROOFLINE_COLUMNS, [r[1:] for r in rows], (note,), fmt=ROOFLINE_FMT)


def phases_roofline(analyses: Sequence[DeviceAnalysis], hw: Hardware) -> Section:
    """`analyze --hardware H --plot FILE`: every component of every phase analyze shows, one
    chart under one roof, a colour per phase; the table adds the phase to `roofline_section`'s
    columns."""
    rows, chart, note = _roofline(analyses, hw)
    return Section("roofline", f"Per-component roofline on {hw.name}", chart, ("phase", *ROOFLINE_COLUMNS),
                   rows, (note,), fmt=("", *ROOFLINE_FMT))


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


REPORT_MEMORY_NOTE = ("runtime.memory (costmodel memory): training with AdamW, bf16-mixed, no recompute, one "
                      "device; activations: all saved for backward (training) or the live peak (inference).")


def memory_section(ms: Sequence[Memory], hw: Hardware | None, note: str = REPORT_MEMORY_NOTE) -> Section:
    """A stacked bar per phase: weights, gradients, optimizer states, activations at their peak,
    KV cache; the device's memory as a line when `hw` is given."""
    from costmodel.runtime.memory import CATEGORIES

    parts = [c if c != "activations" else "activations (peak)" for c in CATEGORIES]

    def held(m: Memory) -> list[int]:
        return [m.peak_activations if c == "activations" else m.total(c) for c in CATEGORIES]

    rows: list[tuple[Cell, ...]] = [(m.phase, *held(m), m.peak) for m in ms]
    # decimal units, as datasheets print a device's memory: round ticks (50 GB), and 80 GB, not 74.5 GiB
    limit = (f"{hw.name}: {units.decimal_bytes(hw.memory_bytes)}", float(hw.memory_bytes)) if hw else None
    where = f" on {hw.name}" if hw else " (no device given)"
    chart = svg.stacked_bars(f"Memory per GPU: {ms[0].spec}, batch {ms[0].batch}{where}",
                             [m.phase for m in ms], parts, [[float(x) for x in held(m)] for m in ms],
                             units.decimal_bytes, "memory per GPU (bytes)", limit)
    return Section("memory", "Memory per GPU", chart, ("phase", *parts, "peak"), rows, (note,),
                   fmt=("", *("count",) * (len(parts) + 1)))


def run_note(m: Memory) -> str:
    """How `costmodel memory` ran: the recipe or the widths, the parallel split, recomputation."""
    r, p = m.run, m.parallel
    if PHASES[m.phase].training:
        how = (f"{r.optimizer}, {r.precision}, recompute {r.recompute}"
               + (f", ZeRO-{p.zero} over {p.dp} ranks" if p.zero else f", {p.dp} data-parallel ranks"
                  if p.dp > 1 else ", one device"))
    else:
        how = f"{r.dtype}" + (f", weights {r.weights_dtype}" if r.weights_dtype else "") + (
            f", KV cache {r.kv_dtype}" if r.kv_dtype else "")
    return (f"runtime.memory (costmodel memory): {m.phase}, batch {m.batch}, seq {m.seq}, {how}; "
            "activations: " + ("all saved for backward." if PHASES[m.phase].training
                               else "the live peak of the pass."))


def memory_figure(m: Memory, hw: Hardware | None) -> Section:
    """`memory SPEC --plot FILE`: the stacked bar of what one device holds in the run asked for."""
    return memory_section([m], hw, run_note(m))
