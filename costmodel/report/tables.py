"""Tables of ``analyze``, and the renderers every command's tables go through.

A ``Table`` holds formatted cells; ``render_rich``, ``render_markdown`` and ``render_tables_csv``
turn a list of them into text (``cli.app.emit`` picks one by ``--format``). The other table
modules (compare_report, report_attention, measure/tables) build ``Table``s and draw nothing
themselves. Machine-readable output (JSON, CSV) carries the raw integers, never the rounded
cells.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from costmodel import units
from costmodel.analysis import Analysis, Row
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import HasReads, Reads, band_label
from costmodel.phases import LABELS
from costmodel.precision import EXPERTS_ONLY, INT_BITS
from costmodel.runtime.roofline import roofline_of
from costmodel.spec import Spec
from costmodel.studies.conventions import ConventionRow


@dataclass(frozen=True)
class Table:
    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = field(default_factory=tuple)
    numeric_from: int = 1  # columns from this index on are right-aligned numbers
    wrap: Sequence[int] = ()  # columns whose text may wrap in a narrow terminal
    # To fit a terminal (``fit``): the columns never left out (a name and the total, ...), and
    # those left out first, in this order; the others go after them, right-most first.
    essential: Sequence[int] = (0,)
    drop_first: Sequence[int] = ()

    def drop_order(self) -> list[int]:
        """The columns a narrow terminal leaves out, least essential first."""
        rest = [i for i in reversed(range(len(self.columns))) if i not in self.drop_first]
        return [i for i in (*self.drop_first, *rest) if i not in self.essential and i < len(self.columns)]


# --- what the tables say ---------------------------------------------------------------------


def describe(spec: Spec) -> str:
    """One line naming every design choice of a spec, each in its element's words."""
    from costmodel.components import ELEMENTS

    return " · ".join(part for e in ELEMENTS if (part := e.describe(spec)) is not None)


def rich_header(spec: Spec, *extra: str) -> str:
    """The spec's name in bold, then its description as plain text (rich markup escaped)."""
    from rich.markup import escape

    return f"[bold]{escape(spec.name)}[/bold]: " + escape(" · ".join((describe(spec), *extra)))


def grouped(rows: Iterable[Row]) -> list[tuple[str, list[Row]]]:
    """Rows by the layer sub-block they sit in (``layers/attention/q`` under ``layers/attention``,
    ``Key.block_path``); a row outside one is a group of its own."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.key.block_path, []).append(row)
    return list(groups.items())


def published_note(spec: Spec, total: int) -> str | None:
    pub = spec.published
    if pub is None:
        return None
    gap = total - pub.value
    verdict = "within" if abs(gap) <= pub.allowed_error else "OUTSIDE"
    rel = f"{100 * gap / pub.value:+.2f}%"
    note = f"published {pub.params} ({pub.source}); ours {total:,} ({rel}, {verdict} its tolerance)"
    if pub.exact is not None:
        mark = "equal" if pub.exact == total else f"DIFFERS by {total - pub.exact:+,}"
        note += f"; released implementation {pub.exact:,}: {mark}"
    return note


def params_table(a: Analysis) -> Table:
    total = a.total().params
    rows = []
    for name, members in grouped(a.rows):
        n = sum(r.params for r in members)
        if n:
            rows.append((name, f"{n:,}", units.count(n), units.percent(n, total)))
    rows.append(("total", f"{total:,}", units.count(total), "100.0%"))
    notes = [f"embedding {units.count(a.params_embedding)} · lm_head {units.count(a.params_lm_head)} · "
             f"non-embedding {units.count(total - a.params_embedding - a.params_lm_head)} · "
             f"weights {units.nbytes(a.bytes_weights)} in {a.weights_dtype}"
             + (f" (groups of {a.precision.group_size})" if a.weights_dtype in INT_BITS else "")
             + (f" (routed experts; the rest {a.dtype})" if a.weights_dtype in EXPERTS_ONLY else "")
             + (f" · KV cache in {a.kv_dtype}" if a.kv_dtype != a.dtype else "")]
    if a.spec.moe is not None:
        notes.append(active_note(a))
    pub = published_note(a.spec, total)
    if pub:
        notes.append(pub)
    return Table("Parameters", ("component", "exact", "params", "share"), rows, notes, essential=(0, 1))


def active_note(a: Analysis) -> str:
    """A mixture of experts' active parameters per token, in both conventions, the
    publisher's first."""
    from costmodel.spec import ActiveConvention

    words = {ActiveConvention.with_embedding: "with the embedding",
             ActiveConvention.without_embedding: "without the input embedding"}
    first = a.active_convention
    order = [first, *(c for c in ActiveConvention if c is not first)]
    parts = [f"{a.params_active(c):,} ({units.count(a.params_active(c))}) {words[c]}" for c in order]
    text = f"active per token: {parts[0]}; {parts[1]}"
    pub = a.spec.published
    if pub is not None and pub.active is not None:
        text += f"; published {pub.active} ({first.value})"
    return text


def phases_table(analyses: Sequence[Analysis], hw: Hardware | None = None) -> Table:
    """Quantities down, phases across; with a device, where each phase sits on its roofline."""
    def per(f: Callable[[Analysis], str]) -> list[str]:
        return [f(a) for a in analyses]

    def tot(a: Analysis) -> Row:
        return a.total()

    rows = [
        ("seq", *per(lambda a: str(a.seq))),
        ("shape", *per(lambda a: f"B={a.shape['B']} S={a.shape['S']} C={a.shape['C']}"
                       + (f" S_e={a.shape['S_e']} C_e={a.shape['C_e']}" if a.spec.is_encoder_decoder
                          else ""))),
        (LABELS["flops_matmul"], *per(lambda a: units.flops(tot(a).flops_matmul))),
        (LABELS["flops_matmul_effective"], *per(lambda a: units.flops(tot(a).flops_matmul_effective))),
        (LABELS["flops_other"], *per(lambda a: units.flops(tot(a).flops_other))),
        (LABELS["flops"], *per(lambda a: units.flops(tot(a).flops))),
        ("FLOPs per token", *per(lambda a: units.flops(tot(a).flops / (a.shape["B"] * a.shape["S"])))),
        (LABELS["bytes_unfused"], *per(lambda a: units.nbytes(tot(a).bytes_unfused))),
        (LABELS["bytes_fused"], *per(lambda a: units.nbytes(tot(a).bytes_fused))),
        (LABELS["kv_cache"], *per(lambda a: units.nbytes(tot(a).kv_cache))),
        (LABELS["intensity"], *per(lambda a: units.intensity(a.arithmetic_intensity))),
        (LABELS["intensity_unfused"], *per(lambda a: units.intensity(a.arithmetic_intensity_unfused))),
    ]
    a0 = analyses[0]
    notes = [f"batch {a0.batch}, {a0.dtype}; seq is the prompt (prefill, train) or the tokens "
             "already cached (decode, which attends to seq + 1)"]
    if hw is not None:
        from costmodel.runtime import kernels
        from costmodel.runtime.timing import predict

        lines = [roofline_of(tot(a), hw, a.dtype) for a in analyses]
        # the kernels an analysis on the device carries (runtime.on_device), else the device's default
        assumed = getattr(a0, "assumed_kernels", None) or kernels.KERNELS[kernels.default_kernels(hw)]
        predictions = [predict(a, hw, assumed) for a in analyses]
        rows += [
            ("predicted time" + ("" if predictions[0].calibrated else " (unfused roofline: no tables)"),
             *(units.seconds(p.time_s) for p in predictions)),
            ("compute time (FLOPs / peak)", *(units.seconds(r.compute_s) for r in lines)),
            ("memory time (fused bytes / bandwidth)", *(units.seconds(r.memory_s) for r in lines)),
            ("roofline time", *(units.seconds(r.time_s) for r in lines)),
            ("ridge point (peak / bandwidth)", *(units.intensity(r.ridge) for r in lines)),
            ("bound (intensity vs ridge)", *(r.bound for r in lines)),
        ]
        notes.append(device_note(hw, a0.dtype))
        notes.append(predictions[0].note or "predicted time: each component at the efficiency its shape "
                     "reaches on the device (costmodel.timing; components run one after another), "
                     f"calibrated by {hw.name}'s efficiency tables ({tables_summary(hw)})")
        notes += kernel_notes(predictions)
        notes.append(kernels.note(assumed, hw, getattr(a0, "kernels_default", True)))
    return Table("Phases", ("quantity", *(a.phase for a in analyses)), rows, notes,
                 essential=tuple(range(1 + len(analyses))))


def tables_summary(hw: Hardware) -> str:
    """The first sentence of the profile's efficiency source: where its tables come from."""
    source = hw.efficiency.source if hw.efficiency is not None else ""
    return source.split(". ", 1)[0].rstrip(".")


def device_note(hw: Hardware, dtype: str) -> str:
    """One line naming the device, its roofs and where the figures come from."""
    source = hw.source if isinstance(hw.source, str) else "; ".join(f"{k}: {v}" for k, v in hw.source.items())
    kind = "measured" if hw.measured else "datasheet"
    return (f"{hw.name}: {units.flops(hw.peak(dtype))}/s dense {dtype}, "
            f"{units.bandwidth(hw.memory_bandwidth)}, "
            f"{units.decimal_bytes(hw.memory_bytes)}; ridge point {hw.ridge(dtype):.3g} FLOP/B ({kind}: "
            f"{source}); "
            "time = max(FLOPs / peak, fused bytes / bandwidth), a lower bound")


def components_table(a: Analysis) -> Table:
    """Every leaf in one phase: where the FLOPs go, and where the bytes go."""
    t = a.total()

    def cells(r: Row) -> tuple[str, ...]:
        return (
            units.flops(r.flops, short=True) if r.flops else "", units.percent(r.flops, t.flops),
            units.nbytes(r.bytes_unfused) if r.bytes_unfused else "",
            units.percent(r.bytes_unfused, t.bytes_unfused),
            f"{r.flops / r.bytes_unfused:.3g}" if r.bytes_unfused else "",
            units.nbytes(r.kv_cache) if r.kv_cache else "",
        )

    rows = [(r.path, *cells(r)) for r in a.rows if r.flops or r.bytes_unfused]
    rows.append(("total", *cells(t)))
    shape = " ".join(f"{k}={v}" for k, v in a.shape.items() if a.spec.is_encoder_decoder or "_e" not in k)
    return Table(
        f"{a.phase}: components",
        ("component", "FLOPs", "%", "bytes", "%", "FLOP/B", "KV cache"),
        rows,
        (f"{shape}; layer rows are summed over their layers; bytes unfused, in {a.dtype}",),
        essential=(0, 1, 3), drop_first=(2, 4, 5),  # the component, its FLOPs and bytes; shares first
    )


# --- rendering -------------------------------------------------------------------------------


def render_rich(tables: Sequence[Table], header: str | None = None, width: int | None = None,
                wide: bool = False) -> None:
    """Tables as text. `width`: the terminal's columns, which each table fits (its text columns
    wrapped, then the right-most columns left out and named under it) unless `wide`; None (piped
    output: CI logs, files): every table at its full width, never cut (notes wrap at 160)."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=width or 160)
    unbounded = console.options.update_width(1 << 20)  # a table's width when nothing holds it in
    if header:
        console.print(header, highlight=False)
    for t in tables:
        shown = list(range(len(t.columns)))
        rt = _rich_table(t, shown, wrap_text=False)
        full = console.measure(rt, options=unbounded).maximum
        dropped: list[int] = []
        if width is not None and not wide and full > width:
            shown, dropped = fit(t, width)
            console.print(_rich_table(t, shown, wrap_text=True))
        else:
            # a console as wide as the table: Console.print(width=) cannot go past the console's
            Console(width=max(full, console.width)).print(rt)
        notes = list(t.notes)
        if dropped:
            names = ", ".join(t.columns[i] if t.columns[i] and t.columns.count(t.columns[i]) == 1
                              else f"{t.columns[i]} (column {i + 1})".lstrip() for i in dropped)
            notes.append(f"left out to fit {width} columns: {names} (--wide for all)")
        for note in notes:
            console.print(f"  {escape(note)}", style="dim", highlight=False)
        console.print()


def fit(t: Table, width: int) -> tuple[list[int], list[int]]:
    """The columns of `t` shown in `width` columns, and those left out (in table order): the least
    essential first (``Table.drop_order``) until the rest fit with their text wrapped; the
    essential ones stay even when they alone do not fit."""
    shown, dropped = list(range(len(t.columns))), []
    for i in t.drop_order():
        if _narrowest(t, shown) <= width:
            break
        shown.remove(i)
        dropped.append(i)
    return shown, sorted(dropped)


def _narrowest(t: Table, shown: Sequence[int]) -> int:
    """The fewest columns `t`'s columns `shown` take with their text wrapped at spaces (numbers
    never wrap): what ``_rich_table(t, shown, wrap_text=True)`` needs to print without cutting."""
    from rich.cells import cell_len

    total = 0
    for i in shown:
        cells = [t.columns[i], *(row[i] for row in t.rows if i < len(row))]
        if i >= t.numeric_from:
            total += max(map(cell_len, cells))
        else:
            total += max((cell_len(w) for c in cells for w in c.split()), default=0)
    return total + 3 * len(shown)  # a space each side of each column, one rule between them


def _rich_table(t: Table, shown: Sequence[int], wrap_text: bool) -> Any:
    """`t`'s columns `shown` as a rich table; cells are text, not markup ("layers[local]/attention"
    prints as written). `wrap_text`: its text columns (and those of ``Table.wrap``) may wrap."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table as RichTable

    rt = RichTable(title=escape(t.title), box=box.SIMPLE_HEAVY, title_justify="left", title_style="bold",
                   padding=(0, 1), pad_edge=False)
    for i in shown:
        numeric = i >= t.numeric_from
        wraps = i in t.wrap or (wrap_text and not numeric)
        rt.add_column(escape(t.columns[i]), justify="right" if numeric else "left", no_wrap=not wraps,
                      overflow="fold" if wraps else "ellipsis")
    for row in t.rows:
        rt.add_row(*(escape(row[i]) if i < len(row) else "" for i in shown),
                   style="bold" if row[0] == "total" else None)
    return rt


def render_markdown(tables: Sequence[Table], header: str | None = None) -> str:
    out = [f"{header}\n"] if header else []
    for t in tables:
        out.append(f"### {t.title}\n")
        out.append("| " + " | ".join(t.columns) + " |")
        out.append("|" + "|".join("---:" if i >= t.numeric_from else "---" for i in range(len(t.columns)))
                   + "|")
        out.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in t.rows)
        out.extend(f"\n{note}" for note in t.notes)
        out.append("")
    return "\n".join(out)


CSV_FIELDS = ("spec", "phase", "batch", "seq", "dtype", "component", "params", "flops_matmul",
              "flops_matmul_effective", "flops_other", "bytes_unfused", "bytes_fused", "kv_cache")
#: With --hardware, each phase's total row also carries where it sits on the roofline.
CSV_ROOFLINE = ("compute_s", "memory_s", "time_s", "ridge", "bound")
#: With --convention, one row per paper: its params and training FLOPs per token beside ours.
CSV_CONVENTION = ("train_flops_per_token", "ours_train_flops_per_token")


def render_csv(
    analyses: Sequence[Analysis], hw: Hardware | None = None, conventions: Sequence[ConventionRow] = (),
    conventions_seq: int | str = "",
) -> str:
    """One row per component per phase, raw integers; a `total` row closes each phase. With a
    device, the total rows carry the roofline; with conventions, a row per paper follows
    (component ``convention/NAME``, phase train). Every figure the tables show, unformatted."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    extra = (CSV_ROOFLINE if hw else ()) + (CSV_CONVENTION if conventions else ())
    writer.writerow(CSV_FIELDS + extra)
    blank_roof = ("",) * len(CSV_ROOFLINE) if hw else ()
    blank_conv = ("",) * len(CSV_CONVENTION) if conventions else ()
    for a in analyses:
        total = a.total()
        for r in (*a.rows, total):
            roof: tuple[Any, ...] = blank_roof
            if hw is not None and r is total:
                line = roofline_of(total, hw, a.dtype)
                roof = (line.compute_s, line.memory_s, line.time_s, line.ridge, line.bound)
            writer.writerow((a.spec.name, a.phase, a.batch, a.seq, a.dtype, r.path, r.params,
                             r.flops_matmul, r.flops_matmul_effective, r.flops_other,
                             r.bytes_unfused, r.bytes_fused, r.kv_cache, *roof, *blank_conv))
    for c in conventions:
        a = analyses[0]
        writer.writerow((a.spec.name, "train", a.batch, conventions_seq, a.dtype,
                         f"convention/{c.count.convention}",
                         c.count.params if c.count.params is not None else "", "", "", "", "", "", "",
                         *blank_roof, c.count.train if c.count.train is not None else "", c.ours_train))
    return buf.getvalue()


def records_csv(records: Sequence[dict[str, Any]]) -> str:
    """Nested dicts flattened to dotted columns, one line per record."""
    flat = [_flatten(r) for r in records]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    w.writerows(flat)
    return buf.getvalue()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:  # a list in one cell as JSON (an error band's records), not Python's repr
            out[f"{prefix}{k}"] = json.dumps(v, allow_nan=False) if isinstance(v, list) else v
    return out


def render_tables_csv(tables: Sequence[Table]) -> str:
    """Every cell of every table, one per line: table, row (its first cell), column, value."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(("table", "row", "column", "value"))
    for t in tables:
        for row in t.rows:
            for col, cell in zip(t.columns[1:], row[1:], strict=False):
                writer.writerow((t.title, row[0], col, cell))
    return buf.getvalue()


def data_csv(data: Any) -> str:
    """A command's JSON result as CSV, numbers in base units (bytes, seconds, FLOPs) with the
    unit in the column name as JSON has it: its longest list of records (a mapping of records,
    such as ``phases``, counts as one, its keys in a first column), each line led by the top-level
    scalars; a result with no such list is one line."""
    if isinstance(data, list):
        return records_csv([r if isinstance(r, dict) else {"value": r} for r in data])
    if not isinstance(data, dict):
        return records_csv([{"value": data}])
    head = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
    lists: dict[str, list[dict[str, Any]]] = {}
    for k, v in data.items():
        if isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
            lists[k] = v
        elif isinstance(v, dict) and v and all(isinstance(r, dict) for r in v.values()):
            lists[k] = [{k: key, **r} for key, r in v.items()]
    if not lists:
        return records_csv([_flatten(data)])
    name = max(lists, key=lambda k: len(lists[k]))
    return records_csv([{**head, **r} for r in lists[name]])


def render_json(data: Any) -> str:
    """JSON as RFC 8259 has it: an Infinity or NaN is a bug to report, never output."""
    return json.dumps(data, indent=2, allow_nan=False)


def kernel_notes(items: Iterable[HasReads]) -> list[str]:
    """Lines under a table of GPU times, the same for every command that prints one (analyze
    --hardware, inference, serve, train, plan): how far the measured kernel tables its times read
    lay from other frameworks' measurements of the same kernels, and which op classes were read
    past those tables (``devices.kernels.Reads``)."""
    reads = Reads.union(items)
    notes = []
    if reads.errors:
        notes.append("measured kernel tables, error against other frameworks' measurements: "
                     + "; ".join(f"{op} {band_label(bands)}" for op, bands in reads.errors.items()))
    if reads.extrapolated:
        notes.append("extrapolated past the measured tables (the kernel model's rule, docs/gpu-time.md): "
                     + ", ".join(reads.extrapolated))
    return notes
