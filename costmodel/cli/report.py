"""`costmodel report`: parse, call the library (``costmodel.report.html``), write the page or print
its tables."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from costmodel import catalog
from costmodel.cli.app import (
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
) -> None:
    """One HTML page of a spec: its card, parameters by component, FLOPs, bytes and intensity per
    phase, memory per GPU, KV cache and decode intensity of MHA / GQA / MQA (MLA) against context;
    with --hardware, FLOP share vs time share by operator class and a per-component roofline per
    phase, and TTFT and TPOT against batch. Every chart (inline SVG) also as a table
    (docs/report.md). With -o the page is written (and --format json, markdown or csv also prints
    its tables); without it, the tables are printed."""
    from costmodel.report import html
    from costmodel.report.section import sections_csv

    with _user_errors():
        if output is not None:  # before the work: a bad name is bad input, not an error after it
            html.check_output(output)
        s = catalog.load(spec)
        hw = load_hardware(hardware) if hardware else None
        if hw is not None:
            hw.peak(dtype.value)  # a dtype the device lacks is an error before any work
        parts = html.sections(s, hw, batch, seq, dtype.value, enc_seq)
        written = html.write(html.page(s, parts), output) if output is not None else None
    if written is None or fmt is not Format.table:
        emit(fmt, lambda: [p.to_table() for p in parts],
             lambda: {"spec": s.name, "hardware": hw.name if hw else None,
                      "sections": [p.to_dict() for p in parts]},
             s, csv=lambda: sections_csv(parts))
    if written is not None:  # beside printed tables or JSON, on stderr
        typer.echo(f"wrote {written}", err=fmt is not Format.table)
