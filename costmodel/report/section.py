"""A section of the report, and of any figure a command draws: a chart and the same data as a
table (``html.render_section`` renders it; ``files.save_plot`` writes its chart alone)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from costmodel import units
from costmodel.report import svg
from costmodel.report.tables import Table

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
    fmt: tuple[str, ...] = ()  # per column: a key of FORMATS ("count", "bytes", "s", ...), "" for text

    def to_dict(self) -> dict[str, Any]:
        """The section's data as `report --format json` prints it: the table's cells as they are
        (integers exact), each column's unit (``UNITS``), the notes; not the chart."""
        fmts = self.fmt + ("",) * (len(self.columns) - len(self.fmt))
        return {"id": self.id, "title": self.title, "columns": list(self.columns),
                "units": [UNITS.get(f, "") for f in fmts], "rows": [list(r) for r in self.rows],
                "notes": list(self.notes)}

    def to_table(self) -> Table:
        """The section as a ``tables.Table`` (cells as the page shows them), for the terminal and
        markdown."""
        fmts = self.fmt or ("",) * len(self.columns)
        cells = [tuple(str(v) if isinstance(v, str) or i >= len(fmts) or not fmts[i] else FORMATS[fmts[i]](v)
                       for i, v in enumerate(r)) for r in self.rows]
        numeric = next((i for i, f in enumerate(fmts) if f), len(fmts))  # right-aligned from there on
        return Table(self.title, self.columns, cells, self.notes, numeric_from=numeric)


FORMATS: dict[str, svg.Fmt] = {
    "count": lambda v: f"{int(v):,}", "flops": units.flops, "bytes": units.nbytes,
    "intensity": units.intensity, "s": units.seconds, "rate": lambda v: units.flops(v) + "/s",
    "share": lambda v: f"{100 * v:.2f}%", "decimal": lambda v: f"{v:,.1f}",
}
#: The unit of a column's exact value in JSON and CSV (a share is a fraction of 1, not a percent).
UNITS = {"flops": "FLOP", "bytes": "B", "intensity": "FLOP/B", "s": "s", "rate": "FLOP/s",
         "share": "fraction"}


def sections_csv(sections: Sequence[Section]) -> str:
    """Every cell of every section, one per line, exact (numbers in base units): the section,
    the row's index and first cell, the column, the value and its unit (`report --format csv`)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(("section", "row", "label", "column", "value", "unit"))
    for s in sections:
        units_ = s.to_dict()["units"]
        for i, r in enumerate(s.rows):
            for name, unit, v in zip(s.columns[1:], units_[1:], r[1:], strict=True):
                out.writerow((s.id, i, r[0], name, v, unit))
    return buf.getvalue()
