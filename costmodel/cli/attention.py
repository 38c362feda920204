"""`costmodel attention`, `costmodel sweep` and `costmodel hardware`: parse, call the library, render."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from costmodel import catalog
from costmodel.analysis import AnalysisError
from costmodel.cli.app import (
    HARDWARE_HELP,
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    KernelsOpt,
    KvDtypeOpt,
    PhaseName,
    SeqOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    emit,
)
from costmodel.devices.hardware import bundled_dir, load_hardware, profile_paths, read_profile, user_dir
from costmodel.precision import DEFAULT_GROUP, Widths

DEFAULT_HARDWARE = "h100-sxm"


class SweepQuantity(str, Enum):
    intensity = "intensity"
    kv_cache = "kv_cache"
    time = "time"
    roofline = "roofline"


DeviceOpt = Annotated[str, typer.Option("--hardware", help=f"{HARDWARE_HELP} Default: {DEFAULT_HARDWARE}.")]
KvHeadsOpt = Annotated[Optional[str], typer.Option(
    "--kv-heads",
    help="Key/value head counts to compare, e.g. 32,8,1. Default: h (MHA), the spec's own k, 1 (MQA).")]


def _ints(text: str | None, option: str) -> list[int] | None:
    """``32,8,1`` -> [32, 8, 1]; one clear line otherwise."""
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AnalysisError(f"{option}: {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise AnalysisError(f"{option}: give positive integers (got {text!r})")
    return values


@app.command("attention")
def attention_cmd(
    spec: SpecArg,
    batch: BatchOpt = 1,
    seqs: Annotated[Optional[str], typer.Option(
        "--seq", "-s", metavar="SEQ", help="Tokens per sequence: one length or a list, e.g. 4096,32768. "
        "The key/value-head "
        "table is at the first (prompt S in prefill, S cached in decode; default a 2048-token context, or "
        "max_seq_len if shorter), the window table at each (default 1K to 128K, up to max_seq_len for "
        "learned positions).")] = None,
    enc_seq: EncSeqOpt = None,
    hardware: DeviceOpt = DEFAULT_HARDWARE,
    kv_heads: KvHeadsOpt = None,
    window: Annotated[Optional[int], typer.Option(
        "--window", min=1, help="Window w for the window variants. Default: the spec's own.")] = None,
    dtype: DtypeOpt = Dtype.bf16,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    fmt: FormatOpt = Format.table,
) -> None:
    """MHA / GQA / MQA and window variants of a spec's attention, in prefill and decode, on a device:
    KV cache, attention FLOPs, bytes, intensity, bound, roofline time and the largest batch that fits."""
    from costmodel.devices.hardware import hardware_dict
    from costmodel.report import attention as ra
    from costmodel.studies.attention_variants import compare_kv_heads, compare_windows

    with _user_errors():
        s = catalog.load(spec)
        hw = load_hardware(hardware)
        hw.peak(dtype.value)
        widths = Widths(weights_dtype, kv_dtype, group_size)
        contexts = _ints(seqs, "--seq")
        seq = contexts[0] if contexts else None
        heads = compare_kv_heads(s, hw, batch, seq, dtype.value, _ints(kv_heads, "--kv-heads"), enc_seq,
                                 widths)
        windows = compare_windows(s, hw, batch, contexts, dtype.value, window, widths)
        from costmodel.runtime.memory import fit_warning

        for phase in ("prefill", "decode"):  # the spec's own attention at this shape
            warning = fit_warning(s, phase, batch, seq, enc_seq, dtype.value, hw.name, hw.memory_bytes,
                                  precision=widths)
            if warning:
                typer.echo(warning, err=True)
    held = widths.label(dtype.value)
    emit(fmt, lambda: [ra.heads_table(heads, hw, dtype.value, held), ra.windows_table(windows, hw, batch,
                                                                                      held)],
         lambda: {"spec": s.name, "hardware": hardware_dict(hw, dtype.value), "batch": batch,
                  "dtype": dtype.value,
                  "weights_dtype": weights_dtype or dtype.value, "kv_dtype": kv_dtype or dtype.value,
                  "kv_heads": [r.to_dict() for r in heads], "windows": [r.to_dict() for r in windows]},
         s, csv=lambda: ra.records_csv([{"table": "kv_heads", **r.to_dict()} for r in heads]
                                      + [{"table": "windows", **r.to_dict()} for r in windows]))


@app.command("sweep")
def sweep_cmd(
    spec: SpecArg,
    over: Annotated[Optional[list[str]], typer.Option(
        "--over", help="An axis to sweep: seq=START:STOP (powers of two from START, and STOP), "
        "seq=START:STOP:POINTS (geometric), or batch=1,8,64. Repeat for a grid. Default: seq from 512 "
        "to the spec's max_seq_len.")] = None,
    quantity: Annotated[SweepQuantity, typer.Option(
        "--quantity", "-q", metavar="QUANTITY",
        help="intensity (FLOP/B, fused bytes), kv_cache (bytes), time (seconds: the calibrated model on "
             "the device's measured tables, the roofline where it has none) or roofline (seconds: "
             "max(FLOPs / peak, fused bytes / bandwidth), a lower bound).")
    ] = SweepQuantity.intensity,
    phases: Annotated[Optional[list[PhaseName]], typer.Option(
        "--phase", "-p", metavar="PHASE",
        help="Phases to evaluate (repeat): train, prefill, decode. Default: prefill and decode; decode alone "
             "for kv_cache.")] = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    hardware: DeviceOpt = DEFAULT_HARDWARE,
    kv_heads: KvHeadsOpt = None,
    component: Annotated[str, typer.Option(
        "--component", "-c",
        help="A component path or prefix (layers/attention). Default: the whole model.")] = "",
    dtype: DtypeOpt = Dtype.bf16,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    kernel_names: KernelsOpt = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="FILE", help="Also draw the sweep into this file (.svg; .png, .pdf with the "
        "`plot` extra): a roofline with a lane per variant and phase for intensity, lines over the first "
        "swept axis otherwise.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """A quantity over many (seq, batch) points for each MHA / GQA / MQA variant and phase,
    through formulas compiled once (numpy), as a table and optionally a chart."""
    from costmodel.report import attention as ra
    from costmodel.runtime import kernels
    from costmodel.studies.sweep import default_axis, parse_axis, sweep

    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            from costmodel.report.files import plot_path

            plot_path(plot)
        if kernel_names is not None and quantity is not SweepQuantity.time:
            raise AnalysisError("--kernels: the kernels a time assumes; give --quantity time")
        s = catalog.load(spec)
        hw = load_hardware(hardware)
        axes = [parse_axis(text) for text in over] if over else [default_axis(s)]
        chosen = [p.value for p in phases] if phases else (
            ["decode"] if quantity is SweepQuantity.kv_cache else ["prefill", "decode"])
        sw = sweep(s, quantity.value, axes, hw, batch=batch, seq=seq, phases=chosen, dtype=dtype.value,
                   kv_heads=_ints(kv_heads, "--kv-heads"), component=component,
                   widths=Widths(weights_dtype, kv_dtype, group_size),
                   kernels=kernels.KERNELS[kernel_names.value] if kernel_names else None)
        if plot is not None:
            from costmodel.report.files import save_plot
            from costmodel.report.sweep_figures import sweep_section

            written = save_plot(sweep_section(sw).chart, plot)
    emit(fmt, lambda: [ra.sweep_table(sw)], sw.to_dict, csv=lambda: ra.sweep_csv(sw))
    if plot is not None:
        typer.echo(f"wrote {written}", err=True)


@app.command("hardware")
def hardware_cmd(dtype: DtypeOpt = Dtype.bf16, fmt: FormatOpt = Format.table) -> None:
    """The device profiles --hardware accepts: bundled datasheet figures, and measured ones in the
    user folder ($COSTMODEL_HARDWARE_DIR, default ~/.config/costmodel/hardware) such as `local`."""
    from costmodel.report import attention as ra

    with _user_errors():
        found = [(read_profile(str(path)), "bundled" if path.parent == bundled_dir() else "user", path)
                 for path in profile_paths().values()]
    emit(fmt, lambda: [ra.hardware_table([(hw, where) for hw, where, _ in found], dtype.value, user_dir())],
         lambda: [{**hw.model_dump(), "from": where, "path": str(path),
                   "ridge": {dt: hw.ridge(dt) for dt in hw.peak_flops}} for hw, where, path in found],
         csv=lambda: ra.records_csv([{**hw.model_dump(exclude={"source"}), "from": where, "path": str(path)}
                                     for hw, where, path in found]))
