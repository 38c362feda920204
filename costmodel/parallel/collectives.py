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
latency, bandwidth as nccl-tests' "busbw"), for its Simple and LL protocols, the faster taken.
A group whose ranks all sit in one node uses NVLink;
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


def collective(cluster: Cluster, kind: str, group: str, ranks: int, size: float,
               stride: int = 1) -> Collective:
    """The time of one `kind` over `ranks` devices `stride` apart, on a buffer of `size` bytes.

    For p2p, `ranks` is 2 and `stride` the distance between the two devices."""
    return modelled(cluster, kind, group, ranks, size, stride)


def modelled(cluster: Cluster, kind: str, group: str, ranks: int, size: float,
             stride: int = 1) -> Collective:
    """The α-β model of one `kind`: the faster of NCCL's Simple and LL protocols, as its tuner
    picks, on the links of the cluster profile."""
    if ranks <= 1 or size <= 0:
        return Collective(kind, group, max(ranks, 1), size, 0.0, 0, 0.0, 0.0, "none")
    steps, sent = _steps_and_volume(kind, ranks, size)
    where = span(cluster, ranks, stride)
    nvl, net = cluster.intra_node, cluster.inter_node
    link = "inter_node" if where.crosses_nodes else "intra_node"
    if not where.crosses_nodes:
        bw = nvl.all_reduce_bus_bandwidth if kind == "all_reduce" else nvl.bus_bandwidth
        inter_steps = 0
    elif kind == "all_to_all":
        remote = (ranks - where.per_node) / ranks * size  # to devices in other nodes
        bw = sent / max(remote / net.bus_bandwidth, (sent - remote) / nvl.bus_bandwidth)
        inter_steps = where.nodes - 1
    elif kind == "p2p":
        bw, inter_steps = net.bus_bandwidth, 1
    else:
        bw = min(nvl.bus_bandwidth, where.per_node * net.bus_bandwidth)
        # NCCL's tuner: a ring crosses the network once per node on each of its passes.
        inter_steps = (2 if kind == "all_reduce" else 1) * (where.nodes - 1)
    intra_steps = steps - inter_steps
    simple = (cluster.collective_latency + intra_steps * nvl.latency + inter_steps * net.latency, sent / bw)
    best = simple
    if (cluster.ll_collective_latency is not None and nvl.ll_latency is not None
            and net.ll_latency is not None):
        share = 1 / 4 if (kind == "all_reduce" or where.crosses_nodes) else 1 / 3
        ll = (cluster.ll_collective_latency + intra_steps * nvl.ll_latency + inter_steps * net.ll_latency,
              sent / (bw * share))
        best = min(simple, ll, key=sum)
    return Collective(kind, group, ranks, size, sent, steps, best[0], best[1], link)
