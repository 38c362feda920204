"""Hardware profiles and the roofline (Williams, Waterman & Patterson 2009, "Roofline").

A profile is a YAML file: peak dense FLOP/s per dtype, memory bandwidth, memory size and the
source of the figures. Bundled profiles live in specs/hardware/; `costmodel calibrate` writes
measured ones to the user folder (``$COSTMODEL_HARDWARE_DIR``, default
``~/.config/costmodel/hardware``), where ``--hardware NAME`` finds them too.

Roofline: a pass of F FLOPs moving M bytes takes at least max(F / peak, M / bandwidth). It is
compute-bound when its intensity F / M exceeds the ridge point peak / bandwidth.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from costmodel.efficiency import Efficiency
from costmodel.spec import SpecError

Positive = Annotated[float, Field(gt=0)]


class Hardware(BaseModel):
    """One device: what it can compute and move per second, and what it holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str | None = None
    peak_flops: dict[str, Positive]  # dtype -> dense FLOP/s (no sparsity)
    memory_bandwidth: Positive  # bytes/s
    memory_bytes: Positive  # device memory, bytes
    source: str | dict[str, str]
    measured: bool = False  # written by `costmodel calibrate`
    date: str | None = None
    efficiency: Efficiency | None = None  # per-operator tables for costmodel.timing

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


@dataclass(frozen=True)
class Roofline:
    compute_s: float  # FLOPs / peak
    memory_s: float  # bytes / bandwidth
    intensity: float  # FLOPs / bytes
    ridge: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def roofline(flops: float, nbytes: float, hw: Hardware, dtype: str) -> Roofline:
    return Roofline(flops / hw.peak(dtype), nbytes / hw.memory_bandwidth, flops / nbytes, hw.ridge(dtype))


# --- finding profiles -----------------------------------------------------------------------


def bundled_dir() -> Path:
    from costmodel.catalog import specs_dir

    return specs_dir() / "hardware"


def user_dir() -> Path:
    return Path(os.environ.get("COSTMODEL_HARDWARE_DIR", Path.home() / ".config" / "costmodel" / "hardware"))


def profile_paths() -> dict[str, Path]:
    """name -> file, bundled first; a user profile of the same name takes precedence."""
    found: dict[str, Path] = {}
    for folder in (bundled_dir(), user_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                found[path.stem] = path
    return found


def load_hardware(name_or_path: str) -> Hardware:
    path = Path(name_or_path)
    if not path.exists():
        paths = profile_paths()
        if name_or_path not in paths:
            known = ", ".join(paths) or "none"
            raise SpecError(f"hardware {name_or_path}: no such file or profile (known: {known})")
        path = paths[name_or_path]
    try:
        data = yaml.safe_load(path.read_text())
        return Hardware.model_validate(data)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: malformed YAML: {getattr(e, 'problem', e)}") from None
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "profile"
        raise SpecError(f"{path}: {field}: {first['msg']}") from None


def save_hardware(hw: Hardware, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(hw.model_dump(exclude_none=True), sort_keys=False))
    return path
