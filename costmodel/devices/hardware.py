"""Hardware profiles: what a device computes, moves and holds.

A profile is a YAML file: peak dense FLOP/s per dtype, memory bandwidth, memory size and the
source of the figures. Bundled profiles live in specs/hardware/; `costmodel calibrate` writes
measured ones to the user folder (``$COSTMODEL_HARDWARE_DIR``, default
``~/.config/costmodel/hardware``), where ``--hardware NAME`` finds them too.

What an analysis means on a device (its roofline, what fits) is ``costmodel.runtime.roofline``'s, a
layer above; this module knows nothing of analyses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from costmodel.devices.efficiency import Efficiency
from costmodel.devices.kernels import KernelTables, load_kernels
from costmodel.devices.profiles import Profiles
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

    def kernel_tables(self) -> KernelTables | None:
        """The measured GEMM, fused-attention and NCCL tables of this GPU (``devices.kernels``)."""
        return None if self.kernels is None else load_kernels(self.kernels)

    def tables_for(self, dtype: str) -> bool:
        """Whether the time model has this profile's efficiency tables for `dtype`."""
        return self.efficiency is not None and dtype in self.efficiency.matmul

    def peak(self, dtype: str) -> float:
        try:
            return self.peak_flops[dtype]
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
    """A profile by file or by name (``h100-sxm``, ``H100_SXM``; not a prefix: see ``Profiles.find``)."""
    hw = PROFILES.load(name_or_path, Hardware)
    hw.kernel_tables()  # a profile naming tables that do not exist is bad input, said at once
    return hw


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
