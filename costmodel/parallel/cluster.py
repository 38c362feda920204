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

from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from costmodel.devices.hardware import Hardware, load_hardware
from costmodel.devices.profiles import Profiles
from costmodel.spec import FiniteFloat

Positive = Annotated[FiniteFloat, Field(gt=0)]
NonNegative = Annotated[FiniteFloat, Field(ge=0)]


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


PROFILES = Profiles("cluster", "clusters", "COSTMODEL_CLUSTER_DIR")
cluster_paths = PROFILES.paths


def load_cluster(name_or_path: str) -> Cluster:
    """A cluster profile by file or by name; its device profile is loaded here too."""
    cluster = PROFILES.load(name_or_path, Cluster)
    cluster.hardware  # noqa: B018 - an unknown device is an error here, not in the middle of a plan
    return cluster
