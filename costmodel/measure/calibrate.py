"""Measure the local device's peaks and save them as a hardware profile.

Two micro-benchmarks, each the median of repeated runs after a warm-up:
- dense matmul FLOP/s per dtype: an n x n by n x n product, 2n^3 FLOPs (the convention of
  ``costmodel.cost.linear``);
- memory bandwidth: a copy of a large buffer, which reads and writes it once: 2 x its bytes.
The profile is what the roofline needs (``costmodel.hardware``): `costmodel measure` predicts
time from it, and `--hardware local` finds it wherever a hardware profile is accepted.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import statistics

import torch

from costmodel.hardware import Hardware
from costmodel.measure import MeasureError
from costmodel.measure.run import TORCH_DTYPES, check_device, time_runs

DEFAULT_MATMUL = {"cuda": 8192, "cpu": 1024}  # n of the n x n matmul
DEFAULT_COPY_MIB = {"cuda": 2048, "cpu": 256}  # buffer copied to measure bandwidth


def matmul_flops(device: torch.device, dtype: str, n: int, repeats: int) -> float:
    """Dense FLOP/s of an n x n x n matmul in `dtype`."""
    a = torch.randn(n, n, device=device).to(TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device=device).to(TORCH_DTYPES[dtype])
    times = time_runs(lambda: torch.mm(a, b), device, repeats, warmup=2)
    return 2 * n**3 / statistics.median(times)


def copy_bandwidth(device: torch.device, mib: int, repeats: int) -> float:
    """Bytes/s of a device-to-device copy: each byte read once and written once."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    times = time_runs(lambda: dst.copy_(src), device, repeats, warmup=2)
    return 2 * src.numel() / statistics.median(times)


def device_memory(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def calibrate(
    device: str = "cpu",
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    matmul_size: int | None = None,
    copy_mib: int | None = None,
    repeats: int = 5,
    name: str = "local",
) -> Hardware:
    """A measured profile of `device`: peak matmul FLOP/s per dtype and copy bandwidth."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise MeasureError(f"name: {name!r} is not a profile name (letters, digits, '.', '_', '-')")
    dev = check_device(device)
    if dev.type == "meta":
        raise MeasureError("device: the meta device runs nothing; calibrate cpu or cuda")
    for dtype in dtypes:
        if dtype not in TORCH_DTYPES:
            raise MeasureError(f"dtype: {dtype} cannot be measured; use one of {', '.join(TORCH_DTYPES)}")
    if repeats < 1:
        raise MeasureError(f"repeats: must be at least 1 (got {repeats})")
    n = matmul_size or DEFAULT_MATMUL[dev.type]
    mib = copy_mib or DEFAULT_COPY_MIB[dev.type]
    peaks = {dtype: matmul_flops(dev, dtype, n, repeats) for dtype in dtypes}
    return Hardware(
        name=name,
        description=f"{device_name(dev)}, measured by costmodel calibrate",
        peak_flops=peaks,
        memory_bandwidth=copy_bandwidth(dev, mib, repeats),
        memory_bytes=device_memory(dev),
        source=(f"costmodel calibrate on {dev.type}: {n}x{n} matmul and a {mib} MiB copy, "
                f"median of {repeats} runs; torch {torch.__version__}"),
        measured=True,
        date=datetime.date.today().isoformat(),
    )
