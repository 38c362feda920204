"""Hardware profiles: what a device computes, moves and holds.

A profile is a YAML file: peak dense FLOP/s per dtype, memory bandwidth, memory size and the
source of the figures. Bundled profiles live in specs/hardware/; `costmodel calibrate` writes
measured ones to the user folder (``$COSTMODEL_HARDWARE_DIR``, default
``~/.config/costmodel/hardware``), where ``--hardware NAME`` finds them too.

What an analysis means on a device (its roofline, what fits) is ``costmodel.runtime.roofline``'s, a
layer above; this module knows nothing of analyses.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from costmodel.devices.efficiency import Efficiency, MatmulTable
from costmodel.devices.kernels import KernelTables, load_kernels
from costmodel.devices.profiles import Profiles
from costmodel.precision import PEAK_OF
from costmodel.spec import FiniteFloat, SpecError

# Finite and within what a device can be: a peak of 1e-300 FLOP/s (or bandwidth of 1e-300 B/s) would
# make every time overflow to inf, one of 1e300 every time 0.
Rate = Annotated[FiniteFloat, Field(ge=1e3, le=1e21)]  # FLOP/s or bytes/s: a kFLOP/s .. a ZFLOP/s
Capacity = Annotated[FiniteFloat, Field(ge=1e3, le=1e18)]  # bytes: a kB .. an EB


class Hardware(BaseModel):
    """One device: what it can compute and move per second, and what it holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str | None = None
    peak_flops: dict[str, Rate]  # dtype -> dense FLOP/s (no sparsity)
    memory_bandwidth: Rate  # bytes/s
    memory_bytes: Capacity  # device memory, bytes
    source: str | dict[str, str]
    measured: StrictBool = False  # written by `costmodel calibrate`
    date: str | None = None
    efficiency: Efficiency | None = None  # per-operator tables for costmodel.runtime.timing
    kernels: str | None = None  # measured per-shape kernel tables: the folder specs/kernels/<kernels>/
    # The serving framework whose own MoE and MLA tables the folder's defaults give way to
    # (specs/kernels/<kernels>/moe.<framework>.json; ``devices.kernels``): set by a serving engine
    # (``deploy --engine trtllm``, ``with_framework``), not by a profile's file; never dumped.
    kernel_framework: str | None = Field(default=None, exclude=True)
    # (EP, TP) a serving engine's routed experts run at on this GPU: the MoE tables' rows measured
    # at that layout are read where they exist (``devices.kernels.KernelTables.moe_table``); set
    # by a deployment's shard (``with_experts``), never dumped.
    experts_layout: tuple[int, int] = Field(default=(1, 1), exclude=True)

    def kernel_tables(self) -> KernelTables | None:
        """The measured GEMM, fused-attention, NCCL, MoE and MLA tables of this GPU
        (``devices.kernels``), the MoE and MLA ones `kernel_framework`'s where it has them, the MoE
        rows at ``experts_layout`` where measured."""
        if self.kernels is None:
            return None
        return load_kernels(self.kernels, self.kernel_framework, self.experts_layout)

    def with_framework(self, framework: str | None) -> Hardware:
        """This profile reading `framework`'s own MoE and MLA tables (None: the folder's defaults)."""
        if framework == self.kernel_framework:
            return self
        return self.model_copy(update={"kernel_framework": framework})

    def with_experts(self, ep: int, tp: int) -> Hardware:
        """This profile reading the MoE rows measured at EP `ep` and TP `tp` where they exist."""
        if (ep, tp) == self.experts_layout:
            return self
        return self.model_copy(update={"experts_layout": (ep, tp)})

    def tables_for(self, dtype: str) -> bool:
        """Whether the time model has this profile's efficiency tables for `dtype`."""
        return self.efficiency is not None and dtype in self.efficiency.matmul

    def has_peak(self, dtype: str) -> bool:
        """Whether the profile states the peak `dtype`'s GEMMs run at (``precision.PEAK_OF``)."""
        return PEAK_OF.get(dtype, dtype) in self.peak_flops

    def peak(self, dtype: str) -> float:
        """Dense FLOP/s at `dtype` (fp8-block at fp8's: ``precision.PEAK_OF``)."""
        try:
            return self.peak_flops[PEAK_OF.get(dtype, dtype)]
        except KeyError:
            raise SpecError(
                f"hardware {self.name}: no peak FLOP/s for {dtype} "
                f"(has {', '.join(self.peak_flops)})"
            ) from None

    def ridge(self, dtype: str) -> float:
        """FLOPs per byte above which a pass is compute-bound."""
        return self.peak(dtype) / self.memory_bandwidth


# --- finding profiles -----------------------------------------------------------------------


PROFILES = Profiles("hardware", "hardware", "COSTMODEL_HARDWARE_DIR")
bundled_dir, user_dir, profile_paths, find_profile = (PROFILES.bundled_dir, PROFILES.user_dir, PROFILES.paths,
                                                      PROFILES.find)
writable_dir = PROFILES.writable_dir


def load_hardware(name_or_path: str) -> Hardware:
    """A profile by file or by name (``h100-sxm``, ``H100_SXM``; not a prefix: see ``Profiles.find``).

    Kept per file as it stands on disk (path, modification time, size; the last 32): merging a
    GPU's measured GEMM tables and their time envelopes takes about 70 ms, and ``plan``, ``deploy``
    and a sweep over GPUs ask for the same profile many times. A ``Hardware`` is frozen, so
    callers share it; a file rewritten (``costmodel calibrate``) is read anew."""
    path = PROFILES.locate(name_or_path)
    try:
        stat = path.stat()
    except OSError:
        return _load_hardware(path)  # said by the loader, in one line
    return _load_hardware_kept(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=32)
def _load_hardware_kept(path: str, mtime_ns: int, size: int) -> Hardware:
    return _load_hardware(Path(path))


def _load_hardware(path: Path) -> Hardware:
    hw = PROFILES.load(str(path), Hardware)
    hw.kernel_tables()  # a profile naming tables that do not exist is bad input, said at once
    return with_kernels(hw)


def read_profile(name_or_path: str) -> Hardware:
    """A profile as its file says it (the kernel tables it names not merged in: what
    `costmodel hardware` lists and its JSON carries, a few hundred bytes, not 35,816 shapes)."""
    return PROFILES.load(name_or_path, Hardware)


def with_kernels(hw: Hardware) -> Hardware:
    """`hw` with its measured GEMM tables as its matmul efficiencies: 2MNK / (peak x measured
    time) at every grid point (fp16 takes bf16's: the same tensor cores at the same datasheet
    peak), and its floor the least time a measured GEMM took (a launch and the smallest kernel).
    A profile without tables is returned as it is."""
    tables = hw.kernel_tables()
    if tables is None or hw.efficiency is None or not tables.gemms:
        return hw
    matmul = dict(hw.efficiency.matmul)
    floors = []
    for dtype, grid in tables.gemms.items():
        if not hw.has_peak(dtype):
            continue
        M, N, K = (list(map(int, a)) for a in grid.axes)
        peak, t = hw.peak(dtype), grid.times
        # Above 1 a measurement would beat the datasheet's peak: held at the peak, so no time
        # falls below FLOPs / peak (tests/test_kernels.py: no bundled table reaches 0.99).
        rows = iter([t[r : r + len(K)] for r in range(0, len(t), len(K))])  # row-major: (i, j) in order
        eff = [[[min(1.0, 2 * m * n * k / (peak * x)) for k, x in zip(K, next(rows), strict=True)] for n in N]
               for m in M]
        # model_construct: the folder was validated when read, and 35,816 points validate slowly.
        matmul[dtype] = MatmulTable.model_construct(M=M, N=N, K=K, efficiency=eff)
        floors.append(min(t))
    if "fp16" in hw.peak_flops and tables.gemm_dtype("fp16") == "bf16" and "bf16" in matmul:
        matmul["fp16"] = matmul["bf16"]  # KernelTables.gemm_dtype's rule
    sources = "; ".join(f"{d}: {tables.source(f'gemm/{d}')}" for d in tables.gemms)
    eff_ = hw.efficiency.model_copy(update={
        "matmul": matmul, "floor_s": min(floors) if floors else hw.efficiency.floor_s,
        "source": f"matmul: measured per shape, specs/kernels/{tables.name}/gemm.json ({sources}); "
                  f"{hw.efficiency.source}"})
    return hw.model_copy(update={"efficiency": eff_})


def save_hardware(hw: Hardware, path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(hw.model_dump(exclude_none=True), sort_keys=False))
    except OSError as e:
        raise SpecError(f"{str(path)[:120]}: cannot write the profile: {e.strerror or e}") from None
    return path


def hardware_dict(hw: Hardware, dtype: str) -> dict[str, Any]:
    return {
        "name": hw.name,
        "dtype": dtype,
        "peak_flops": hw.peak(dtype),
        "memory_bandwidth": hw.memory_bandwidth,
        "memory_bytes": hw.memory_bytes,
        "ridge": hw.ridge(dtype),
        "measured": hw.measured,
    }
