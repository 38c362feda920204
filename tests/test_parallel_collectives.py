"""Collectives: latency and bandwidth terms per ring algorithm, on the link the group spans.
Expected values are worked by hand from the formulas' definitions (Thakur et al. 2005; NCCL's
tuning model), on a cluster with round numbers."""

from __future__ import annotations

import pytest

from costmodel.parallel.cluster import Cluster, Link, load_cluster
from costmodel.parallel.collectives import collective, span

# 4 GPUs per node; NVLink 100 GB/s at 0.5 -> 50 GB/s busbw; network 10 GB/s at 0.5 -> 5 GB/s.
ROUND = Cluster(
    name="round", device="a100-80gb", gpus_per_node=4,
    intra_node=Link(name="nvl", bandwidth=100e9, efficiency=0.5, latency=1e-6, ll_latency=0.1e-6,
                    source="test"),
    inter_node=Link(name="net", bandwidth=10e9, efficiency=0.5, latency=10e-6, ll_latency=1e-6,
                    source="test"),
    collective_latency=5e-6, ll_collective_latency=2e-6, source="test",
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


def test_dgx_a100_tensor_parallel_all_reduce():
    """Megatron's per-layer all-reduce on one DGX A100: b*s*h = 1 x 2048 x 12288 fp16 = 50.3 MB
    over 8 GPUs at 230 GB/s of bus bandwidth (nccl-tests#149): 2*7/8 * 50.3 MB / 230 GB/s =
    0.383 ms, plus 8.4 + 14 * 3.4 = 56 us."""
    a100 = load_cluster("dgx-a100-80gb")
    size = 2048 * 12288 * 2
    c = collective(a100, "all_reduce", "tp", 8, size)
    assert c.bandwidth_s == pytest.approx(1.75 * size / 230.1e9)
    assert c.latency_s == pytest.approx(56e-6)


def test_nvlink_sharp_all_reduce_on_h100():
    """DGX H100 all-reduce uses NVLS's 480 GB/s bus bandwidth; other collectives the ring's 370."""
    h100 = load_cluster("dgx-h100")
    ar = collective(h100, "all_reduce", "tp", 8, 1e9)
    ag = collective(h100, "all_gather", "tp", 8, 1e9)
    assert ar.bandwidth_s == pytest.approx(1.75e9 / (450e9 * 1.067))
    assert ag.bandwidth_s == pytest.approx(0.875e9 / (450e9 * 0.822))
