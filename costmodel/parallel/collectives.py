"""Collectives: NCCL as measured inside one node, a latency and a bandwidth term per algorithm
on the links a group spans otherwise.

**Inside one node** (every rank of the group in one NVLink domain), on a device whose profile
names measured tables (``Hardware.kernel_tables``: specs/kernels/<gpu>/collectives.json, NCCL's
nccl-tests binaries run by NVIDIA's aiconfigurator collector, aiconfigurator-core 0.12.0,
ai-dynamo/aiconfigurator ``collector/collect_nccl.py``), all-reduce, all-gather, reduce-scatter
and all-to-all take the measured time of their GPU count and message (``KernelTables.collective``:
log-log interpolation between measured sizes and log GPU counts; below the smallest message the
time is held, above the largest it grows linearly). ``size`` here is nccl-tests' size (its
``-b``, in bytes) for every kind: nccl-tests' ``*GetCollByteCount`` makes all-reduce's the buffer
each rank holds, all-gather's the gathered output, reduce-scatter's the unreduced input and
all-to-all's what one rank sends in all (its own share included), the same quantities as the
table below. Beyond the table's largest GPU count (8; a GB200 NVL72 rack has 72 in one domain)
the time at the largest count is scaled by the α-β model's ratio between the two counts, the
ring's bandwidth term growing by (n-1)/n and its latency by its 2(n-1) or n-1 steps. Each
``Collective`` says where its time came from (``basis``): ``measured`` (a grid point),
``interpolated``, ``extrapolated`` or ``modelled``.

**Otherwise** (a group across nodes, point-to-point, a device without tables, or a cluster
profile with ``measured_collectives: false``), the α-β model. Ring algorithms (Patarasuk & Yuan
2009; Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations in
MPICH"), for n ranks and a buffer of S bytes:

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
at one NIC's rate beside the NVLink share. Where the device has tables, the NVLink bus bandwidth
of a group across nodes is the one the same collective reached on k GPUs of one node at the
table's largest message (``nvlink_bus_bandwidth``), not the profile's efficiency; no table holds
a measurement across nodes, so the error of this model there is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from costmodel.devices.kernels import Grid, Reads
from costmodel.parallel.cluster import Cluster

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
#: Where a collective's time came from, from the best to the least measured ("none": no time).
BASES = ("none", "measured", "interpolated", "extrapolated", "modelled")


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
    basis: str = "modelled"  # one of BASES

    @property
    def time_s(self) -> float:
        return self.latency_s + self.bandwidth_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"time_s": self.time_s}


def weakest(a: str, b: str) -> str:
    """Of two bases, the less measured: what a sum of calls of both can claim."""
    return max(a, b, key=BASES.index)


#: The bases of a time read off the measured NCCL tables (``_measured``).
TABLE_BASES = ("measured", "interpolated", "extrapolated")


def reads(cluster: Cluster, calls: Iterable[Collective]) -> Reads:
    """What `calls` read of the device's measured NCCL tables (``devices.kernels.Reads``): the
    "collectives" bands of errors.json where any was timed off them, and "collectives"
    extrapolated where any lay past them (a message outside the sizes measured, or more GPUs
    than measured in one node, scaled by the ring model). The α-β model's times (``modelled``)
    carry no band: no table holds a measurement across nodes."""
    bases = {c.basis for c in calls}
    if not bases & set(TABLE_BASES):
        return Reads()
    tables = cluster.hardware.kernel_tables()
    bands = tables.errors.get("collectives") if tables is not None else None
    return Reads({"collectives": bands} if bands else {}, ("collectives",) if "extrapolated" in bases else ())


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
    """The time of one `kind` over `ranks` devices `stride` apart, on a buffer of `size` bytes:
    measured where the group sits in one node and the device has a table of the kind, the α-β
    model (``modelled``) otherwise.

    For p2p, `ranks` is 2 and `stride` the distance between the two devices."""
    if ranks > 1 and size > 0 and kind != "p2p":
        grid = table(cluster, kind)
        if grid is not None and not span(cluster, ranks, stride).crosses_nodes:
            return _measured(cluster, grid, kind, group, ranks, size)
    return modelled(cluster, kind, group, ranks, size, stride)


def table(cluster: Cluster, kind: str) -> Grid | None:
    """The device's measured NCCL table of `kind` (GPUs, bytes) inside one node, if any."""
    if not cluster.measured_collectives:
        return None
    tables = cluster.hardware.kernel_tables()
    return None if tables is None else tables.collectives.get(kind)


def _measured(cluster: Cluster, grid: Grid, kind: str, group: str, ranks: int, size: float) -> Collective:
    """The table's time; latency_s is its time at the smallest message measured (the floor it
    holds below), bandwidth_s the rest."""
    gpus, sizes = grid.axes
    time, inside = _looked_up(cluster, grid, kind, ranks, size)
    floor = min(time, _looked_up(cluster, grid, kind, ranks, sizes[0])[0])
    if not inside:
        basis = "extrapolated"
    elif float(ranks) in gpus and float(size) in sizes:
        basis = "measured"
    else:
        basis = "interpolated"
    steps, sent = _steps_and_volume(kind, ranks, size)
    return Collective(kind, group, ranks, size, sent, steps, floor, time - floor, "intra_node", basis)


def _looked_up(cluster: Cluster, grid: Grid, kind: str, ranks: int, size: float) -> tuple[float, bool]:
    """Seconds and whether inside the table; above its largest GPU count, its time there times the
    α-β model's ratio (the lookup itself would grow it linearly in GPUs)."""
    top = int(grid.axes[0][-1])
    got = grid(min(ranks, top), size)
    if ranks <= top:
        return got.time_s, got.inside
    edge = modelled(cluster, kind, "", top, size).time_s
    return got.time_s * modelled(cluster, kind, "", ranks, size).time_s / edge, False


def nvlink_bus_bandwidth(cluster: Cluster, kind: str, per_node: int) -> float:
    """Bytes/s a ring of `kind` moves per GPU over NVLink with `per_node` ranks of the group in
    one node: the table's, at its largest message on min(per_node, its largest GPU count) GPUs,
    where the device has one; the profile's ring figure otherwise."""
    grid = table(cluster, kind) if kind != "p2p" else None
    if grid is None or per_node < 2:
        return cluster.intra_node.bus_bandwidth
    n, size = min(per_node, int(grid.axes[0][-1])), grid.axes[1][-1]
    return _steps_and_volume(kind, n, size)[1] / grid(n, size).time_s


def modelled(cluster: Cluster, kind: str, group: str, ranks: int, size: float,
             stride: int = 1) -> Collective:
    """The α-β model of one `kind`: the faster of NCCL's Simple and LL protocols, as its tuner
    picks, on the links of the cluster profile (the NVLink share of a group across nodes from
    the device's table where it has one, ``nvlink_bus_bandwidth``; inside one node the profile's
    figures alone, which bench/collective_validation.py sets beside the tables)."""
    if ranks <= 1 or size <= 0:
        return Collective(kind, group, max(ranks, 1), size, 0.0, 0, 0.0, 0.0, "none", "none")
    steps, sent = _steps_and_volume(kind, ranks, size)
    where = span(cluster, ranks, stride)
    nvl, net = cluster.intra_node, cluster.inter_node
    link = "inter_node" if where.crosses_nodes else "intra_node"
    if not where.crosses_nodes:
        bw = nvl.all_reduce_bus_bandwidth if kind == "all_reduce" else nvl.bus_bandwidth
        inter_steps = 0
    elif kind == "all_to_all":
        remote = (ranks - where.per_node) / ranks * size  # to devices in other nodes
        local = nvlink_bus_bandwidth(cluster, kind, where.per_node)
        bw = sent / max(remote / net.bus_bandwidth, (sent - remote) / local)
        inter_steps = where.nodes - 1
    elif kind == "p2p":
        bw, inter_steps = net.bus_bandwidth, 1
    else:
        bw = min(nvlink_bus_bandwidth(cluster, kind, where.per_node), where.per_node * net.bus_bandwidth)
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
