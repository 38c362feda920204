"""Cluster profiles: GPUs per node (one NVLink domain), the device, and the two links.

A profile is a YAML file beside the hardware ones: bundled in specs/clusters/, user profiles in
``$COSTMODEL_CLUSTER_DIR`` (default ``~/.config/costmodel/clusters``), found by name or path.
Each link gives its line rate per GPU per direction, the share of it NCCL reaches as bus
bandwidth (nccl-tests' busbw, the figure its ring formulas are written against), and a latency
per ring step for each of NCCL's protocols: Simple (full bandwidth, large messages) and LL (a flag
with every 8 bytes: lower latency, a quarter of the bandwidth for all-reduce and a third for the
rest, as NCCL's tuner assumes); every number carries its source. Inside one node, where the
device profile names measured NCCL tables, those replace the links' figures
(``costmodel.parallel.collectives``) unless the profile says ``measured_collectives: false``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from costmodel.devices.hardware import Hardware, load_hardware
from costmodel.devices.profiles import Profiles
from costmodel.spec import FiniteFloat

# Strict and finite (a bool or "0.5" is no number here), and bounded to what a link can be, so that no
# time overflows: a bandwidth of 1e-300 B/s would make every collective take inf seconds.
Bandwidth = Annotated[FiniteFloat, Field(ge=1e3, le=1e18)]  # bytes/s per GPU per direction
Latency = Annotated[FiniteFloat, Field(ge=0, le=1)]  # seconds


class Link(BaseModel):
    """One kind of wire, as one GPU sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    bandwidth: Bandwidth  # bytes/s per GPU per direction, line rate
    efficiency: Annotated[FiniteFloat, Field(gt=0, le=1)]  # NCCL bus bandwidth / line rate (ring)
    # NVLink SHARP (NVLS) reduces inside the switch: its all-reduce bus bandwidth may pass the line rate.
    all_reduce_efficiency: Annotated[FiniteFloat, Field(gt=0, le=2)] | None = None
    latency: Latency  # seconds per ring step, Simple protocol (large messages)
    ll_latency: Latency | None = None  # seconds per ring step, LL protocol (small messages)
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
    gpus_per_node: Annotated[StrictInt, Field(gt=0, le=2**20)]  # the NVLink domain
    intra_node: Link
    inter_node: Link
    collective_latency: Latency = 0.0  # seconds per ring collective, Simple protocol
    ll_collective_latency: Latency | None = None  # the same, LL protocol
    # In-node collectives from the device's measured NCCL tables (specs/kernels/<gpu>/), where it
    # has them; false: the α-β model of `intra_node` throughout (a node unlike the one measured).
    measured_collectives: StrictBool = True
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
