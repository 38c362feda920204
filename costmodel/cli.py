"""The `costmodel` command: parse, call the library, render. No formulas here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Annotated, Optional

import typer

from costmodel import catalog, compare_report, conventions, metrics, report
from costmodel.analysis import AnalysisError, analyze, count_params, default_seq, formula
from costmodel.conventions import ConventionName
from costmodel.hardware import load_hardware
from costmodel.spec import Spec, SpecError, load_spec

app = typer.Typer(
    help="Analytical cost model for transformer architectures: parameters, FLOPs, bytes, "
    "arithmetic intensity and KV cache, per component and per phase, from a YAML spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class PhaseName(str, Enum):
    train = "train"
    prefill = "prefill"
    decode = "decode"


class Dtype(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"
    fp8 = "fp8"


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


class Quantity(str, Enum):
    params = "params"
    flops = "flops"
    flops_matmul = "flops_matmul"
    flops_matmul_effective = "flops_matmul_effective"
    flops_other = "flops_other"
    bytes = "bytes"
    bytes_fused = "bytes_fused"
    kv_cache = "kv_cache"


SpecArg = Annotated[str, typer.Argument(help="A spec file, or the name of a bundled spec (see `costmodel list`).")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", min=1, help="Sequences per pass (B).")]
SeqOpt = Annotated[
    Optional[int],
    typer.Option("--seq", "-s", min=1, help="Prompt length S (prefill, train); cached tokens (decode). "
                 "Default: a 2048-token context (or max_seq_len if shorter): 2048 for prefill and train, 2047 cached for decode."),
]
EncSeqOpt = Annotated[Optional[int], typer.Option("--enc-seq", min=1, help="Encoder input length (encoder-decoder only). Default: --seq.")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Element type of weights and activations.")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
HARDWARE_HELP = ("A device profile: a bundled name (a100-80gb, h100-sxm, h200, b200, l4, rtx-4090), `local` "
                 "once `costmodel calibrate` has measured this machine, or a YAML file. See `costmodel hardware`.")
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help=HARDWARE_HELP)]


@contextmanager
def _user_errors() -> Iterator[None]:
    """Bad input ends in one line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except (SpecError, AnalysisError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


@app.command("analyze")
def analyze_cmd(
    spec: SpecArg,
    phase: Annotated[Optional[PhaseName], typer.Option("--phase", "-p", help="One phase, with its per-component table. Default: all three.")] = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    hardware: HardwareOpt = None,
    fmt: FormatOpt = Format.table,
    convention: Annotated[Optional[list[ConventionName]], typer.Option("--convention", help="Also count training FLOPs and params as these papers do (repeatable): kaplan, chinchilla, megatron, palm, all.")] = None,
) -> None:
    """Parameters, FLOPs, bytes, KV cache and arithmetic intensity of a spec; with --hardware,
    the roofline time of each phase and whether it is compute- or memory-bound."""
    with _user_errors():
        s = catalog.load(spec)
        hw = load_hardware(hardware) if hardware else None
        if hw:
            hw.peak(dtype.value)  # a dtype the device lacks is an error before any work
        phases = [phase.value] if phase else [p.value for p in PhaseName]
        analyses = [analyze(s, p, batch=batch, seq=seq, dtype=dtype.value, enc_seq=enc_seq) for p in phases]
        papers = conventions.selected([c.value for c in convention or []])
        train_seq = seq if seq is not None else default_seq(s, "train")
        paper_rows = conventions.compare_conventions(s, train_seq, papers) if papers else []
    if fmt is Format.json:
        dicts = [a.to_dict() | ({"roofline": metrics.roofline_json(a.total(), hw, a.dtype)} if hw else {})
                 for a in analyses]
        data = dicts[0] if phase else {"spec": s.name, "phases": {a.phase: d for a, d in zip(analyses, dicts)}}
        if paper_rows:
            data["conventions"] = {"seq": train_seq, "rows": [r.to_dict() for r in paper_rows]}
        typer.echo(report.render_json(data))
        return
    if fmt is Format.csv:
        typer.echo(report.render_csv(analyses), nl=False)
        return
    tables = [report.params_table(analyses[0]), report.phases_table(analyses, hw)]
    if phase:
        tables.append(report.components_table(analyses[0]))
    if paper_rows:
        tables.append(compare_report.conventions_table(paper_rows, train_seq))
    render_tables(tables, fmt, s)


def render_tables(tables: list[report.Table], fmt: Format, spec: Spec | None = None) -> None:
    """Markdown or rich tables, under a line describing `spec` when given."""
    if fmt is Format.markdown:
        typer.echo(report.render_markdown(tables, f"## {spec.name}: {report.describe(spec)}" if spec else None))
    else:
        report.render_rich(tables, report.rich_header(spec) if spec else None)


@app.command("formula")
def formula_cmd(
    spec: SpecArg,
    quantity: Annotated[Quantity, typer.Option("--quantity", "-q", help="What to express.")] = Quantity.flops,
    phase: Annotated[PhaseName, typer.Option("--phase", "-p", help="The phase: fixes S or C.")] = PhaseName.prefill,
    component: Annotated[str, typer.Option("--component", "-c", help="A component path or prefix (layers/attention, lm_head). Default: the whole model.")] = "",
    symbolic: Annotated[bool, typer.Option("--symbolic", help="Keep the spec's sizes as symbols (d, h, k, L, ...).")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX.")] = False,
    asymptotic: Annotated[bool, typer.Option(
        "--asymptotic", help="Instead: the leading-order FLOPs and memory of the spec's attention layer "
        "(d_h = d/h) as batch and length grow, beside Shazeer (2019): batched MHA, incremental MHA, "
        "incremental MQA.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """The sympy expression behind a number, over the symbols of DESIGN.md."""
    import sympy

    with _user_errors():
        s = catalog.load(spec)
        if asymptotic:
            from costmodel.asymptotics import shazeer

            results = shazeer(s)
        else:
            expr = formula(s, quantity.value, phase.value, component, symbolic=symbolic)
    if asymptotic:
        from costmodel import report_attention

        if fmt is Format.json:
            typer.echo(report.render_json({"spec": s.name, "results": [r.to_dict() for r in results]}))
        elif fmt is Format.csv:
            typer.echo(report_attention.records_csv([r.to_dict() for r in results]), nl=False)
        else:
            render_tables([report_attention.shazeer_table(s.name, results)], fmt)
        return
    if fmt is Format.json:
        typer.echo(report.render_json({
            "spec": s.name, "quantity": quantity.value, "phase": phase.value, "component": component or "total",
            "symbolic": symbolic, "formula": str(expr), "latex": sympy.latex(expr)}))
    elif latex:
        typer.echo(sympy.latex(expr))
    else:
        typer.echo(str(expr))


@app.command("list")
def list_cmd(fmt: FormatOpt = Format.table) -> None:
    """The bundled specs, with their published and computed parameter counts."""
    with _user_errors():
        specs = [load_spec(p) for p in catalog.bundled_paths()]
    specs.sort(key=lambda s: (s.year or 0, s.name))
    rows, data = [], []
    for s in specs:
        ours = count_params(s)
        pub = s.published
        exact = "" if not (pub and pub.exact) else "equal" if pub.exact == ours else f"{ours - pub.exact:+,}"
        rows.append((s.name, str(s.year or ""), s.architecture.value, str(pub.params) if pub else "",
                     f"{ours:,}", report.units.count(ours),
                     f"{100 * (ours - pub.value) / pub.value:+.2f}%" if pub else "", exact))
        data.append({"name": s.name, "family": s.family, "year": s.year,
                     "architecture": s.architecture.value, "published": pub.params if pub else None,
                     "params": ours, "exact": pub.exact if pub else None, "default_seq": default_seq(s)})
    if fmt is Format.json:
        typer.echo(report.render_json(data))
        return
    table = report.Table(
        "Bundled specs",
        ("spec", "year", "architecture", "published", "params (ours)", "", "vs published", "vs released"),
        rows, numeric_from=3,
        notes=("vs released: our count against the exact count of the released implementation",),
    )
    if fmt is Format.markdown:
        typer.echo(report.render_markdown([table]))
    elif fmt is Format.csv:
        typer.echo("spec,year,architecture,published,params")
        for d in data:
            typer.echo(f"{d['name']},{d['year'] or ''},{d['architecture']},{d['published'] or ''},{d['params']}")
    else:
        report.render_rich([table])


def main() -> None:  # pragma: no cover - the console script
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


from costmodel import cli_compare  # noqa: E402,F401
from costmodel import cli_hf  # noqa: E402,F401
from costmodel import cli_attention  # noqa: E402,F401
from costmodel import cli_measure  # noqa: E402,F401
from costmodel import cli_train  # noqa: E402,F401
