"""Tables for ``compare``, ``ablate``, ``elements`` and the counting conventions.

Cells are formatted here and drawn by ``report`` (rich or markdown); the numbers behind them
are the library objects' ``to_dict()``. A comparison of many models is wider than a terminal:
``pages`` splits its model columns into tables that fit a given width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

from costmodel import units
from costmodel.report.tables import Table
from costmodel.studies.compare import SideBySide
from costmodel.studies.conventions import ConventionRow
from costmodel.studies.variants import (
    METRICS,
    QUANTITY_LABELS,
    Ablation,
    ElementRanking,
    ElementSummary,
    show,
)

FLAG = " !"  # a value outside its rule of thumb


def pct(x: float | None) -> str:
    """A relative change: +12.3%, -0.42%, +0.0012%; 0 when nothing changed."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    a = 100 * x
    if abs(a) >= 100:
        return f"{a:+,.0f}%"
    if abs(a) >= 1:
        return f"{a:+.1f}%"
    if abs(a) >= 0.01:
        return f"{a:+.2f}%"
    return f"{a:+.4f}%" if abs(a) >= 0.00005 else ("+" if a > 0 else "-") + "<0.0001%"


def value_cell(v: Any) -> str:
    """A design choice as a cell: 2.69 for ratios, 32,000 for sizes, 0 for no z-loss."""
    if v is None:
        return ""
    if isinstance(v, Fraction):
        return str(v.numerator) if v.denominator == 1 else f"{float(v):.3g}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if v >= 10_000 else str(v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def quantity_cell(quantity: str, v: float | None, signed: bool = False) -> str:
    """A cost in its unit: params as counts, FLOPs, bytes in binary prefixes, intensity."""
    if v is None:
        return "n/a"
    sign = "+" if signed and v > 0 else ""
    if quantity == "params":
        return sign + units.count(v)
    if "flops" in quantity:
        return sign + units.flops(v)
    if "intensity" in quantity:
        return sign + units.intensity(v)
    return sign + units.nbytes(v)


# --- compare -----------------------------------------------------------------------------------


def _status(distinct: int) -> str:
    return "same" if distinct == 1 else f"varies ({distinct})"


def comparison_tables(c: SideBySide) -> list[Table]:
    names = c.names
    choice_rows = []
    for ch in c.choices:
        flags = ch.flags or (False,) * len(ch.values)
        choice_rows.append((ch.label, _status(ch.distinct),
                            *(value_cell(v) + (FLAG if flag else "") for v, flag in zip(ch.values, flags,
                                                                                        strict=False))))
    same = [ch.label for ch in c.choices if ch.invariant]
    rules = "; ".join(f"{ch.label} {ch.rule}" for ch in c.choices if ch.rule)
    choice_notes = [f"same across all {len(names)}: {', '.join(same) if same else 'nothing'}",
                    f"{FLAG.strip()}: outside the rule of thumb (docs/reference.md, 'Shape rules of thumb'; "
                    "the study note, "
                    f"section 4): {rules}"]
    # A long choice (dropout sites) wraps in its model's column rather than crop the others.
    tables = [Table("Design choices", ("choice", "across", *names), choice_rows, choice_notes,
                    numeric_from=2, wrap=tuple(range(2, 2 + len(names))),
                    essential=(0, *range(2, 2 + len(names))))]  # "across" goes first

    cost_rows = []
    for r in c.costs:
        cells = (quantity_cell(r.key, v) for v in r.values)
        cost_rows.append((r.label, _status(len(set(r.values))), *cells))
    s = c.seq
    held = c.widths.label(c.dtype)
    cost_notes = [f"batch {c.batch}, {c.dtype}{held and f'{held[:-1]} in prefill and decode)'}; train and "
                  f"prefill over {s['train']} tokens, decode one "
                  f"token after {s['decode']} cached; per-token figures divide by the batch's tokens",
                  *c.notes]
    tables.append(Table("Costs at a common shape", ("quantity", "across", *names), cost_rows, cost_notes,
                        numeric_from=2, essential=(0, *range(2, 2 + len(names)))))
    if c.conventions:
        tables.append(_conventions_across(c))
    return tables


def comparison_csv(c: SideBySide) -> str:
    """`compare` as CSV: one line per model, its costs at the common shape as numbers in base
    units (the quantities of ``to_dict()["costs"]`` as columns)."""
    from costmodel.report.tables import records_csv

    data = c.to_dict()
    return records_csv([{"spec": name, "batch": data["batch"], "dtype": data["dtype"],
                         **{cost["quantity"]: cost["values"][i] for cost in data["costs"]}}
                        for i, name in enumerate(data["models"])])


def _conventions_across(c: SideBySide) -> Table:
    exact = next(r for r in c.costs if r.key == "train_flops_per_token")
    rows = [("exact", "", *(quantity_cell("flops", v) for v in exact.values))]
    notes = []
    for name, found in c.conventions.items():
        rows.append((name, "", *(quantity_cell("flops", r.count.train if r else None) for r in found)))
        rows.append((f"  {name} vs exact", "", *(pct(r.train_relative if r else None) for r in found)))
        first = next(r for r in found if r)
        notes.append(f"{name}: {first.count.formula} ({first.count.source})")
    return Table("Training FLOPs per token, by convention", ("convention", "", *c.names), rows,
                 notes + ["per-model omissions: costmodel analyze SPEC --convention NAME, or --format json"],
                 numeric_from=2)


def _width(cells: Sequence[str]) -> int:
    """A column's width as ``report.render_rich`` draws it: its widest cell, a space of
    padding either side and one of separator."""
    return max((len(x) for x in cells), default=0) + 3


def pages(table: Table, width: int, fixed: int = 2) -> list[Table]:
    """`table` split by columns into tables at most `width` wide, each repeating the first
    `fixed` columns; one page if it fits (or if a single model column does not)."""
    cols = [[table.columns[i], *(row[i] for row in table.rows)] for i in range(len(table.columns))]
    base = sum(_width(c) for c in cols[:fixed])
    groups: list[list[int]] = [[]]
    used = base
    for i in range(fixed, len(cols)):
        w = _width(cols[i])
        if groups[-1] and used + w > width:
            groups.append([])
            used = base
        groups[-1].append(i)
        used += w
    if len(groups) == 1:
        return [table]
    out = []
    n_models = len(cols) - fixed
    for group in groups:
        keep = [*range(fixed), *group]
        first, last = group[0] - fixed + 1, group[-1] - fixed + 1
        out.append(replace(
            table,
            title=f"{table.title} ({first}{'' if first == last else f'-{last}'} of {n_models})",
            columns=tuple(table.columns[i] for i in keep),
            rows=[tuple(row[i] for i in keep) for row in table.rows],
            notes=table.notes if group is groups[-1] else (),
        ))
    return out


# --- conventions for one spec -----------------------------------------------------------------


def conventions_table(rows: Sequence[ConventionRow], seq: int) -> Table:
    """Each paper's count beside ours, per training token at `seq`; what each leaves out."""
    first = rows[0]
    cells = [("exact", units.count(first.ours_params), "", units.flops(first.ours_train), "", ""),
             ("exact matmul", "", "", units.flops(first.ours_train_matmul), "", "")]
    notes = [f"per training token at seq {seq}; exact counts every FLOP, exact matmul only the matmuls; "
             "vs: paper - ours, relative to ours (vs matmul: to our matmul FLOPs)"]
    for r in rows:
        c = r.count
        cells.append((c.convention,
                      units.count(c.params) if c.params is not None else "-",
                      pct(r.params_relative),
                      units.flops(c.train) if c.train is not None else "n/a",
                      pct(r.train_relative),
                      pct(None if c.train is None else c.train / r.ours_train_matmul - 1)))
        if c.formula:
            notes.append(f"{c.convention}: {c.formula}; params: {c.params_meaning}. {c.source}. Leaves out:")
        else:
            notes.append(f"{c.convention}:")
        notes.extend(f"  - {item}" for item in c.leaves_out)
    return Table("Counting conventions", ("convention", "params", "vs ours", "FLOP/token", "vs ours",
                                          "vs matmul"),
                 cells, notes)


# --- ablate ---------------------------------------------------------------------------------------


def ablation_tables(a: Ablation) -> list[Table]:
    """The fields that differ, then one table per phase (parameters with the first)."""
    fields = [(f, show(b), show(x)) for f, b, x in a.fields] or [("(none)", "", "")]
    tables = [Table(f"{a.before.name}: before and after", ("field", "before", "after"), fields,
                    ("every field that differs, derived ones included",), numeric_from=3)]
    for phase, (before, _) in a.analyses.items():
        rows = []
        for d in a.deltas:
            if d.phase == phase or (d.phase == "all" and len(tables) == 1):
                rows.append((QUANTITY_LABELS[d.quantity], *(_ablation_cell(d.quantity, v, signed=i == 2)
                                      for i, v in enumerate((d.before, d.after, d.change))), pct(d.relative)))
        shape = f"{before.seq} cached" if phase == "decode" else f"seq {before.seq}"
        tables.append(Table(f"{phase} (batch {before.batch}, {shape}, "
                            f"{before.dtype}{before.precision.label(before.dtype)})",
                            ("quantity", "before", "after", "change", "relative"), rows))
    return tables


def _ablation_cell(quantity: str, v: float, signed: bool) -> str:
    if quantity == "intensity":  # the unit is in the row's label
        return quantity_cell(quantity, v, signed).removesuffix(" FLOP/B")
    return quantity_cell(quantity, v, signed)


# --- elements -------------------------------------------------------------------------------------


_METRIC_HEADERS = {"params": "params", "train_flops": "train FLOPs", "decode_bytes": "decode B/tok",
                   "kv_cache": "KV cache"}


def elements_tables(r: ElementRanking) -> list[Table]:
    rows = [(str(i), f"{e.swap.element}: {e.swap.label}", *(pct(e.relative(m)) for m in METRICS))
            for i, e in enumerate(r.effects, 1)]
    by = "the largest relative change of the four" if r.by == "max" else METRICS[r.by]
    base = r.baseline
    notes = [f"ranked by {by}; relative changes against {r.spec.name}: "
             f"{units.count(base['params'])} params, {units.flops(base['train_flops'])} per training step, "
             f"{units.nbytes(base['decode_bytes'])} per decoded token, "
             f"{units.nbytes(base['kv_cache'])} KV cache",
             f"batch {r.batch}, {r.dtype}; train over {r.seq['train']} tokens, decode after "
             f"{r.seq['decode']} cached",
             "gated <-> non-gated FFN at equal params: d_ff x 2/3 or x 3/2, to the nearest integer "
             "(halves up)",
             *(f"skipped: {s.element}: {s.label}: {why}" for s, why in r.skipped)]
    summary = [(str(i), name, e.swap.label, pct(e.effect(r.by)).lstrip("+"))
               for i, (name, e) in enumerate(r.elements(), 1)]
    return [
        Table(f"{r.spec.name}: every design element swapped", ("#", "element: swap",
              *(_METRIC_HEADERS[m] for m in METRICS)), rows, notes, numeric_from=2, wrap=(1,)),
        Table("Which elements matter most", ("#", "element", "largest swap", "effect"), summary,
              ("effect: |relative change| of the ranking quantity, for the element's largest swap",),
              numeric_from=3, wrap=(2,)),
    ]


def across_table(summaries: Sequence[ElementSummary], rankings: Sequence[ElementRanking]) -> Table:
    """Each element's effect over many specs: the median of its largest swap, and the largest."""
    rows = []
    for i, s in enumerate(summaries, 1):
        name, e = s.largest
        rows.append((str(i), s.element, f"{name}: {e.swap.label}", pct(s.median).lstrip("+"),
                     pct(e.effect(s.by)).lstrip("+")))
    r0 = rankings[0]
    what = ("the largest |relative change| among params, training FLOPs, decode bytes per token and KV cache"
            if r0.by == "max" else f"|relative change| of {METRICS[r0.by]}")
    notes = (f"effect: {what}, for the element's largest swap in each of {len(rankings)} models (median over "
             "the models it applies to), each at its own default shape; one model in detail: costmodel "
             "elements SPEC",)
    return Table(f"Which elements matter most, across {len(rankings)} models",
                 ("#", "element", "largest in: swap", "median", "largest"), rows, notes,
                 numeric_from=3, wrap=(2,))
