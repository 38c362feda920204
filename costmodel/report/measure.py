"""Tables for `costmodel measure` and `costmodel calibrate` (``report.Table`` rows; no torch).

Exact counts print in full, so equality can be read off the table; a byte count or a time is
rounded, with its relative error beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from costmodel import units
from costmodel.devices.efficiency import FlopsTable
from costmodel.devices.hardware import Hardware
from costmodel.phases import LABELS as QUANTITY_LABELS
from costmodel.report.tables import Table

if TYPE_CHECKING:  # pragma: no cover
    from costmodel.measure.run import FormulaCheck, Measurement

LABELS = {
    **{q: QUANTITY_LABELS[q] for q in ("params", "flops_matmul", "kv_cache", "bytes_unfused")},
    "intensity": "matmul FLOP/B (unfused)",
    "time": "time (predicted vs median)",
    "time_roofline": "time (roofline vs median)",
}


def _value(c: FormulaCheck, x: float) -> str:
    if c.unit == "s":
        return units.seconds(x) if x else "-"
    if c.exact:
        return f"{int(x):,}"
    if c.unit == "B":
        return units.nbytes(x)
    return f"{x:.3g}"


def _verdict(c: FormulaCheck) -> str:
    if c.exact:
        return "equal" if c.agrees else "DIFFERS"
    return "" if c.formula == 0 else "gap" if c.unit == "B" else ""


def measurement_table(m: Measurement) -> Table:
    a = m.analysis
    rows = [
        (LABELS.get(c.quantity, c.quantity), _value(c, c.formula), _value(c, c.measured),
         f"{100 * c.error:+.2f}%" if c.formula else "-", _verdict(c))
        for c in m.comparisons
    ]
    shape = " ".join(f"{k}={v}" for k, v in a.shape.items() if a.spec.is_encoder_decoder or "_e" not in k)
    layers = f", first {m.layers} layer{'s' if m.layers > 1 else ''}" if m.layers else ""
    notes = [f"{a.spec.name}{layers} on {m.device} in {a.dtype}: {shape}"]
    if m.roofline is not None:
        r = m.roofline
        if r.get("note"):
            notes.append(r["note"])
        if r.get("calibrated_allocator") and r.get("allocator") != r["calibrated_allocator"]:
            notes.append(f"timed with the allocator {r['allocator']}, calibrated with "
                         f"{r['calibrated_allocator']}: "
                         "the prediction describes the other setting (costmodel.malloc)")
        notes.append(
            f"roofline on {m.hardware}: compute {units.seconds(r['compute_s'])}, memory "
            f"{units.seconds(r['memory_s'])} unfused / {units.seconds(r['memory_fused_s'])} fused: "
            f"{r['bound']}-bound; measured: median of {len(m.times_s)} runs")
    elif m.times_s:
        notes.append(f"measured: median of {len(m.times_s)} runs; no hardware profile for a "
                     "prediction (run `costmodel calibrate`, or pass --hardware)")
    if any(c.quantity == "bytes_unfused" for c in m.comparisons):
        notes.append("bytes: eager PyTorch runs some elements as several ops (RMSNorm, RoPE, "
                     "soft-capping); see docs/measure.md")
    return Table(f"{a.phase}: formula vs measured", ("quantity", "formula", "measured", "error", "check"),
                 rows, notes)


def components_table(m: Measurement) -> Table:
    def pair(p: tuple[int, int], fmt: Callable[[int], str]) -> tuple[str, str]:
        return (fmt(p[0]) if p[0] else "", fmt(p[1]) if p[1] else "")

    def full(n: int) -> str:
        return f"{n:,}"

    rows = []
    for r in m.components:
        mark = "" if r.params[0] == r.params[1] and r.flops_matmul[0] == r.flops_matmul[1] else "DIFFERS"
        ratio = f"{r.bytes[1] / r.bytes[0]:.2f}" if r.bytes[0] else ""
        rows.append((r.path, *pair(r.params, full), *pair(r.flops_matmul, full),
                     *pair(r.bytes, units.nbytes), ratio, mark))
    return Table(
        f"{m.analysis.phase}: by component",
        ("component", "params", "(measured)", "matmul FLOPs", "(measured)", "bytes", "(measured)",
         "bytes ratio", "check"),
        rows,
        ("a formula leaf with no module of its own (scores, softmax) is summed into its sub-block",),
    )


def calibration_table(hw: Hardware, path: str) -> Table:
    rows = [(f"peak {dtype}", units.flops(v) + "/s") for dtype, v in hw.peak_flops.items()]
    rows.append(("memory bandwidth", f"{hw.memory_bandwidth / 1e9:.3g} GB/s"))
    rows.append(("memory", units.nbytes(hw.memory_bytes)))
    for dtype, v in hw.peak_flops.items():
        rows.append((f"ridge {dtype}", f"{v / hw.memory_bandwidth:.3g} FLOP/B"))
    notes = [hw.description or "", str(hw.source)]
    e = hw.efficiency
    if e is not None:
        rows.append(("op floor", units.seconds(e.floor_s)))
        for dtype, t in e.matmul.items():
            if isinstance(t, FlopsTable):  # by op size, not by shape: one row
                rows.append((f"matmul {dtype}",
                             f"{100 * min(t.efficiency):.0f}-{100 * max(t.efficiency):.0f}% "
                             f"of peak (ops of {units.flops(t.flops[0])}-{units.flops(t.flops[-1])})"))
                continue
            for i, M in enumerate(t.M):
                cells = [c for row in t.efficiency[i] for c in row]
                rows.append((f"matmul {dtype} M={M}",
                             f"{100 * min(cells):.0f}-{100 * max(cells):.0f}% of peak "
                             f"(N {t.N[0]}-{t.N[-1]}, K {t.K[0]}-{t.K[-1]})"))
        m = e.memory
        rows.append(("memory op", ", ".join(f"{units.nbytes(b)}: {100 * x:.0f}%" for b, x in
                                            zip(m.bytes[::2], m.efficiency[::2],
                                                strict=True)) + " of bandwidth"))
        if e.first_touch is not None:  # what a freshly allocated output costs beyond a reused one
            f = e.first_touch
            rows.append(("fresh output", ", ".join(f"{units.nbytes(b)}: {1e9 * x:.2g} ns/B" for b, x in
                                                   zip(f.bytes[::2], f.s_per_byte[::2],
                                                       strict=True)) + " extra"))
        notes.append(e.source)
    else:
        notes.append("no efficiency tables: times on this profile are the roofline")
    notes.append(f"saved to {path}")
    return Table(f"Hardware profile {hw.name}", ("quantity", "value"), rows, tuple(notes))
