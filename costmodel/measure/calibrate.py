"""Measure the local device's peaks and efficiency tables and save them as a hardware profile.

The peaks, each the median of repeated runs after a warm-up:
- dense matmul FLOP/s per dtype: an n x n by n x n product, 2n^3 FLOPs (the convention of
  ``costmodel.cost.linear``);
- memory bandwidth: a copy of a large buffer, which reads and writes it once: 2 x its bytes.
The efficiency tables of the time model (``costmodel.devices.efficiency``, ``costmodel.runtime.timing``), each
point the median of ``torch.utils.benchmark.Timer.blocked_autorange``:
- matmul: a grid of (M, N, K), M = 1 .. 1024 (4096 on a GPU) including the skinny decode
  shapes, run as a batched matmul of enough products that launch overhead is amortised, each
  call on weights the cache does not hold (a model's forward reads each weight once);
  efficiency = achieved FLOP/s / peak;
- memory: an out-of-place add (read 2, write 1) over sizes 4 KiB .. 256 MiB (1 GiB on a GPU);
  efficiency = achieved bytes/s / copy bandwidth;
- where a point of a table beats the peak (a small add in cache passes a large copy's
  bandwidth), the profile's peak becomes that best rate and the table fractions of it: an
  efficiency is at most 1 (``costmodel.devices.efficiency``), and the times are the same;
- floor: the time of an add of one element (launch and dispatch overhead);
- first touch: over sizes 1 .. 256 MiB, a fill of a freshly allocated buffer against a fill of a
  reused one; the difference per byte is what each fresh output of that size costs (page faults
  on a CPU left to glibc, which maps large blocks fresh on every allocation); measured under
  ``allocator="system"`` only: under the default ``cache`` (and on a GPU) freed blocks are reused
  and the profile has no first-touch table (``costmodel.measure.malloc``).
The profile serves the roofline and the time model: `costmodel measure` predicts time from it,
and `--hardware local` finds it wherever a hardware profile is accepted.
"""

from __future__ import annotations

import datetime
import itertools
import os
import platform
import re
import statistics
from collections.abc import Callable
from typing import TypedDict

import torch

from costmodel.devices.efficiency import Efficiency, FirstTouchTable, FlopsTable, MatmulTable, MemoryTable
from costmodel.devices.hardware import Hardware
from costmodel.measure import MeasureError
from costmodel.measure.malloc import allocator as kept
from costmodel.measure.malloc import check as check_allocator
from costmodel.measure.run import TORCH_DTYPES, check_device, time_runs

DEFAULT_MATMUL = {"cuda": 8192, "cpu": 1024}  # n of the n x n matmul
DEFAULT_COPY_MIB = {"cuda": 2048, "cpu": 256}  # buffer copied to measure bandwidth
MAX_MATMUL = 32_768  # three fp32 operands of 4 GiB each
MAX_COPY_MIB = 16_384  # two buffers of 16 GiB
MAX_REPEATS = 1000  # a median of a thousand runs is as good as it gets


class Grid(TypedDict, total=False):
    """Where the efficiency tables are measured: M, N, K of the matmuls, bytes of the memory
    op, bytes of the first-touch fills (optional), and the seconds each point runs for."""

    M: list[int]
    N: list[int]
    K: list[int]
    bytes: list[int]
    fresh: list[int]
    run_s: float


#: The grids of the efficiency tables (M, N, K of the matmuls; bytes of the memory op).
GRID: dict[str, Grid] = {
    "cpu": {"M": [1, 2, 4, 8, 16, 32, 64, 256, 1024], "N": [64, 256, 1024, 4096, 16384],
            "K": [16, 64, 256, 1024, 4096],
            "bytes": [2**i for i in range(12, 29, 2)], "fresh": [2**i for i in range(20, 29)], "run_s": 0.1},
    "cuda": {"M": [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096], "N": [64, 256, 1024, 4096, 16384],
             "K": [16, 64, 256, 1024, 4096, 16384], "bytes": [2**i for i in range(12, 31, 2)],
             "fresh": [2**i for i in range(20, 31, 2)], "run_s": 0.02},
}
#: Weights the matmul grid cycles through, well past the last-level cache (16 MiB of L3 on this
#: CPU; 50 MiB of L2 on an H100), so that each call reads its weights from memory.
POOL_BYTES = {"cpu": 2**27, "cuda": 2**30}
#: A grid point runs enough products that one batched matmul has about this many M*N*K.
AMORTISE_MNK = {"cpu": 2**22, "cuda": 2**30}


def timed(run: Callable[..., object], device: torch.device, min_run_s: float) -> float:
    """Median seconds per call, from ``Timer.blocked_autorange`` (CUDA-synchronised; all the
    process's CPU threads, not the Timer's default of one)."""
    return statistics.median(block_times(run, device, min_run_s))


def block_times(run: Callable[..., object], device: torch.device, min_run_s: float) -> list[float]:
    """Seconds per call of each block of ``Timer.blocked_autorange``."""
    from torch.utils.benchmark import Timer

    run()  # warm-up: allocation, kernel selection
    if device.type == "cuda":
        torch.cuda.synchronize()
    timer = Timer(stmt="run()", globals={"run": run}, num_threads=torch.get_num_threads())
    return list(timer.blocked_autorange(min_run_time=min_run_s).times)


def weight_views(pool: torch.Tensor, b: int, N: int, K: int) -> list[torch.Tensor]:
    """Disjoint (b, K, N) weights cut from `pool` (stored (N, K), as nn.Linear stores them: x @ W^T),
    as many as it holds (at most 64, at least one): cycling through them, each call reads weights
    that the last-level cache does not hold, as a model's forward reads each weight once."""
    size = b * N * K
    if size > pool.numel():
        return [torch.randn(b, N, K, device=pool.device).to(pool.dtype).transpose(1, 2)]
    return [pool[i * size:(i + 1) * size].view(b, N, K).transpose(1, 2)
            for i in range(min(64, pool.numel() // size))]


def fractions(rates: list[float], peak: float) -> tuple[list[float], float]:
    """Measured rates as fractions of `peak` (5 decimals, at least 1e-5), and the peak: raised to
    the best rate measured when a shape beat the one the peak was taken on (a small op in cache
    passes the copy bandwidth of a large one), so that no efficiency passes 1 and no time falls
    below the profile's roofline; the times the tables give are the same either way."""
    top = max(peak, *rates)
    return [max(1e-5, round(r / top, 5)) for r in rates], top


def matmul_table(device: torch.device, dtype: str, peak: float, grid: Grid) -> tuple[MatmulTable, float]:
    """Efficiency of (M x K) @ (K x N) over the grid, as a fraction of `peak` (raised to the best
    rate measured, ``fractions``), and that peak; the weights of successive calls are distinct
    (``weight_views``), so a small product is not timed from cache."""
    kind = device.type
    t_dtype = TORCH_DTYPES[dtype]
    points = [(M, N, K) for M in grid["M"] for N in grid["N"] for K in grid["K"]]
    pool = torch.randn(POOL_BYTES[kind] // torch.empty(0, dtype=t_dtype).element_size(),
                       device=device).to(t_dtype)
    # Two passes in opposite orders, the median of both passes' blocks: a burst of load on a
    # shared machine then hits one half of a point's samples, not a whole row of the grid.
    times: dict[tuple[int, int, int], list[float]] = {p: [] for p in points}
    for order in (points, points[::-1]):
        for M, N, K in order:
            b = max(1, min(256, AMORTISE_MNK[kind] // (M * N * K)))
            a = torch.randn(b, M, K, device=device).to(t_dtype)
            weights = itertools.cycle(weight_views(pool, b, N, K))
            per_call = block_times(lambda a=a, w=weights: torch.bmm(a, next(w)), device, grid["run_s"] / 2)
            times[(M, N, K)].extend(t / b for t in per_call)
    del pool
    effs, peak = fractions([2 * M * N * K / statistics.median(times[(M, N, K)]) for M, N, K in points], peak)
    at = dict(zip(points, effs, strict=True))
    table = [[[at[(M, N, K)] for K in grid["K"]] for N in grid["N"]] for M in grid["M"]]
    return MatmulTable(M=grid["M"], N=grid["N"], K=grid["K"], efficiency=table), peak


def memory_table(device: torch.device, bandwidth: float, grid: Grid) -> tuple[MemoryTable, float]:
    """Efficiency of c = a + b (fp32) moving each size of the grid, as a fraction of `bandwidth`
    (raised to the best rate measured, ``fractions``), and that bandwidth."""
    sizes: list[float] = []
    rates: list[float] = []
    for nbytes in grid["bytes"]:
        n = max(1, nbytes // 12)  # 3 tensors of 4-byte elements
        a, b, c = (torch.ones(n, device=device) for _ in range(3))
        seconds = timed(lambda a=a, b=b, c=c: torch.add(a, b, out=c), device, grid["run_s"])
        sizes.append(12 * n)
        rates.append(12 * n / seconds)
    effs, bandwidth = fractions(rates, bandwidth)
    return MemoryTable(bytes=sizes, efficiency=effs), bandwidth


def first_touch_table(device: torch.device, grid: Grid) -> FirstTouchTable | None:
    """Extra seconds per byte of writing a freshly allocated buffer, over the grid's sizes:
    ``torch.empty(n).fill_`` against ``buf.fill_`` of a kept buffer (negative differences, noise
    below the allocator's mmap threshold, are 0)."""
    sizes = grid.get("fresh") or []
    if not sizes:
        return None
    # One untimed fill at the largest size first: the heap's own growth (the first time a
    # process holds that much) is not what an allocation costs once it runs in a loop; under
    # the cache allocator, without it the first size measured here read 1e-9 s/B, then ~0.
    torch.empty(max(sizes), dtype=torch.uint8, device=device).fill_(1)
    extra = []
    for n in sizes:
        kept = torch.empty(n, dtype=torch.uint8, device=device)
        reused = timed(lambda kept=kept: kept.fill_(1), device, grid["run_s"])
        del kept
        fresh = timed(lambda n=n: torch.empty(n, dtype=torch.uint8, device=device).fill_(1), device,
                      grid["run_s"])
        extra.append(float(f"{max(0.0, (fresh - reused) / n):.4g}"))
    return FirstTouchTable(bytes=[float(n) for n in sizes], s_per_byte=extra)


def op_floor(device: torch.device) -> float:
    """The time of the smallest op: dispatch (and on a GPU, launch) overhead."""
    a, b, c = (torch.ones(1, device=device) for _ in range(3))
    return timed(lambda: torch.add(a, b, out=c), device, 0.05)


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
    tables: tuple[str, ...] | None = None,
    grid: Grid | None = None,
    allocator: str = "cache",
) -> Hardware:
    """A measured profile of `device`: peak matmul FLOP/s per dtype, copy bandwidth, and the
    efficiency tables of the time model for the dtypes in `tables` (default: every dtype on a
    GPU, fp32 alone on the CPU, where bf16 has no native matmul on most parts); `tables=()`
    measures the peaks only. `allocator` is how freed CPU memory is treated while measuring
    (``costmodel.measure.malloc``: kept in the process, or glibc's default); the profile
    records it, and ``costmodel measure`` times under the same setting."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise MeasureError(f"name: {shown!r} is not a profile name (at most 64 letters, digits, '.', '_', "
                           "'-')")
    for option, value, most in (("matmul_size", matmul_size, MAX_MATMUL),
                                ("copy_mib", copy_mib, MAX_COPY_MIB), ("repeats", repeats, MAX_REPEATS)):
        if value is not None and not 1 <= value <= most:
            raise MeasureError(f"{option}: must be 1 to {most:,} (got {value})")
    dev = check_device(device)
    if dev.type == "meta":
        raise MeasureError("device: the meta device runs nothing; calibrate cpu or cuda")
    for dtype in dtypes:
        if dtype not in TORCH_DTYPES:
            raise MeasureError(f"dtype: {dtype} cannot be measured; use one of {', '.join(TORCH_DTYPES)}")
    check_allocator(allocator)
    n = matmul_size or DEFAULT_MATMUL[dev.type]
    mib = copy_mib or DEFAULT_COPY_MIB[dev.type]
    held = device_memory(dev)
    for option, need in (("matmul_size", 3 * n * n * 4), ("copy_mib", 2 * mib * 2**20)):
        if need > held / 2:
            raise MeasureError(f"{option}: its buffers take {need / 2**30:.1f} GiB, more than half the "
                               f"{held / 2**30:.1f} GiB this {dev.type} device holds")
    if tables is None:
        tables = dtypes if dev.type == "cuda" else tuple(d for d in dtypes if d == "fp32")[:1]
    for dtype in tables:
        if dtype not in dtypes:
            raise MeasureError(f"tables: {dtype} is not among the calibrated dtypes ({', '.join(dtypes)})")
    efficiency = None
    with kept(allocator, dev.type) as in_effect:
        peaks = {dtype: matmul_flops(dev, dtype, n, repeats) for dtype in dtypes}
        bandwidth = copy_bandwidth(dev, mib, repeats)
        if tables:
            grid = grid or GRID[dev.type]
            matmul: dict[str, MatmulTable | FlopsTable] = {}
            for dtype in tables:
                matmul[dtype], peaks[dtype] = matmul_table(dev, dtype, peaks[dtype], grid)
            memory, bandwidth = memory_table(dev, bandwidth, grid)
            efficiency = Efficiency(
                source=(f"costmodel calibrate on {dev.type}: batched matmuls over M {grid['M']}, N "
                        f"{grid['N']}, "
                        f"K {grid['K']}; c = a + b over {len(grid['bytes'])} sizes; fresh against reused "
                        "fills over "
                        f"{len(grid.get('fresh') or [])} sizes; median of "
                        f"torch.utils.benchmark blocked_autorange; allocator {in_effect}; torch "
                        f"{torch.__version__}"),
                floor_s=op_floor(dev),
                matmul=matmul,
                memory=memory,
                # Under cache a freed block is reused: no fresh block after the warm-up, so no
                # such cost (and the fills' difference is noise, once 5.5e-10 s/B at 256 MiB in a
                # CI run, which would have charged every large output).
                first_touch=first_touch_table(dev, grid) if in_effect == "system" else None,
                allocator=in_effect,
            )
    return Hardware(
        name=name,
        description=f"{device_name(dev)}, measured by costmodel calibrate",
        peak_flops=peaks,
        memory_bandwidth=bandwidth,
        memory_bytes=device_memory(dev),
        source=(f"costmodel calibrate on {dev.type}: {n}x{n} matmul and a {mib} MiB copy, "
                f"median of {repeats} runs; torch {torch.__version__}"),
        measured=True,
        date=datetime.date.today().isoformat(),
        efficiency=efficiency,
    )
