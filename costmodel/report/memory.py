"""Tables for `costmodel memory` and `costmodel fit`: rows from ``costmodel.runtime.memory`` results."""

from __future__ import annotations

import csv
import io

from costmodel import units
from costmodel.devices.hardware import Hardware
from costmodel.report.tables import Table
from costmodel.runtime.memory import CATEGORIES, Memory


def memory_tables(m: Memory, hw: Hardware | None, korthikanti: tuple[int, int] | None) -> list[Table]:
    """The totals by category (and whether they fit), then the breakdown by component."""
    shown = ("weights", "gradients", "optimizer", "activations") if m.phase == "train" else (
        "weights", "kv_cache", "activations")
    rows = [(c, f"{m.total(c):,}", units.nbytes(m.total(c))) for c in shown]
    rows.append(("peak", f"{m.peak:,}", units.nbytes(m.peak)))
    notes = list(m.notes)
    if hw is not None:
        room = int(hw.memory_bytes) - m.peak
        verdict = "fits" if room >= 0 else "does not fit"
        rows.append((f"{hw.name} ({units.decimal_bytes(hw.memory_bytes)})", f"{room:+,}",
                     f"{verdict}: {units.nbytes(abs(room))} {'free' if room >= 0 else 'short'}"))
    if korthikanti is not None:
        ours, theirs = korthikanti
        # Their Table 2 row for the recompute compared (flash attention keeps what selective does).
        mode = "selective" if m.run.flash else m.run.recompute
        formula = {"none": "L x sbh(34 + 5as/h)", "selective": "L x 34 sbh (selective recompute)",
                   "full": "L x 2 sbh (full recompute)"}[mode]
        notes.append(f"layer activations: ours {ours:,} B; Korthikanti et al. 2022, {formula}, "
                     f"{theirs:,} B (their GPT layer: LayerNorm, 4h GeLU, 1-byte masks, 16-bit)")
    split = f"dp {m.parallel.dp}, ZeRO-{m.parallel.zero}" if m.phase == "train" else ""
    title = f"Memory per device: {m.phase}, B={m.batch}, seq={m.seq}" + (f", {split}" if split else "")
    totals = Table(title, ("category", "bytes", ""), rows, notes=notes)
    parts = [(i.category, i.path, f"{i.bytes:,}", units.nbytes(i.bytes)) for i in m.items if i.bytes]
    return [totals, Table("By component", ("category", "component", "bytes", ""), parts, numeric_from=2)]


def memory_csv(m: Memory) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("spec", "phase", "batch", "seq", "category", "component", "bytes"))
    for i in m.items:
        w.writerow((m.spec, m.phase, m.batch, m.seq, i.category, i.path, i.bytes))
    for c in (*CATEGORIES, "peak"):
        w.writerow((m.spec, m.phase, m.batch, m.seq, c, "total", m.peak if c == "peak" else m.total(c)))
    return buf.getvalue()


def fit_table(results: list[tuple[str, int, Memory | None]], over: str, hw: Hardware, cap: int,
              mla: str | None = None) -> Table:
    """`mla`: the convention latent attention runs in at inference (None: the spec has none)."""
    rows = [(phase, f"{n:,}" if n else "none fits", f"{m.peak:,}" if m else "",
             units.nbytes(m.peak) if m else "") for phase, n, m in results]
    notes = [f"seq is capped at the spec's max_seq_len ({cap:,})"] if over == "seq" else []
    if mla is not None:
        notes.append(f"latent attention: {mla} in prefill and decode (--mla naive|absorbed); "
                     "training runs the naive form")
    return Table(f"Largest {over} that fits on {hw.name} ({units.decimal_bytes(hw.memory_bytes)})",
                 ("phase", f"max {over}", "peak bytes", ""), rows, notes=notes)
