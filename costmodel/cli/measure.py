"""`costmodel measure` and `costmodel calibrate`: run a spec's reference model, and profile the
local device. Thin: parse, call ``costmodel.measure``, render. torch is imported only when one
of these commands runs."""

from __future__ import annotations

from enum import Enum
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
    MlaOpt,
    PhaseName,
    SeqOpt,
    SpecArg,
    _user_errors,
    app,
    emit,
)
from costmodel.components.mla import Convention
from costmodel.devices import hardware
from costmodel.report import tables as report


class Device(str, Enum):
    meta = "meta"
    cpu = "cpu"
    cuda = "cuda"


class AllocatorName(str, Enum):
    cache = "cache"
    system = "system"


PhaseOpt = Annotated[Optional[PhaseName], typer.Option(
    "--phase", "-p", help="One phase. Default: all three.")]
DeviceOpt = Annotated[Device, typer.Option(
    "--device", "-d", help="meta: exact counts at any size, no memory, no time. cpu, cuda: counts and time.")]
LayersOpt = Annotated[Optional[int], typer.Option(
    "--layers", "-l", min=1,
    help="Keep the first N layers of each stack (time a big model's block on a small machine).")]
HardwareOpt = Annotated[Optional[str], typer.Option(
    "--hardware",
    help="Profile whose roofline predicts the time. Default: `local`, from `costmodel calibrate`.")]
RepeatsOpt = Annotated[Optional[int], typer.Option(
    "--repeats", min=1, help="Timed runs (median). Default: 10 on cuda, 3 on cpu.")]
ComponentsOpt = Annotated[bool, typer.Option("--components", help="Also compare component by component.")]
CheckOpt = Annotated[bool, typer.Option(
    "--check", help="Exit 1 when a parameter, matmul FLOP or KV-cache count differs from its formula.")]
CalDeviceOpt = Annotated[Device, typer.Option("--device", "-d", help="The device to profile.")]
CalDtypesOpt = Annotated[Optional[list[Dtype]], typer.Option(
    "--dtype", metavar="DTYPE",
    help="A dtype to measure peak FLOP/s for (repeatable): bf16, fp16, fp32, fp8. Default: fp32, bf16 (+ "
         "fp16 on cuda).")]
MatmulOpt = Annotated[Optional[int], typer.Option(
    "--matmul-size", min=16, help="n of the n x n matmul. Default: 8192 (cuda), 1024 (cpu).")]
CopyOpt = Annotated[Optional[int], typer.Option(
    "--copy-mib", min=1, help="MiB copied to measure bandwidth. Default: 2048 (cuda), 256 (cpu).")]
CalRepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, help="Timed runs per benchmark (median).")]
TablesOpt = Annotated[bool, typer.Option(
    "--tables/--no-tables",
    help="Also measure the time model's efficiency tables (matmul grid, memory op sizes, op floor): "
         "about 50 s on a 2-core CPU, under a minute on a GPU.")]
MeasureAllocatorOpt = Annotated[Optional[AllocatorName], typer.Option(
    "--allocator",
    help="CPU timing: keep freed memory in the process (cache, as the CUDA caching allocator does) or "
         "return it to the OS as glibc does (system: fresh blocks are page-faulted on every step). "
         "Default: the setting the hardware profile was calibrated with, else cache.")]
CalAllocatorOpt = Annotated[AllocatorName, typer.Option(
    "--allocator",
    help="CPU calibration: keep freed memory in the process (cache) or leave glibc's default (system: "
         "the first-touch table then measures the page faults of fresh blocks); recorded in the profile.")]
NameOpt = Annotated[str, typer.Option(
    "--name", help="Profile name, saved as NAME.yaml in the user profile folder.")]


@app.command("measure")
def measure_cmd(
    spec: SpecArg,
    phase: PhaseOpt = None,
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    device: DeviceOpt = Device.meta,
    layers: LayersOpt = None,
    hw: HardwareOpt = None,
    repeats: RepeatsOpt = None,
    by_component: ComponentsOpt = False,
    check: CheckOpt = False,
    fmt: FormatOpt = Format.table,
    mla: MlaOpt = Convention.naive,
    allocator: MeasureAllocatorOpt = None,
) -> None:
    """Build SPEC as a PyTorch model, run a phase, and set each count beside its formula."""
    with _user_errors():
        from costmodel.measure import require_torch

        require_torch()
        from costmodel.measure.run import measure

        s = catalog.load(spec)
        profile = None
        if device is not Device.meta:
            name = hw or ("local" if "local" in hardware.profile_paths() else None)
            profile = hardware.load_hardware(name) if name else None
        phases = [phase.value] if phase else [p.value for p in PhaseName]
        results = [measure(s, p, batch=batch, seq=seq, enc_seq=enc_seq, dtype=dtype.value,
                           device=device.value, layers=layers, hardware=profile, repeats=repeats,
                           count_bytes=True, mla=mla.value, allocator=allocator.value if allocator else None)
                   for p in phases]
    def tables() -> list[report.Table]:
        from costmodel.report.measure import components_table, measurement_table

        out = []
        for m in results:
            out.append(measurement_table(m))
            if by_component:
                out.append(components_table(m))
        return out

    emit(fmt, tables, lambda: {"spec": s.name, "ok": all(m.ok for m in results),
                               "phases": {m.analysis.phase: m.to_dict() for m in results}},
         f"{s.name}: {report.describe(s)}")
    if check and not all(m.ok for m in results):
        bad = [f"{m.analysis.phase} {c.quantity}" for m in results for c in m.comparisons if not c.agrees]
        typer.echo(f"check failed: {', '.join(bad)} differ from the formulas", err=True)
        raise typer.Exit(1)


@app.command("calibrate")
def calibrate_cmd(
    device: CalDeviceOpt = Device.cpu,
    dtypes: CalDtypesOpt = None,
    matmul_size: MatmulOpt = None,
    copy_mib: CopyOpt = None,
    repeats: CalRepeatsOpt = 5,
    name: NameOpt = "local",
    tables: TablesOpt = True,
    allocator: CalAllocatorOpt = AllocatorName.cache,
    fmt: FormatOpt = Format.table,
) -> None:
    """Measure the local device's peak matmul FLOP/s, copy bandwidth and per-operator efficiency
    tables; save a hardware profile."""
    with _user_errors():
        from costmodel.measure import require_torch

        require_torch()
        from costmodel.measure.calibrate import calibrate

        folder = hardware.writable_dir()
        chosen = tuple(d.value for d in dtypes) if dtypes else (
            ("fp32", "bf16", "fp16") if device is Device.cuda else ("fp32", "bf16"))
        profile = calibrate(device.value, chosen, matmul_size, copy_mib, repeats, name,
                            tables=None if tables else (), allocator=allocator.value)
        path = hardware.save_hardware(profile, folder / f"{name}.yaml")
    from costmodel.report.measure import calibration_table

    emit(fmt, lambda: [calibration_table(profile, str(path))],
         lambda: {"path": str(path), **profile.model_dump(exclude_none=True)}, f"calibrated {device.value}")
