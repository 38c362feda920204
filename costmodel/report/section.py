"""A section of the report, and of any figure a command draws: a chart and the same data as a
table (``html.render_section`` renders it; ``files.save_plot`` writes its chart alone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel import units
from costmodel.report import svg

Cell = str | int | float


@dataclass(frozen=True)
class Section:
    """One part of the page: a chart and the same data as a table. Numeric cells keep their exact
    value (``data-value`` in the page); the text shown is ``units``' formatting."""

    id: str
    title: str
    chart: str  # an <svg>, or "" for a section that is a table only (the card)
    columns: tuple[str, ...]
    rows: list[tuple[Cell, ...]]
    notes: tuple[str, ...] = field(default=())
    fmt: tuple[str, ...] = ()  # per column: "count", "flops", "bytes", "intensity", "s", "rate", "share"


FORMATS: dict[str, svg.Fmt] = {
    "count": lambda v: f"{int(v):,}", "flops": units.flops, "bytes": units.nbytes,
    "intensity": units.intensity, "s": units.seconds, "rate": lambda v: units.flops(v) + "/s",
    "share": lambda v: f"{100 * v:.2f}%",
}
