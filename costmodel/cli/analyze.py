"""`costmodel analyze`, `formula` and `list`: parse, call the library, render. No formulas here."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from costmodel import catalog, symbols
from costmodel.analysis import (
    FORMULA_ALIASES,
    FORMULA_QUANTITIES,
    AnalysisError,
    count_params,
    default_seq,
    formula,
    phases_of,
)
from costmodel.cli.app import (
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    HardwareOpt,
    KernelsOpt,
    KvDtypeOpt,
    MlaDeviceOpt,
    MlaOpt,
    PhaseName,
    SeqOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    emit,
)
from costmodel.components.mla import Convention
from costmodel.components.moe import Routing
from costmodel.devices.hardware import load_hardware
from costmodel.phases import PHASES
from costmodel.precision import DEFAULT_GROUP, Widths
from costmodel.report import tables as report
from costmodel.runtime.on_device import analyze
from costmodel.studies import conventions
from costmodel.studies.conventions import ConventionName, ConventionRow

if TYPE_CHECKING:
    from costmodel.devices.hardware import Hardware
    from costmodel.runtime.on_device import DeviceAnalysis
    from costmodel.spec import Spec
    from costmodel.studies.op_classes import ClassShares

RoutingOpt = Annotated[Routing, typer.Option("--routing",
                                             help="Mixture of experts: the experts a sparse layer reads over "
                                                  "T tokens, uniform (the expectation E*(1-(1-K/E)^T)) or "
                                                  "worst (min(E, T*K)).")]

#: `formula --quantity`: the library's formula quantities, and their older aliases.
Quantity = Enum(  # type: ignore[misc]
    "Quantity", {q: q for q in (*FORMULA_QUANTITIES, *FORMULA_ALIASES)}, type=str)


@app.command("analyze")
def analyze_cmd(
    spec: SpecArg,
    phase: Annotated[Optional[PhaseName], typer.Option("--phase", "-p",
                                                       help="One phase, with its per-component table. "
                                                            "Default: all three.")] = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    hardware: HardwareOpt = None,
    fmt: FormatOpt = Format.table,
    convention: Annotated[Optional[list[ConventionName]], typer.Option(
        "--convention", metavar="PAPER", help="Also count training FLOPs and params as these papers do "
        "(repeatable): kaplan, chinchilla, megatron, palm, all.")] = None,
    mla: MlaDeviceOpt = None,
    routing: RoutingOpt = Routing.uniform,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    kernel_names: KernelsOpt = None,
    by_class: Annotated[bool, typer.Option(
        "--by-class", help="Also each phase's FLOPs, bytes and (with --hardware) predicted time by operator "
        "class, each with its share: tensor contractions, statistical normalisations (softmax, norms), "
        "element-wise (Ivanov et al. 2021; docs/op-classes.md).")] = False,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="FILE", help="Also draw the per-component roofline of the phases shown into this "
        "file (.svg; .png, .pdf with the `plot` extra); needs --hardware.")] = None,
) -> None:
    """Parameters, FLOPs, bytes, KV cache and arithmetic intensity of a spec; with --hardware,
    the roofline time of each phase and whether it is compute- or memory-bound. A spec with latent
    attention also shows its naive and absorbed conventions side by side. --weights-dtype and
    --kv-dtype (inference) hold the weights and the cache at other widths than --dtype."""
    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            from costmodel.report.files import plot_path

            plot_path(plot)
            if hardware is None:
                raise AnalysisError("--plot: draws the per-component roofline on a device; give --hardware")
        s = catalog.load(spec)
        hw = load_hardware(hardware) if hardware else None
        if hw:
            hw.peak(dtype.value)  # a dtype the device lacks is an error before any work
        if kernel_names is not None and hw is None:
            raise AnalysisError("--kernels: the kernels a time assumes; give --hardware too")
        assumed = None  # the device's default (runtime.kernels), said as such in the output
        default_mla = Convention.naive.value
        if hw is not None:
            from costmodel.runtime import kernels

            assumed = kernels.KERNELS[kernel_names.value] if kernel_names else None
            # latent attention as the device runs it at inference (training learns kv_b: naive)
            default_mla = kernels.default_mla(hw)

        def mla_of(p: str) -> str:
            return mla.value if mla else Convention.naive.value if PHASES[p].training else default_mla

        precision = Widths(weights_dtype, kv_dtype, group_size)
        # other widths are inference options: without --phase, the inference phases
        inference_only = precision.differs(dtype.value)
        phases = [phase.value] if phase else [p.value for p in PhaseName if p.value in phases_of(s)
                                             and not (inference_only and PHASES[p.value].training)]
        analyses = [analyze(s, p, batch=batch, seq=seq, dtype=dtype.value, enc_seq=enc_seq, hardware=hw,
                            mla=mla_of(p), routing=routing.value,
                            weights_dtype=weights_dtype, kv_dtype=kv_dtype, group_size=group_size,
                            kernels=assumed) for p in phases]
        latent = []
        if s.mla is not None:  # both conventions side by side
            from costmodel.studies.attention_variants import compare_latent

            latent = compare_latent(s, phases, batch, seq, dtype.value)
        papers = conventions.selected([c.value for c in convention or []])
        train_seq = seq if seq is not None else default_seq(s, "train")
        paper_rows = conventions.compare_conventions(s, train_seq, papers) if papers else []
        classes = []
        if by_class:
            from costmodel.studies.op_classes import phase_classes

            classes = [phase_classes(a) for a in analyses]
        if hw:  # a shape that cannot fit gets one line on stderr
            from costmodel.runtime.memory import fit_warning

            for a in analyses:
                warning = fit_warning(s, a.phase, batch, seq, enc_seq, dtype.value, hw.name, hw.memory_bytes,
                                      mla_of(a.phase), precision)
                if warning:
                    typer.echo(warning, err=True)
        if plot is not None and hw is not None:
            from costmodel.report.files import save_plot
            from costmodel.report.spec_figures import phases_roofline

            written = save_plot(phases_roofline(analyses, hw).chart, plot)
    _emit(fmt, s, analyses, hw, phase is not None, paper_rows, train_seq, latent, classes)
    if plot is not None:
        typer.echo(f"wrote {written}", err=True)


def _emit(fmt: Format, s: Spec, analyses: list[DeviceAnalysis], hw: Hardware | None, one_phase: bool,
          paper_rows: list[ConventionRow], train_seq: int, latent: list[Any],
          classes: list[ClassShares]) -> None:
    """analyze's tables, JSON and CSV."""

    def data() -> dict[str, object]:
        phases = {a.phase: a.to_dict() for a in analyses}  # each with its roofline when hw is given
        for c in classes:
            phases[c.phase]["op_classes"] = c.to_dict()
        out: dict[str, object] = {"spec": s.name, "phases": phases}
        if s.ignored_fields:  # a config's unknown fields, skipped (costmodel.hf)
            out["ignored_fields"] = list(s.ignored_fields)
        if paper_rows:
            out["conventions"] = {"seq": train_seq, "rows": [r.to_dict() for r in paper_rows]}
        if latent:
            out["mla_conventions"] = [r.to_dict() for r in latent]
        return out

    tables = [report.params_table(analyses[0]), report.phases_table(analyses, hw)]
    if one_phase:
        tables.append(report.components_table(analyses[0]))
    if classes:
        from costmodel.report.op_classes import op_classes_table

        tables.append(op_classes_table(classes))
    if paper_rows:
        # with compare and variants: kept out of plain analyze's start-up
        from costmodel.report import compare as compare_report

        tables.append(compare_report.conventions_table(paper_rows, train_seq))
    if latent:
        from costmodel.report import attention as report_attention

        tables.append(report_attention.latent_table(latent))
    emit(fmt, tables, data, s, csv=lambda: report.render_csv(analyses, hw, paper_rows, train_seq))


@app.command("formula")
def formula_cmd(
    spec: SpecArg,
    quantity: Annotated[Quantity, typer.Option("--quantity", "-q", metavar="QUANTITY",
                                               help="What to express: " + ", ".join(FORMULA_QUANTITIES)
                                               + ".")] = Quantity.flops,  # type: ignore[attr-defined]
    phase: Annotated[PhaseName, typer.Option("--phase", "-p",
                                             help="The phase: fixes S or C.")] = PhaseName.prefill,
    component: Annotated[str, typer.Option("--component", "-c",
                                           help="A component path or prefix (layers/attention, lm_head). "
                                                "Default: the whole model.")] = "",
    symbolic: Annotated[bool, typer.Option(
        "--symbolic", help="Keep the spec's sizes as symbols (d, h, k, L, ...).")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX.")] = False,
    asymptotic: Annotated[bool, typer.Option(
        "--asymptotic", help="Instead: the leading-order FLOPs and memory of the spec's attention layer "
        "(d_h = d/h) as batch and length grow, beside Shazeer (2019): batched MHA, incremental MHA, "
        "incremental MQA.")] = False,
    fmt: FormatOpt = Format.table,
    mla: MlaOpt = Convention.naive,
    routing: RoutingOpt = Routing.uniform,
) -> None:
    """The sympy expression behind a number, over the symbols of docs/reference.md (with
    --symbolic, a legend of them on stderr)."""
    import sympy

    with _user_errors():
        s = catalog.load(spec)
        if asymptotic:
            from costmodel.studies.asymptotics import shazeer

            results = shazeer(s)
        else:
            expr = formula(s, quantity.value, phase.value, component, symbolic=symbolic, mla=mla.value,
                           routing=routing.value)
    if asymptotic:
        from costmodel.report import attention as report_attention

        emit(fmt, lambda: [report_attention.shazeer_table(s.name, results)],
             {"spec": s.name, "results": [r.to_dict() for r in results]},
             csv=lambda: report_attention.records_csv([r.to_dict() for r in results]))
        return
    names = symbols.legend(str(x) for x in expr.free_symbols)
    if fmt is Format.json:
        typer.echo(report.render_json({
            "spec": s.name, "quantity": quantity.value, "phase": phase.value,
            "component": component or "total",
            "symbolic": symbolic, "formula": str(expr), "latex": sympy.latex(expr)}
            | ({"symbols": names} if symbolic else {})))
        return
    if fmt is Format.csv:
        emit(fmt, [], None, csv=report.records_csv([{"spec": s.name, "quantity": quantity.value,
                                                     "phase": phase.value, "component": component or "total",
                                                     "formula": str(expr)}]))
        return
    typer.echo(sympy.latex(expr) if latex else str(expr))
    if symbolic:  # the legend on stderr: stdout stays the expression alone, for pipes
        width = max(map(len, names), default=0)
        for name, text in names.items():
            typer.echo(f"  {name:<{width}}  {text}", err=True)


@app.command("list")
def list_cmd(fmt: FormatOpt = Format.table) -> None:
    """The bundled specs, with their published and computed parameter counts."""
    from costmodel import units

    with _user_errors():
        specs = [catalog.load_spec(p) for p in catalog.bundled_paths()]
    specs.sort(key=lambda s: (s.year or 0, s.name))
    rows, data = [], []
    for s in specs:
        ours = count_params(s)
        pub = s.published
        exact = "" if not (pub and pub.exact) else "equal" if pub.exact == ours else f"{ours - pub.exact:+,}"
        rows.append((s.name, str(s.year or ""), s.architecture.value, str(pub.params) if pub else "",
                     f"{ours:,}", units.count(ours),
                     f"{100 * (ours - pub.value) / pub.value:+.2f}%" if pub else "", exact))
        data.append({"name": s.name, "family": s.family, "year": s.year,
                     "architecture": s.architecture.value, "published": pub.params if pub else None,
                     "params": ours, "exact": pub.exact if pub else None, "default_seq": default_seq(s)})
    table = report.Table(
        "Bundled specs",
        ("spec", "year", "architecture", "published", "params (ours)", "", "vs published", "vs released"),
        rows, numeric_from=3,
        notes=("vs released: our count against the exact count of the released implementation",),
    )
    emit(fmt, [table], data, csv=lambda: report.records_csv(data))
