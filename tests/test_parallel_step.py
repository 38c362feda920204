"""The training step on a layout: shards, counts of collectives, bubble, memory, MFU.
Expected counts are derived by hand from Megatron-LM's papers, not from the code under test."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.parallel import layout as layout_module
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.layout import Layout, Recompute
from costmodel.parallel.step import Overlap, StepModel, shard_spec

A100 = load_cluster("dgx-a100-80gb")


@pytest.fixture(scope="module")
def m22():
    return StepModel(catalog.load("megatron-22b"), A100, seq=2048, dtype="fp16")


def layers(a, field="flops_matmul"):
    return sum(getattr(r, field) for r in a.rows if r.path.startswith("layers"))


def test_a_tensor_parallel_shard_does_one_t_th_of_every_layer_matmul():
    """Column- and row-parallel linears and the attention heads split over t (Shoeybi et al. 2019)."""
    spec = catalog.load("megatron-175b")
    full = analyze(spec, "train", batch=1, seq=2048)
    part = analyze(shard_spec(spec, 8), "train", batch=1, seq=2048)
    assert 8 * layers(part) == layers(full)
    # The vocabulary-parallel head too: 2*s*h*V/t.
    head = next(r for r in part.rows if r.path == "lm_head")
    assert head.flops_matmul == 3 * 2 * 2048 * 12288 * 51200 // 8


def test_fewer_kv_heads_than_ranks_are_replicated():
    spec = catalog.load("llama-3.1-405b")  # 8 key/value heads
    assert shard_spec(spec, 8).n_kv_heads == 1
    assert shard_spec(spec, 16).n_kv_heads == 1 and shard_spec(spec, 16).n_heads == 8
    assert shard_spec(spec, 4).n_kv_heads == 2


def test_model_flops_are_narayanans_formula(m22):
    """Our matmul FLOPs per step equal Narayanan et al. 2021's 72BsLh^2(1 + s/6h + V/12hL) exactly
    (their count is the dense matmuls); MFU divides our exact total (non-matmul work is 0.6%)."""
    B, s, L, h, V = 4, 2048, 48, 6144, 51200
    narayanan = 72 * B * s * L * h * h + 12 * B * s * s * L * h + 6 * B * s * h * V
    full = analyze(m22.spec, "train", batch=B, seq=s)
    assert full.total().flops_matmul == narayanan
    st = m22.step(Layout(4, 4, tp=8))
    assert st.model_flops == pytest.approx(full.total().flops)
    assert 0 < full.total().flops / narayanan - 1 < 0.01
    assert st.mfu == pytest.approx(st.model_flops / st.step_time_s / (8 * 312e12))


def test_tensor_parallel_collectives_per_step(m22):
    """22B on TP 8, one micro-batch of 4: 4 all-reduces per layer (2 forward, 2 backward) x 48,
    plus the embedding's and the head's: 194, each of b*s*h fp16 = 4*2048*6144*2 bytes;
    full recompute adds the forward's 2 per layer: 290; SP turns each into RS + AG, and Megatron
    gathers the two column-parallel inputs again in the backward (overlapped with dgrad)."""
    x = 4 * 2048 * 6144 * 2
    st = m22.step(Layout(4, 4, tp=8))
    ar = st.by_collective()["tp/all_reduce"]
    assert ar["calls"] == 194
    assert ar["bytes_sent"] == pytest.approx(194 * 2 * 7 / 8 * x)
    assert m22.step(Layout(4, 4, tp=8, recompute=Recompute.full)).by_collective()["tp/all_reduce"]["calls"] == 290
    sp = m22.step(Layout(4, 4, tp=8, sequence_parallel=True, recompute=Recompute.selective)).by_collective()
    assert sp["tp/reduce_scatter"]["calls"] == 4 * 48 + 2  # the embedding's output, the head's input gradient
    # the head's input, and the backward's re-gather of the two column-parallel inputs per layer
    assert sp["tp/all_gather"]["calls"] == 4 * 48 + 1 + 2 * 48


def test_pipeline_bubble_shrinks_with_interleaving():
    """Bubble (p-1)/v of a stage's micro-batch time (Narayanan et al. 2021): halved by v = 2,
    zero without a pipeline; b*s*h/t bytes per send, 2 sends per micro-batch per chunk."""
    model = StepModel(catalog.load("megatron-175b"), A100, seq=2048, dtype="fp16")
    base = Layout(64, 1, tp=8, pp=8, dp=1, sequence_parallel=True, recompute=Recompute.selective)
    one, two = model.step(base), model.step(base.with_(interleave=2))
    assert two.breakdown["pipeline_bubble"] == pytest.approx(one.breakdown["pipeline_bubble"] / 2)
    p2p = two.by_collective()["pp/p2p"]
    assert p2p["calls"] == 2 * 2 * 64
    assert p2p["bytes_sent"] / p2p["calls"] == 2048 * 12288 * 2 / 8
    flat = model.step(Layout(8, 1, tp=8, pp=1, dp=8))
    assert flat.breakdown["pipeline_bubble"] == 0


def test_data_parallel_gradients_and_zero(m22):
    """DP 8 on 64 GPUs: an all-reduce of the rank's fp32 gradients (ZeRO 0); ZeRO-1 a
    reduce-scatter of them and an all-gather of the fp16 weights; ZeRO-3 shards all 18 bytes."""
    z0 = m22.step(Layout(32, 4, tp=8, dp=8))
    z1 = m22.step(Layout(32, 4, tp=8, dp=8, zero=1))
    z3 = m22.step(Layout(32, 4, tp=8, dp=8, zero=3))
    params = z0.memory.weights / 2
    assert z0.by_collective()["dp/all_reduce"]["bytes_sent"] == pytest.approx(2 * 7 / 8 * 4 * params)
    assert z1.by_collective()["dp/reduce_scatter"]["bytes_sent"] == pytest.approx(7 / 8 * 4 * params)
    assert z1.by_collective()["dp/all_gather"]["bytes_sent"] == pytest.approx(7 / 8 * 2 * params)
    assert z1.memory.optimizer == pytest.approx(z0.memory.optimizer / 8)
    assert z1.memory.gradients == z0.memory.gradients
    full = z3.memory.weights + z3.memory.gradients + z3.memory.optimizer
    assert full == pytest.approx(18 * params / 8)
    assert z0.by_collective()["dp/all_reduce"]["link"] == "inter_node"  # one GPU per node in each DP group


def test_overlap_is_a_switch(m22):
    base = Layout(4, 4, tp=8)
    plain = m22.step(base)
    hidden = StepModel(m22.spec, A100, seq=2048, dtype="fp16", overlap=Overlap(tp=True)).step(base)
    assert hidden.breakdown["tp_comm"] < plain.breakdown["tp_comm"]
    assert hidden.step_time_s < plain.step_time_s
    assert plain.breakdown["compute"] == pytest.approx(hidden.breakdown["compute"])


def test_the_breakdown_sums_to_the_step(m22):
    st = m22.step(Layout(4, 1, tp=8, sequence_parallel=True, recompute=Recompute.selective))
    assert sum(st.breakdown.values()) == pytest.approx(st.step_time_s)
    assert sum(st.compute_by_component.values()) == pytest.approx(st.breakdown["compute"])
    assert st.hfu > st.mfu


def test_context_parallel_passes_kv_around_the_ring():
    """CP 2 with TP 8 on 16 GPUs: (cp-1) sends of the local K and V forward, 2 backward, per layer;
    each 2 * b * (s/cp) * (k/t) * d_h * 2 bytes; the attention core does s/cp queries x s keys."""
    model = StepModel(catalog.load("megatron-22b"), A100, seq=2048, dtype="fp16")
    st = model.step(Layout(4, 1, tp=8, dp=1, cp=2))
    cp = st.by_collective()["cp/p2p"]
    assert cp["calls"] == 4 * 48 * 3
    assert cp["bytes_sent"] / cp["calls"] == 2 * 1 * 1024 * 8 * 96 * 2
    assert cp["link"] == "inter_node"  # TP fills the node: the CP neighbour is in the next one


def test_expert_parallel_all_to_all(monkeypatch):
    """A spec with E = 8 experts, top_k 2 (set by hand: MoE specs come from another branch):
    4 all-to-alls per layer per micro-batch (dispatch, combine; twice backward), each sending
    top_k * b * s * h * 2 bytes, (ep-1)/ep of it leaving the rank."""
    monkeypatch.setattr(layout_module, "experts", lambda spec: (8, 2))
    model = StepModel(catalog.load("megatron-22b"), A100, seq=2048, dtype="fp16")
    model.experts = (8, 2)
    st = model.step(Layout(8, 1, tp=1, dp=8, ep=8))
    a2a = st.by_collective()["ep/all_to_all"]
    assert a2a["calls"] == 4 * 48  # one micro-batch per DP rank (8 sequences, DP 8)
    assert a2a["bytes_sent"] / a2a["calls"] == pytest.approx(7 / 8 * 2 * 2048 * 6144 * 2)


def test_memory_per_gpu_of_the_first_stage():
    """175B, TP 8, PP 8, v 3, 64 micro-batches: the first stage keeps 12 layers x 8 micro-batches
    x (1 + 7/24) (Korthikanti et al. 2022, section 4.2.3). Per layer, the memory model's exact
    count is Korthikanti's sbh(34 + 5as/h) plus the two LayerNorms' fp32 mean and rstd, 16sb;
    with SP all of it over t; without, sbh(10 + 24/t + 5as/(ht)) + 16sb."""
    model = StepModel(catalog.load("megatron-175b"), A100, seq=2048, dtype="fp16")
    st = model.step(Layout(64, 1, tp=8, pp=8, interleave=3, sequence_parallel=True))
    s, h = 2048, 12288
    per_layer = (s * h * (34 + 5 * 96 * s / h) + 16 * s) / 8
    acts = model._activations(8, 1, s, True, Recompute.none)
    assert acts.per_layer == pytest.approx(per_layer, rel=1e-12)
    assert model._activations(8, 1, s, False, Recompute.none).per_layer == pytest.approx(
        s * h * (10 + 24 / 8 + 5 * 96 * s / (h * 8)) + 16 * s, rel=1e-12)
    assert acts.shared == s * s  # the causal mask, one byte per (query, key), once per GPU
    first = (12 * (1 + 7 / 24) * per_layer + acts.first) * 8 + acts.shared
    assert st.memory.activations == pytest.approx(first)
    assert st.memory_last.activations == pytest.approx(12 * per_layer + acts.last + acts.shared)
