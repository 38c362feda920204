"""Cluster profiles: GPUs per node (one NVLink domain), the device, and the two links.

A profile is a YAML file beside the hardware ones: bundled in specs/clusters/, user profiles in
``$COSTMODEL_CLUSTER_DIR`` (default ``~/.config/costmodel/clusters``), found by name or path.
Each link gives its line rate per GPU per direction, the share of it NCCL reaches as bus
bandwidth (nccl-tests' busbw, the figure its ring formulas are written against), and a latency
per ring step for each of NCCL's protocols: Simple (full bandwidth, large messages) and LL (a flag
with every 8 bytes: lower latency, a quarter of the bandwidth for all-reduce and a third for the
rest, as NCCL's tuner assumes); every number carries its source.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from costmodel.hardware import Hardware, load_hardware
from costmodel.spec import SpecError

Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class Link(BaseModel):
    """One kind of wire, as one GPU sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    bandwidth: Positive  # bytes/s per GPU per direction, line rate
    efficiency: Annotated[float, Field(gt=0, le=1)]  # NCCL bus bandwidth / line rate (ring)
    # NVLink SHARP (NVLS) reduces inside the switch: its all-reduce bus bandwidth may pass the line rate.
    all_reduce_efficiency: Annotated[float, Field(gt=0, le=2)] | None = None
    latency: NonNegative  # seconds per ring step, Simple protocol (large messages)
    ll_latency: NonNegative | None = None  # seconds per ring step, LL protocol (small messages)
    source: str

    @property
    def bus_bandwidth(self) -> float:
        """Bytes/s a ring collective moves per GPU (nccl-tests' busbw)."""
        return self.bandwidth * self.efficiency

    @property
    def all_reduce_bus_bandwidth(self) -> float:
        return self.bandwidth * (self.all_reduce_efficiency or self.efficiency)


class Cluster(BaseModel):
    """Nodes of `gpus_per_node` devices joined by `intra_node`, nodes joined by `inter_node`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str | None = None
    device: str  # a hardware profile (specs/hardware/)
    gpus_per_node: Annotated[StrictInt, Field(gt=0)]  # the NVLink domain
    intra_node: Link
    inter_node: Link
    collective_latency: NonNegative = 0.0  # seconds per ring collective, Simple protocol
    ll_collective_latency: NonNegative | None = None  # the same, LL protocol
    source: str | dict[str, str]

    @cached_property
    def hardware(self) -> Hardware:
        return load_hardware(self.device)


def bundled_dir() -> Path:
    from costmodel.catalog import specs_dir

    return specs_dir() / "clusters"


def user_dir() -> Path:
    return Path(os.environ.get("COSTMODEL_CLUSTER_DIR", Path.home() / ".config" / "costmodel" / "clusters"))


def cluster_paths() -> dict[str, Path]:
    """name -> file, bundled first; a user profile of the same name takes precedence."""
    found: dict[str, Path] = {}
    for folder in (bundled_dir(), user_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                found[path.stem] = path
    return found


def load_cluster(name_or_path: str) -> Cluster:
    path = Path(name_or_path)
    if not path.exists():
        paths = cluster_paths()
        if name_or_path not in paths:
            raise SpecError(f"cluster {name_or_path}: no such file or profile (known: {', '.join(paths) or 'none'})")
        path = paths[name_or_path]
    try:
        cluster = Cluster.model_validate(yaml.safe_load(path.read_text()))
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: malformed YAML: {getattr(e, 'problem', e)}") from None
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "profile"
        raise SpecError(f"{path}: {field}: {first['msg']}") from None
    cluster.hardware  # an unknown device is an error here, not in the middle of a plan
    return cluster
