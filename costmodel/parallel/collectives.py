"""Collectives: a latency term and a bandwidth term per algorithm, on the link the group spans.

Ring algorithms (Patarasuk & Yuan 2009; Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH"), for n ranks and a buffer of S bytes:

    all-reduce       2(n-1) steps, 2(n-1)/n * S bytes sent per device  (S: the buffer each holds)
    reduce-scatter    (n-1) steps,  (n-1)/n * S                         (S: the unreduced input)
    all-gather        (n-1) steps,  (n-1)/n * S                         (S: the gathered output)
    all-to-all        (n-1) steps,  (n-1)/n * S                         (S: what one device sends)
    point-to-point        1 step,         S

time = collective latency + steps * per-step latency + bytes per device / bus bandwidth, which is
the form of NCCL's own tuning model (src/graph/tuning.cc: base latency + steps * hardware
latency, bandwidth as nccl-tests' "busbw"). A group whose ranks all sit in one node uses NVLink;
one that spans nodes is limited by min(NVLink, k * network), k being its ranks per node (k rings
cross the network through k NICs at once), and a ring step crossing nodes pays the network's
latency. All-to-all cannot aggregate NICs (each pair exchanges directly): its network share moves
at one NIC's rate beside the NVLink share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from costmodel.parallel.cluster import Cluster

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")


@dataclass(frozen=True)
class Span:
    """Where a group of `ranks` devices, `stride` ranks apart, sits in the cluster."""

    ranks: int
    per_node: int  # ranks of the group inside one node
    nodes: int

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1


def span(cluster: Cluster, ranks: int, stride: int = 1) -> Span:
    """Ranks r, r + stride, ..., r + (ranks-1)*stride, with consecutive ranks filling a node first
    (Megatron's order: tensor, context, expert/data, pipeline from the innermost)."""
    g = cluster.gpus_per_node
    if stride >= g:
        per_node = 1
    else:
        per_node = max(1, min(ranks, g // stride))
    return Span(ranks, per_node, -(-ranks // per_node))


@dataclass(frozen=True)
class Collective:
    """One collective call, per device: what it moves and how long it takes."""

    kind: str
    group: str  # which parallel dimension it runs over: tp, cp, ep, dp, pp
    ranks: int
    buffer_bytes: float
    bytes_sent: float  # per device
    steps: int
    latency_s: float
    bandwidth_s: float
    link: str  # intra_node or inter_node

    @property
    def time_s(self) -> float:
        return self.latency_s + self.bandwidth_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"time_s": self.time_s}


def _steps_and_volume(kind: str, n: int, size: float) -> tuple[int, float]:
    if kind == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n * size
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return n - 1, (n - 1) / n * size
    if kind == "p2p":
        return 1, size
    raise ValueError(f"collective: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")


def collective(cluster: Cluster, kind: str, group: str, ranks: int, size: float, stride: int = 1) -> Collective:
    """The time of one `kind` over `ranks` devices `stride` apart, on a buffer of `size` bytes.

    For p2p, `ranks` is 2 and `stride` the distance between the two devices."""
    if ranks <= 1 or size <= 0:
        return Collective(kind, group, max(ranks, 1), size, 0.0, 0, 0.0, 0.0, "none")
    steps, sent = _steps_and_volume(kind, ranks, size)
    where = span(cluster, ranks, stride)
    nvl, net = cluster.intra_node, cluster.inter_node
    if not where.crosses_nodes:
        bw = nvl.all_reduce_bus_bandwidth if kind == "all_reduce" else nvl.bus_bandwidth
        latency = cluster.collective_latency + steps * nvl.latency
        return Collective(kind, group, ranks, size, sent, steps, latency, sent / bw, "intra_node")
    # A ring of `ranks` with `per_node` in each node crosses the network once per node.
    crossing = 1 / where.per_node
    latency = cluster.collective_latency + steps * (crossing * net.latency + (1 - crossing) * nvl.latency)
    if kind == "all_to_all":
        remote = (ranks - where.per_node) / ranks * size  # to devices in other nodes
        local = sent - remote
        seconds = max(remote / net.bus_bandwidth, local / nvl.bus_bandwidth)
    elif kind == "p2p":
        seconds = sent / net.bus_bandwidth
    else:
        seconds = sent / min(nvl.bus_bandwidth, where.per_node * net.bus_bandwidth)
    return Collective(kind, group, ranks, size, sent, steps, latency, seconds, "inter_node")
