"""`costmodel report`: parse, call the library (``costmodel.report.html``), write the page or print
its tables."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from costmodel import catalog
from costmodel.cli.app import (
    CLUSTER_HELP,
    GLOBAL_BATCH_HELP,
    GPUS_HELP,
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    HardwareOpt,
    SeqOpt,
    SpecArg,
    _user_errors,
    app,
    emit,
)
from costmodel.devices.hardware import load_hardware
from costmodel.errors import AnalysisError

#: What the report's --cluster adds, after train's and plan's options of the same names.
CLUSTER = " With it: one training step's waterfall and every layout plan searches (docs/report.md)."
LAYOUT = " Default: the plan's best layout (--tp or --pp given: TP x PP x DP, DP = N / (TP x PP))."


@app.command("report")
def report_cmd(
    spec: SpecArg,
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", help="The page to write (.html): one self-contained file, no network, no "
        "JavaScript. Default: print the page's tables in --format.")] = None,
    hardware: HardwareOpt = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    fmt: FormatOpt = Format.table,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help=CLUSTER_HELP + CLUSTER
                                                   + " Its GPU is the device (not with --hardware).")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", "-n", help=GPUS_HELP + " With --cluster.")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-G", help=GLOBAL_BATCH_HELP
                                                        + " With --cluster.")] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel size." + LAYOUT)] = None,
    pp: Annotated[Optional[int], typer.Option("--pp", help="Pipeline-parallel stages." + LAYOUT)] = None,
    micro_batch: Annotated[int, typer.Option("--micro-batch", "-m", help="Sequences per micro-batch, with "
                                             "--tp or --pp.")] = 1,
) -> None:
    """One HTML page of a spec: its card, parameters by component, FLOPs, bytes and intensity per
    phase, memory per GPU, KV cache and decode intensity of MHA / GQA / MQA (MLA) against context;
    with --hardware, FLOP share vs time share by operator class, a per-component roofline per
    phase, and TTFT and TPOT against batch; with --cluster, a training step's waterfall and the
    plan's layouts. Every chart (inline SVG) also as a table (docs/report.md). With -o the page is
    written (and --format json, markdown or csv also prints its tables); without it, the tables
    are printed."""
    from costmodel.report import html
    from costmodel.report.section import sections_csv

    with _user_errors():
        if output is not None:  # before the work: a bad name is bad input, not an error after it
            html.check_output(output)
        options = (("--gpus", gpus), ("--global-batch", global_batch), ("--tp", tp), ("--pp", pp))
        given = [n for n, v in options if v is not None]
        if cluster is None and given:
            raise AnalysisError(f"{given[0]}: needs --cluster (a training step runs on a cluster)")
        if cluster is not None and hardware is not None:
            raise AnalysisError("--hardware: not with --cluster (the cluster's GPU is the device)")
        if cluster is not None and (gpus is None or global_batch is None):
            raise AnalysisError(f"{'--gpus' if gpus is None else '--global-batch'}: needed with --cluster")
        s = catalog.load(spec)
        found = None
        if cluster is not None and gpus is not None and global_batch is not None:
            from costmodel.report import cluster as report_cluster

            found = report_cluster.on_cluster(s, cluster, gpus, global_batch, seq, dtype.value, tp, pp,
                                              micro_batch)
        hw = found.cluster.hardware if found else load_hardware(hardware) if hardware else None
        if hw is not None:
            hw.peak(dtype.value)  # a dtype the device lacks is an error before any work
        parts = html.sections(s, hw, batch, seq, dtype.value, enc_seq) + (found.sections() if found else [])
        written = html.write(html.page(s, parts), output) if output is not None else None
    if written is None or fmt is not Format.table:
        emit(fmt, lambda: [p.to_table() for p in parts],
             lambda: {"spec": s.name, "hardware": hw.name if hw else None,
                      "sections": [p.to_dict() for p in parts]},
             s, csv=lambda: sections_csv(parts))
    if written is not None:  # beside printed tables or JSON, on stderr
        typer.echo(f"wrote {written}", err=fmt is not Format.table)
    if found is not None and (found.step is None or not found.step.fits):  # the page shows why; exit 1
        typer.echo(f"error: {found.why()}", err=True)
        raise typer.Exit(1)
