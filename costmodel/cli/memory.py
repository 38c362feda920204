"""`costmodel memory` and `costmodel fit`: parse, call the library (``costmodel.runtime.memory``), render."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Optional

import typer

from costmodel import catalog, units
from costmodel.cli.app import (
    BatchOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    HardwareOpt,
    KernelsName,
    KernelsOpt,
    KvDtypeOpt,
    MlaDeviceOpt,
    PhaseName,
    SeqOpt,
    SpecArg,
    _user_errors,
    app,
    emit,
)
from costmodel.components.mla import Convention
from costmodel.devices.hardware import Hardware, load_hardware
from costmodel.precision import WEIGHT_DTYPES
from costmodel.report import tables as report
from costmodel.runtime import kernels
from costmodel.runtime.memory import (
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    MemoryConfigError,
    Parallel,
    Run,
    fit,
    korthikanti,
    memory,
    mla_convention,
)
from costmodel.spec import Spec

PhaseOpt = Annotated[PhaseName, typer.Option("--phase", "-p", metavar="PHASE",
                                             help="train, prefill or decode.")]
OptimizerOpt = Annotated[Optional[str], typer.Option(
    "--optimizer", help=f"Training optimizer: {', '.join(OPTIMIZERS)}. Default: adamw.")]
PrecisionOpt = Annotated[Optional[str], typer.Option(
    "--precision", help=f"Training recipe: {', '.join(PRECISIONS)}. Default: bf16-mixed.")]
ZeroOpt = Annotated[Optional[int], typer.Option(
    "--zero", help="ZeRO stage 0-3 (1: optimizer states, 2: + gradients, 3: + weights sharded); needs --dp.")]
DpOpt = Annotated[Optional[int], typer.Option("--dp",
                                              help="Data-parallel ranks ZeRO shards over. Default: 1.")]
RecomputeOpt = Annotated[Optional[str], typer.Option(
    "--recompute", help=f"Activation recomputation: {', '.join(RECOMPUTE)}. Default: none.")]
WeightsOpt = Annotated[Optional[str], typer.Option(
    "--weights-dtype", help=f"Inference weights: {', '.join(WEIGHT_DTYPES)} (fp8: an FP8 checkpoint's "
    "linear layers, head and router at 16 bits; fp8-block: the same with an fp32 scale per 128 x 128 block; "
    "nvfp4: the same layers in 4-bit E2M1, an E4M3 scale per 16; "
    "int8/int4: weight-only, fp16 scale per group; mxfp4: the "
    "routed experts alone). Default: --dtype.")]
ActOpt = Annotated[Optional[str], typer.Option(
    "--dtype", help="Inference activations (fp32, bf16, fp16, fp8). Default: bf16. Training's widths are "
    "--precision's.")]
MaskOpt = Annotated[int, typer.Option(
    "--mask-bytes", help="Bytes per dropout-mask element: 1 (fused CUDA kernel), or the activation width.")]
LastOpt = Annotated[bool, typer.Option(
    "--last-logits/--all-logits", help="Prefill computes only the last position's logits (serving).")]


def _assumed(name: KernelsName | None, mla: Convention | None, hw: Hardware | None) -> tuple[str, str]:
    """The kernels' name and latent attention's convention: those asked for, or what `hw` runs
    (``runtime.kernels``: flash and absorbed on a GPU, eager and naive without a device)."""
    return (kernels.resolve(name.value if name else None, hw, "train"),
            mla.value if mla else kernels.default_mla(hw))


def _kernels_note(name: str, hw: Hardware | None, default: bool) -> str:
    return kernels.note(kernels.KERNELS[name], hw, default)


def _config(phase: str, optimizer: str | None, precision: str | None, zero: int | None, dp: int | None,
            recompute: str | None, flash: bool, weights_dtype: str | None, kv_dtype: str | None,
            dtype: str | None, group_size: int, mask_bytes: int, last_logits: bool,
            mla: str) -> tuple[Run, Parallel]:
    """The options as a Run and a Parallel; options of the other kind of phase are an error."""
    training = phase == "train"
    given = {"--optimizer": optimizer, "--precision": precision, "--zero": zero, "--recompute": recompute}
    if not training:
        wrong = [name for name, value in given.items() if value is not None]
        if wrong:
            raise MemoryConfigError(f"{wrong[0]}: only for --phase train")
    else:  # the recipe holds training's widths: --dtype fp32 would leave the weights at bf16
        wrong = [name for name, value in {"--dtype": dtype, "--weights-dtype": weights_dtype,
                                          "--kv-dtype": kv_dtype}.items() if value is not None]
        if wrong:
            raise MemoryConfigError(f"{wrong[0]}: only for --phase prefill or decode; training's widths are "
                                    f"--precision's ({', '.join(PRECISIONS)})")
    if zero is not None and zero > 0 and dp is None:
        raise MemoryConfigError(f"zero: stage {zero} shards over data-parallel ranks; give --dp N")
    run = Run(optimizer=optimizer or "adamw", precision=precision or "bf16-mixed",
              recompute=recompute or "none", flash=flash, mask_bytes=mask_bytes,
              weights_dtype=weights_dtype, kv_dtype=kv_dtype, dtype=dtype or "bf16", group_size=group_size,
              last_logits=last_logits, mla=mla)
    return run, Parallel(dp=1 if dp is None else dp, zero=zero or 0)


def _convention(spec: Spec, phase: str, mla: str) -> dict[str, str]:
    """JSON's `mla_convention` of a phase, for a spec with latent attention."""
    conv = mla_convention(spec, phase, mla)
    return {"mla_convention": conv} if conv is not None else {}


@app.command("memory")
def memory_cmd(
    spec: SpecArg,
    phase: PhaseOpt = PhaseName.train,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    optimizer: OptimizerOpt = None,
    precision: PrecisionOpt = None,
    zero: ZeroOpt = None,
    dp: DpOpt = None,
    recompute: RecomputeOpt = None,
    kernel_names: KernelsOpt = None,
    weights_dtype: WeightsOpt = None,
    kv_dtype: KvDtypeOpt = None,
    dtype: ActOpt = None,
    group_size: GroupSizeOpt = 128,
    mask_bytes: MaskOpt = 1,
    last_logits: LastOpt = False,
    mla: MlaDeviceOpt = None,
    hardware: HardwareOpt = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="FILE", help="Also draw what one device holds as a stacked bar into this file "
        "(.svg; .png, .pdf with the `plot` extra), with --hardware's memory as a line.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """What one device holds in a phase: weights, gradients, optimizer states, activations kept
    for backward (training) or live at the peak (inference), KV cache; with --hardware, whether
    it fits and by how much. Latent attention's live peak follows --mla in prefill and decode
    (training runs the naive form)."""
    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            from costmodel.report.files import plot_path

            plot_path(plot)
        s = catalog.load(spec)
        hw = load_hardware(hardware) if hardware else None
        chosen, conv = _assumed(kernel_names, mla, hw)
        run, par = _config(phase.value, optimizer, precision, zero, dp, recompute,
                           kernels.KERNELS[chosen].flash_attention, weights_dtype, kv_dtype, dtype,
                           group_size, mask_bytes, last_logits, conv)
        m = memory(s, phase.value, batch, seq, enc_seq, run, par)
        if plot is not None:  # drawn before the verdict: a run that does not fit is worth seeing
            from costmodel.report.files import save_plot
            from costmodel.report.spec_figures import memory_figure

            typer.echo(f"wrote {save_plot(memory_figure(m, hw).chart, plot)}", err=True)
    from costmodel.report import memory as report_memory

    theirs = None
    if m.phase == "train" and not s.is_encoder_decoder:
        ours = sum(i.bytes for i in m.items
                   if i.category == "activations" and i.key is not None and i.key.layer)
        r = run.recompute if not run.flash else "selective"
        theirs = (ours, int(s.decoder_layers * korthikanti(m.shape["S"], m.batch, s.d_model, s.n_heads,
                                                           recompute=r)))
    def tables() -> list[report.Table]:
        shown = report_memory.memory_tables(m, hw, theirs)
        first, said = shown[0], _kernels_note(chosen, hw, kernel_names is None)
        return [replace(first, notes=(*first.notes, said)), *shown[1:]]

    emit(fmt, tables,
         lambda: m.to_dict(hw.memory_bytes if hw else None)
         | {"kernels": kernels.to_dict(kernels.KERNELS[chosen], kernel_names is None)},
         s, csv=lambda: report_memory.memory_csv(m))
    if hw is not None and not m.fits(hw.memory_bytes):  # printed in full; exit 1: it cannot run
        typer.echo(f"error: {s.name} does not fit on one {hw.name}: {units.decimal_bytes(m.peak)} at the "
                   f"peak on {units.decimal_bytes(hw.memory_bytes)}", err=True)
        raise typer.Exit(1)


@app.command("fit")
def fit_cmd(
    spec: SpecArg,
    hardware: Annotated[str, typer.Option("--hardware",
                                          help="The device to fit on (see `costmodel hardware`).")],
    over: Annotated[str, typer.Option("--over", help="What to grow: batch or seq.")] = "batch",
    phase: Annotated[Optional[list[PhaseName]], typer.Option(
        "--phase", "-p", metavar="PHASE", help="Phases (repeat). Default: all three.")] = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    optimizer: OptimizerOpt = None,
    precision: PrecisionOpt = None,
    zero: ZeroOpt = None,
    dp: DpOpt = None,
    recompute: RecomputeOpt = None,
    kernel_names: KernelsOpt = None,
    weights_dtype: WeightsOpt = None,
    kv_dtype: KvDtypeOpt = None,
    dtype: ActOpt = None,
    group_size: GroupSizeOpt = 128,
    mask_bytes: MaskOpt = 1,
    last_logits: LastOpt = False,
    mla: MlaDeviceOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """The largest batch (or, with --over seq, sequence length) whose peak memory fits on the
    device, per phase; the other held at --batch / --seq. Training options apply to train only;
    --mla to prefill and decode (training runs latent attention naive)."""
    with _user_errors():
        s = catalog.load(spec)
        hw = load_hardware(hardware)
        chosen, conv = _assumed(kernel_names, mla, hw)
        phases = [p.value for p in phase] if phase else [p.value for p in PhaseName]
        results = []
        for ph in phases:
            training = ph == "train"
            run, par = _config(ph, optimizer if training else None, precision if training else None,
                               zero if training else None, dp, recompute if training else None,
                               kernels.KERNELS[chosen].flash_attention,
                               None if training else weights_dtype, None if training else kv_dtype,
                               None if training else dtype, group_size, mask_bytes, last_logits, conv)
            n, m = fit(s, ph, hw.memory_bytes, over, batch, seq, enc_seq, run, par)
            results.append((ph, n, m))
    from costmodel.report import memory as report_memory

    def table() -> list[report.Table]:
        t = report_memory.fit_table(results, over, hw, s.max_seq_len, mla_convention(s, "decode", conv))
        return [replace(t, notes=(*t.notes, _kernels_note(chosen, hw, kernel_names is None)))]

    emit(fmt, table,
         lambda: {"spec": s.name, "hardware": hw.name, "device_bytes": int(hw.memory_bytes), "over": over,
                  "kernels": kernels.to_dict(kernels.KERNELS[chosen], kernel_names is None),
                  "phases": {ph: {f"max_{over}": n,
                                  "memory": m.to_dict(hw.memory_bytes)["memory"] if m else None,
                                  **_convention(s, ph, conv)} for ph, n, m in results}},
         s, csv=lambda: report.records_csv([{"spec": s.name, "phase": ph, f"max_{over}": n,
                                             "peak": m.peak if m else None} for ph, n, m in results]))
