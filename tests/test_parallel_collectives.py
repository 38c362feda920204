"""Collectives: NCCL's measured times inside one node, and the α-β model (latency and bandwidth
terms per ring algorithm, on the link the group spans) elsewhere. The model's expected values are
worked by hand from the formulas' definitions (Thakur et al. 2005; NCCL's tuning model), on a
cluster with round numbers whose profile turns the tables off; the measured ones are read straight
from specs/kernels/<gpu>/collectives.json with the json module, not through the lookup."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from costmodel.parallel.cluster import Cluster, Link, load_cluster
from costmodel.parallel.collectives import BASES, collective, modelled, span, weakest

# 4 GPUs per node; NVLink 100 GB/s at 0.5 -> 50 GB/s busbw; network 10 GB/s at 0.5 -> 5 GB/s.
ROUND = Cluster(
    name="round", device="a100-80gb", gpus_per_node=4,
    intra_node=Link(name="nvl", bandwidth=100e9, efficiency=0.5, latency=1e-6, ll_latency=0.1e-6,
                    source="test"),
    inter_node=Link(name="net", bandwidth=10e9, efficiency=0.5, latency=10e-6, ll_latency=1e-6,
                    source="test"),
    collective_latency=5e-6, ll_collective_latency=2e-6, measured_collectives=False, source="test",
)


def test_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_buffer():
    """4 ranks in one node, 1 GB: 2*3/4 GB = 1.5 GB sent per device at 50 GB/s = 30 ms, plus
    5 us + 6 steps * 1 us of latency (the Simple protocol wins at this size)."""
    c = collective(ROUND, "all_reduce", "tp", 4, 1e9)
    assert c.bytes_sent == pytest.approx(1.5e9)
    assert c.steps == 6
    assert c.bandwidth_s == pytest.approx(0.03)
    assert c.latency_s == pytest.approx(11e-6)
    assert c.link == "intra_node"


def test_reduce_scatter_plus_all_gather_is_one_all_reduce():
    """Sequence parallelism swaps each all-reduce for a reduce-scatter and an all-gather: the
    same bytes ((n-1)/n twice), the same steps."""
    ar = collective(ROUND, "all_reduce", "tp", 4, 1e9)
    rs = collective(ROUND, "reduce_scatter", "tp", 4, 1e9)
    ag = collective(ROUND, "all_gather", "tp", 4, 1e9)
    assert rs.bytes_sent == ag.bytes_sent == pytest.approx(0.75e9)
    assert rs.steps + ag.steps == ar.steps
    assert rs.bandwidth_s + ag.bandwidth_s == pytest.approx(ar.bandwidth_s)


def test_small_messages_take_the_low_latency_protocol():
    """1 KB over 4 ranks: Simple costs 5 + 6*1 = 11 us of latency; LL 2 + 6*0.1 = 2.6 us and a
    quarter of the bandwidth (1500 B / 12.5 GB/s = 0.12 us), so LL is chosen."""
    c = collective(ROUND, "all_reduce", "tp", 4, 1e3)
    assert c.latency_s == pytest.approx(2.6e-6)
    assert c.bandwidth_s == pytest.approx(1500 / 12.5e9)


def test_a_group_across_nodes_runs_at_the_network_rate():
    """8 ranks one per node (stride 4): every ring step crosses the network; 2*7/8 GB at 5 GB/s."""
    assert span(ROUND, 8, 4).per_node == 1 and span(ROUND, 8, 4).nodes == 8
    c = collective(ROUND, "all_reduce", "dp", 8, 1e9, stride=4)
    assert c.link == "inter_node"
    assert c.bandwidth_s == pytest.approx(1.75e9 / 5e9)
    assert c.latency_s == pytest.approx(5e-6 + 14 * 10e-6)


def test_ranks_sharing_a_node_aggregate_its_nics():
    """8 consecutive ranks on 2 nodes of 4: 4 rings cross the network at once through 4 NICs,
    4 * 5 = 20 GB/s < 50 GB/s NVLink; NCCL's tuner counts 2*(2-1) network steps of the 14."""
    c = collective(ROUND, "all_reduce", "dp", 8, 1e9, stride=1)
    assert c.bandwidth_s == pytest.approx(1.75e9 / 20e9)
    assert c.latency_s == pytest.approx(5e-6 + 12 * 1e-6 + 2 * 10e-6)


def test_all_to_all_cannot_aggregate_nics():
    """8 ranks on 2 nodes, 8 MB sent by each: 4/8 of it to the other node at one NIC's 5 GB/s,
    3/8 inside the node at 50 GB/s, concurrently: 4 MB / 5 GB/s = 0.8 ms."""
    c = collective(ROUND, "all_to_all", "ep", 8, 8e6, stride=1)
    assert c.bytes_sent == pytest.approx(7e6)
    assert c.bandwidth_s == pytest.approx(4e6 / 5e9)


def test_point_to_point_and_trivial_groups():
    within = collective(ROUND, "p2p", "pp", 2, 1e8, stride=1)
    across = collective(ROUND, "p2p", "pp", 2, 1e8, stride=4)
    assert within.bandwidth_s == pytest.approx(1e8 / 50e9) and within.steps == 1
    assert across.bandwidth_s == pytest.approx(1e8 / 5e9) and across.link == "inter_node"
    alone = collective(ROUND, "all_reduce", "dp", 1, 1e9)
    assert alone.time_s == 0 and alone.bytes_sent == 0


def test_dgx_a100_tensor_parallel_all_reduce_modelled():
    """The α-β model of Megatron's per-layer all-reduce on one DGX A100: b*s*h = 1 x 2048 x 12288
    fp16 = 50.3 MB over 8 GPUs at 230 GB/s of bus bandwidth (nccl-tests#149): 2*7/8 * 50.3 MB /
    230 GB/s = 0.383 ms, plus 8.4 + 14 * 3.4 = 56 us."""
    a100 = load_cluster("dgx-a100-80gb")
    size = 2048 * 12288 * 2
    c = modelled(a100, "all_reduce", "tp", 8, size)
    assert c.bandwidth_s == pytest.approx(1.75 * size / 230.1e9)
    assert c.latency_s == pytest.approx(56e-6)


def test_nvlink_sharp_all_reduce_on_h100_modelled():
    """The α-β model: DGX H100 all-reduce uses NVLS's 480 GB/s bus bandwidth; other collectives
    the ring's 370."""
    h100 = load_cluster("dgx-h100")
    ar = modelled(h100, "all_reduce", "tp", 8, 1e9)
    ag = modelled(h100, "all_gather", "tp", 8, 1e9)
    assert ar.bandwidth_s == pytest.approx(1.75e9 / (450e9 * 1.067))
    assert ag.bandwidth_s == pytest.approx(0.875e9 / (450e9 * 0.822))


# --- NCCL as measured inside one node ---------------------------------------------------------

KERNELS = Path(__file__).resolve().parent.parent / "specs" / "kernels"
#: Each bundled cluster's device and the folder of tables it reads (the GB200's GPU is a Blackwell
#: die like the B200's; aiconfigurator measured an 8-GPU B200 node, not an NVL72 rack).
DEVICES = {"dgx-a100-80gb": "a100-80gb", "dgx-h100": "h100-sxm", "dgx-h200": "h200", "gb200-nvl72": "b200"}


def tables(gpu: str) -> dict[str, tuple[list[int], list[int], list[float]]]:
    data = json.loads((KERNELS / gpu / "collectives.json").read_text())
    return {t["kind"]: (t["axes"]["gpus"], t["axes"]["bytes"], t["time_s"]) for t in data["tables"]}


def at(table: tuple[list[int], list[int], list[float]], gpus: int, nbytes: int) -> float:
    """The time the lookup reads at a grid point: the least measured at as many GPUs or more and
    as many bytes or more (the time envelope: more work never takes less time), by brute force."""
    g, b, t = table
    return min(t[i * len(b) + j] for i in range(len(g)) if g[i] >= gpus
               for j in range(len(b)) if b[j] >= nbytes)


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_each_bundled_cluster_reads_its_devices_tables(name):
    c = load_cluster(name)
    assert c.device == c.hardware.name and c.hardware.kernels == DEVICES[name]
    assert c.measured_collectives


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_inside_a_node_a_collective_takes_the_measured_time(name):
    """Every grid point of every kind: the time is the file's (on its envelope); what it sends is
    still the ring's count; latency_s is the smallest message's time (the floor), the rest bandwidth."""
    cluster = load_cluster(name)
    for kind, table in tables(DEVICES[name]).items():
        gpus, sizes, _ = table
        assert (gpus, sizes[0], sizes[-1]) == ([2, 4, 8], 512, 2**29)
        for n in gpus:
            for b in sizes:
                c = collective(cluster, kind, "tp", n, b)
                assert c.time_s == pytest.approx(at(table, n, b), rel=1e-12), (kind, n, b)
                assert (c.basis, c.link, c.ranks) == ("measured", "intra_node", n)
                assert c.latency_s == pytest.approx(min(at(table, n, b), at(table, n, 512)), rel=1e-12)
                volume = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
                assert c.bytes_sent == pytest.approx(volume * b)


def test_between_measured_points_log_log():
    """H100 all-gather: halfway between two sizes in log is the geometric mean of their times; 6
    GPUs sit log(6/4)/log(2) = 0.585 of the way from 4 to 8 in log GPU count."""
    h100 = load_cluster("dgx-h100")
    ag = tables("h100-sxm")["all_gather"]
    lo, hi = 2**20, 2**21
    mid = collective(h100, "all_gather", "tp", 8, math.sqrt(lo * hi))
    assert mid.time_s == pytest.approx(math.sqrt(at(ag, 8, lo) * at(ag, 8, hi)))
    assert mid.basis == "interpolated"
    w = math.log(6 / 4) / math.log(2)
    six = collective(h100, "all_gather", "tp", 6, lo)
    assert six.time_s == pytest.approx(at(ag, 4, lo) ** (1 - w) * at(ag, 8, lo) ** w)
    assert six.basis == "interpolated"


def test_outside_the_measured_sizes():
    """Below 512 B the time is held (the launch and latency floor); above 512 MiB it grows
    linearly: 1 GiB takes twice 512 MiB. Both say they are extrapolated."""
    a100 = load_cluster("dgx-a100-80gb")
    ar = tables("a100-80gb")["all_reduce"]
    small = collective(a100, "all_reduce", "tp", 8, 64)
    big = collective(a100, "all_reduce", "tp", 8, 2**30)
    assert small.time_s == pytest.approx(at(ar, 8, 512)) and small.basis == "extrapolated"
    assert big.time_s == pytest.approx(2 * at(ar, 8, 2**29)) and big.basis == "extrapolated"


def test_beyond_eight_gpus_in_one_nvlink_domain():
    """GB200 NVL72: the B200 table stops at 8 GPUs; 72 (or 16) take the 8-GPU time scaled as the
    α-β model scales from 8, by hand on the profile's NVLink 5 figures. 512 MiB all-gather
    (Simple): 8.4 us + (n-1) x 3.4 us + (n-1)/n x S / (900 GB/s x 0.772); 512 B (LL): 3.6 us +
    (n-1) x 0.47 us + (n-1)/n x S / (900 GB/s x 0.772 / 3)."""
    nvl72 = load_cluster("gb200-nvl72")
    ag = tables("b200")["all_gather"]
    busbw = 900e9 * 0.772

    def simple(n: int, s: float) -> float:
        return 8.4e-6 + (n - 1) * 3.4e-6 + (n - 1) / n * s / busbw

    def ll(n: int, s: float) -> float:
        return 3.6e-6 + (n - 1) * 0.47e-6 + (n - 1) / n * s / (busbw / 3)

    for n in (16, 72):
        big = collective(nvl72, "all_gather", "tp", n, 2**29)
        assert big.time_s == pytest.approx(at(ag, 8, 2**29) * simple(n, 2**29) / simple(8, 2**29))
        assert (big.basis, big.link) == ("extrapolated", "intra_node")
        small = collective(nvl72, "all_gather", "tp", n, 512)
        assert small.time_s == pytest.approx(at(ag, 8, 512) * ll(n, 512) / ll(8, 512))
    # The ring's bandwidth term grows by (71/72) / (7/8), 1.13x, at 512 MiB; the latency more.
    assert 1.13 < collective(nvl72, "all_gather", "tp", 72, 2**29).time_s / at(ag, 8, 2**29) < 1.5


def test_across_nodes_the_nvlink_share_is_the_measured_one():
    """16 consecutive ranks on 2 DGX nodes, 1 GB all-gather, α-β model: the bandwidth is
    min(NVLink, 8 NICs). On H100 the table's 8-GPU all-gather bus bandwidth at 512 MiB,
    7/8 x 512 MiB / t, is 335 GB/s, under 8 x 47 = 376 GB/s of NICs: it binds (the profile's
    370 GB/s would not have). On A100 the 8 HDR NICs' 192 GB/s bind, as before."""
    h100, a100 = load_cluster("dgx-h100"), load_cluster("dgx-a100-80gb")
    nvl = 7 / 8 * 2**29 / at(tables("h100-sxm")["all_gather"], 8, 2**29)
    assert 330e9 < nvl < 8 * 47e9
    c = collective(h100, "all_gather", "dp", 16, 1e9)
    assert (c.link, c.basis) == ("inter_node", "modelled")
    assert c.bandwidth_s == pytest.approx(15 / 16 * 1e9 / nvl)
    assert c.latency_s == pytest.approx(8.4e-6 + 14 * 3.4e-6 + 9.6e-6)
    assert collective(a100, "all_gather", "dp", 16, 1e9).bandwidth_s == pytest.approx(15 / 16 * 1e9 / 192e9)
    # The same group all-reduces at the NICs' 376 GB/s: NVLS's 445 GB/s inside the node is faster.
    ar = collective(h100, "all_reduce", "dp", 16, 1e9)
    assert ar.bandwidth_s == pytest.approx(2 * 15 / 16 * 1e9 / 376e9)


def test_what_stays_modelled():
    """Point-to-point has no table; a profile may turn the tables off; one rank moves nothing."""
    h100 = load_cluster("dgx-h100")
    p2p = collective(h100, "p2p", "pp", 2, 1e8)
    assert p2p.basis == "modelled" and p2p.bandwidth_s == pytest.approx(1e8 / (450e9 * 0.822))
    off = h100.model_copy(update={"measured_collectives": False})
    c = collective(off, "all_reduce", "tp", 8, 1e9)
    assert c.basis == "modelled" and c.bandwidth_s == pytest.approx(1.75e9 / (450e9 * 1.067))
    alone = collective(h100, "all_reduce", "tp", 1, 1e9)
    assert (alone.basis, alone.time_s) == ("none", 0)


def test_a_sum_of_calls_claims_the_least_measured_basis():
    assert BASES == ("none", "measured", "interpolated", "extrapolated", "modelled")
    assert weakest("measured", "interpolated") == weakest("interpolated", "measured") == "interpolated"
    assert weakest("none", "measured") == "measured" and weakest("modelled", "extrapolated") == "modelled"
