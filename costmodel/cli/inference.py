"""`costmodel inference`: serving latency and throughput over batch. Parse, call
``costmodel.runtime.serving``, render."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from costmodel import catalog, units
from costmodel.analysis import DEFAULT_SEQ
from costmodel.cli.app import (
    Dtype,
    DtypeOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    KernelsOpt,
    KvDtypeOpt,
    MlaDeviceOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    emit,
)
from costmodel.devices.hardware import load_hardware
from costmodel.precision import DEFAULT_GROUP, Widths
from costmodel.report import files
from costmodel.report import tables as report
from costmodel.report.serving_figures import tradeoff_chart
from costmodel.runtime import kernels
from costmodel.runtime.serving import Serving, parse_batches, serve


def serving_table(sv: Serving) -> report.Table:
    def s(x: float | None) -> str:
        return units.seconds(x) if x is not None else "-"

    rows = [(str(p.batch), s(p.ttft_s), s(p.tpot_s), s(p.tpot_first_s), s(p.tpot_last_s), s(p.latency_s),
             f"{p.tokens_per_s:,.1f}", {True: "yes", False: "NO", None: "-"}[p.fits]) for p in sv.points]
    notes = [
        f"prompt {sv.prompt} tokens, {sv.output} generated, {sv.dtype}{sv.precision.label(sv.dtype)} on "
        f"{sv.hardware.name}; "
        + ("logits at every prompt position (--all-logits, the HF forward)" if sv.all_logits
           else "prefill computes the logits of the last position only (as serving does; --all-logits for "
                "all)"),
        "TPOT grows with the context: mean over the output, and its first and last step; "
        "tokens/s = batch x output / latency, per device",
        "fits: weights + KV cache at the last step within device memory (activations not counted)",
    ]
    notes.append(kernels.note(sv.kernels, sv.hardware, sv.kernels_default))
    if sv.spec.mla is not None:
        notes.append(f"latent attention: {sv.mla} (--mla naive|absorbed; the cached latent is the same in "
                     "both)")
    if sv.note:
        notes.append(sv.note)
    else:
        notes.append("calibrated: each component at the efficiency its shape reaches (costmodel.timing)")
    notes += report.kernel_notes([sv])
    return report.Table("Serving", ("batch", "TTFT", "TPOT mean", "TPOT first", "TPOT last", "latency",
                                    "tokens/s", "fits"), rows, notes,
                        essential=(0, 1, 2, 6, 7), drop_first=(4, 3, 5))  # the first and last TPOT go first


@app.command("inference")
def inference_cmd(
    spec: SpecArg,
    hardware: Annotated[str, typer.Option("--hardware",
                                          help="Hardware profile (bundled name, `local`, or a YAML file).")],
    prompt: Annotated[Optional[int], typer.Option(
        "--seq", "-s", help="Prompt tokens per request. Default: 2048, or what the spec's context "
        "leaves after --output-tokens if less.")] = None,
    output: Annotated[int, typer.Option("--output-tokens",
                                                       help="Generated tokens per request.")] = 256,
    batch: Annotated[str, typer.Option("--batch", "-b",
                                       help="Batch sizes, comma-separated: 1,8,64.")] = "1,8,64",
    dtype: DtypeOpt = Dtype.bf16,
    all_logits: Annotated[bool, typer.Option("--all-logits", help="Prefill computes logits at every "
                                             "position (the HF forward), not the last only.")] = False,
    kernel_names: KernelsOpt = None,
    mla: MlaDeviceOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Draw latency against throughput, a point "
                                                "per batch size, into this file (.svg, .png, .pdf).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Serving: time to first token, time per output token, latency and tokens/s per batch size."""
    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            files.plot_path(plot)
        batches = parse_batches(batch)
        hw = load_hardware(hardware)
        s = catalog.load(spec)
        if prompt is None:  # a context the spec takes: prompt and output within its positions
            prompt = max(1, min(DEFAULT_SEQ, s.max_seq_len - output))
        chosen = kernels.resolve(kernel_names.value if kernel_names else None, hw, "serve")
        sv = serve(s, hw, prompt, output, batches, dtype.value, all_logits, kernels.KERNELS[chosen],
                   mla.value if mla else kernels.default_mla(hw), Widths(weights_dtype, kv_dtype, group_size),
                   kernels_default=kernel_names is None)
        written = files.save_plot(tradeoff_chart(sv), plot) if plot is not None else None
    emit(fmt, lambda: [serving_table(sv)], sv.to_dict, sv.spec,
         csv=lambda: report.records_csv([{"spec": sv.spec.name, **p.to_dict()} for p in sv.points]))
    if written:  # beside the table, JSON or CSV: on stderr, as every command says what it wrote
        typer.echo(f"wrote {written}", err=True)
    why = sv.unrunnable()
    if why:  # printed in full; exit 1: it cannot run
        typer.echo(f"error: {why}", err=True)
        raise typer.Exit(1)
