"""`costmodel report`: parse, call the library (``costmodel.report.html``), write the page."""

from __future__ import annotations

from typing import Annotated

import typer

from costmodel import catalog
from costmodel.cli.app import (
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    HardwareOpt,
    SeqOpt,
    SpecArg,
    _user_errors,
    app,
)
from costmodel.devices.hardware import load_hardware


@app.command("report")
def report_cmd(
    spec: SpecArg,
    output: Annotated[str, typer.Option("--output", "-o", help="The page to write (.html): one "
                                        "self-contained file, no network, no JavaScript.")],
    hardware: HardwareOpt = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
) -> None:
    """One HTML page of a spec: its card, parameters by component, FLOPs, bytes and intensity per
    phase, memory per GPU; with --hardware, FLOP share vs time share by operator class and a
    per-component roofline per phase. Every chart (inline SVG) also as a table (docs/report.md)."""
    from costmodel.report import html

    with _user_errors():
        html.check_output(output)  # before the work: a bad name is bad input, not an error after it
        s = catalog.load(spec)
        hw = load_hardware(hardware) if hardware else None
        if hw is not None:
            hw.peak(dtype.value)  # a dtype the device lacks is an error before any work
        written = html.write(html.build(s, hw, batch, seq, dtype.value, enc_seq), output)
    typer.echo(f"wrote {written}")
