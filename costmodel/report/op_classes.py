"""The table of FLOP share against time share by operator class (``studies.op_classes``)."""

from __future__ import annotations

from collections.abc import Sequence

from costmodel import units
from costmodel.phases import LABELS
from costmodel.report.tables import Table
from costmodel.studies.op_classes import ClassShares


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}%"


def op_classes_table(shares: Sequence[ClassShares]) -> Table:
    """Each phase's components in Ivanov et al. 2021's operator classes: FLOPs, bytes and
    predicted time, each with its share."""
    rows = []
    for s in shares:
        for r in s.rows:
            rows.append((LABELS.get(s.phase, s.phase), r.op_class.value, str(r.components),
                         units.flops(r.flops, short=True), _pct(r.flop_share),
                         units.nbytes(r.bytes), _pct(r.byte_share),
                         "" if r.time_s is None else units.seconds(r.time_s), _pct(r.time_share)))
    timed = next((s for s in shares if s.hardware is not None), None)
    notes = ["classes as Ivanov et al. 2021 (arXiv:2007.00072, Table 1) sort operators: contractions "
             "(matrix products), statistical normalisations (softmax, norms, the loss), element-wise "
             "(the rest: bias, activation, dropout, residual, scale, mask; lookups); bytes unfused"]
    if timed is not None:
        notes.append(f"time: the time model on {timed.hardware} under --kernels {timed.kernels or 'custom'} "
                     "(eager: every op its own kernel, as PyTorch runs them); under flash the softmax runs "
                     "inside the attention kernel, a contraction")
    return Table("FLOP share vs time share by operator class",
                 ("phase", "class", "components", "FLOPs", "FLOPs %", "bytes", "bytes %", "time", "time %"),
                 rows, notes=tuple(notes), numeric_from=2, essential=(0, 1, 4, 8))

