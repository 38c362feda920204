"""Mixture-of-experts weights in train, plan and serve (issue 23): every command counts the
parameters `analyze` counts, whatever mix of dense and sparse layers a spec has, and a training
layout splits the routed experts over its EP ranks.

Before the fix the training step analysed one period of the layer pattern (one layer for
DeepSeek), which is dense when the first layers are: deepseek-v3 held 37.4B of its 671B, kimi-k2
32.7B of 1,026B, and `plan` ranked layouts that could never fit. Figures by hand from
specs/deepseek-v3.yaml (DeepSeek-AI 2024, the released config.json): d 7168, 61 layers, the first
3 dense and 58 sparse, 256 routed experts of f_e 2048 (SwiGLU: 3 x d x f_e each), top-8."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.layout import Layout, check
from costmodel.parallel.plan import plan
from costmodel.parallel.serve import decode
from costmodel.parallel.step import StepModel
from costmodel.runtime import memory

H100 = load_cluster("dgx-h100")
D, L, L_MOE, E, F = 7168, 61, 58, 256, 2048
TOTAL_V3 = 671_026_404_352  # the published exact count (transformers' sum of numel)
ROUTED_V3 = L_MOE * E * 3 * D * F


def _seq(spec) -> int:
    return min(2048, spec.max_seq_len)


@pytest.mark.parametrize("name", catalog.bundled_names())
def test_every_command_holds_the_parameters_analyze_counts(name):
    """One GPU holds every parameter `analyze` counts: in a training step (TP 1, PP 1), in the
    memory model's weights, and in a decode replica; two pipeline stages hold them between them
    (the tied table once more, on the last stage)."""
    spec = catalog.load(name)
    seq = _seq(spec)
    total = analyze(spec, "train", batch=1, seq=seq).total().params
    weights = sum(i.bytes for i in memory.memory(spec, "train", seq=seq).items if i.category == "weights")
    width = memory.PRECISIONS[memory.Run().precision]
    assert weights == total * (width.weights + width.extra)
    if spec.is_encoder_decoder:
        return  # parallel layouts are decoder-only
    model = StepModel(spec, H100, seq=seq)
    assert model.params_per_gpu(Layout(1)) == total
    if not spec.is_encoder:  # an encoder-only model has no decode replica to serve
        one = decode(spec, H100, tp=1, batch=1, context=seq - 1)
        assert one.weights_bytes == total * 2
    if (spec.n_layers or 0) >= 2:
        lo = Layout(2, pp=2)
        mb = model.micro(1, 1, 1, False, lo.recompute)
        held = sum(sum(model._stage_params(lo, mb, i)) for i in range(2))
        tied = mb.embedding_table if spec.tied_head else 0  # an encoder without an MLM head ties nothing
        assert held == total + tied


def test_deepseek_v3_splits_its_routed_experts_over_ep():
    """TP 1, EP 8 over DP 8: a GPU holds all of the model but 7/8 of the routed experts, the
    figure serve's EP 8 replica holds too."""
    v3 = catalog.load("deepseek-v3")
    model = StepModel(v3, H100)
    assert model.params_per_gpu(Layout(8, dp=8)) == TOTAL_V3
    assert model.params_per_gpu(Layout(8, dp=8, ep=8)) == TOTAL_V3 - ROUTED_V3 * 7 // 8 == 98_856_229_888


def test_deepseek_v3_all_to_alls_run_in_its_sparse_layers_only():
    """4 all-to-alls (dispatch and combine, forward and backward) in each of the 58 sparse layers,
    none in the 3 dense ones; each GPU sends its 2048 tokens' 8 copies of d bf16 elements."""
    v3 = catalog.load("deepseek-v3")
    st = StepModel(v3, H100).step(Layout(8, dp=8, ep=8))
    a2a = st.by_collective()["ep/all_to_all"]
    assert a2a["calls"] == 4 * L_MOE
    assert a2a["bytes_sent"] / a2a["calls"] == pytest.approx(7 / 8 * 8 * 2048 * D * 2)


def test_deepseek_v3_gradients_reduce_over_their_own_groups():
    """DP 16, EP 8: the dense parameters all-reduce over the 16 DP ranks; the routed experts (an
    eighth on each GPU) over the 2 ranks that hold the same experts; fp32 gradients."""
    v3 = catalog.load("deepseek-v3")
    st = StepModel(v3, load_cluster("dgx-h100")).step(Layout(16, dp=16, ep=8))
    dp, edp = st.by_collective()["dp/all_reduce"], st.by_collective()["edp/all_reduce"]
    assert dp["ranks"] == 16 and edp["ranks"] == 2
    dense = TOTAL_V3 - ROUTED_V3
    assert dp["bytes_sent"] == pytest.approx(2 * 15 / 16 * dense * 4)
    assert edp["bytes_sent"] == pytest.approx(2 * 1 / 2 * ROUTED_V3 // 8 * 4)


def test_deepseek_v3_pipeline_stages_hold_their_own_layers():
    """PP 2: 61 layers as 30 + 31 (the extra on the last stage); the first holds the 3 dense
    layers and 27 sparse ones, the last 31 sparse ones, and its model states follow."""
    v3 = catalog.load("deepseek-v3")
    model = StepModel(v3, H100)
    assert model.stage_groups(2) == ({"dense": 3, "moe": 27}, {"dense": 0, "moe": 31})
    lo = Layout(2, pp=2)
    mb = model.micro(1, 1, 1, False, lo.recompute)
    dense_layer, moe_layer = mb.groups["dense"].params, mb.groups["moe"].params
    # A sparse layer is a dense one with its FFN (3 x d x 18432) swapped for the routed experts,
    # one shared expert (3 x d x f_e) and the router (E x d).
    assert mb.groups["moe"].expert_params == E * 3 * D * F
    assert moe_layer == dense_layer - 3 * D * 18432 + E * 3 * D * F + 3 * D * F + E * D
    first, last = (sum(model._stage_params(lo, mb, i)) for i in (0, 1))
    assert first == 3 * dense_layer + 27 * moe_layer + mb.first_params
    assert last == 31 * moe_layer + mb.last_params
    assert first + last == TOTAL_V3


def test_interleaved_stages_take_every_pth_chunk():
    """deepseek-v2-lite: 27 layers (1 dense, 26 sparse), PP 3 with v 3: chunks of 3 layers,
    device 0 holds chunks 0, 3, 6 (layers 0-2, 9-11, 18-20), so the one dense layer."""
    model = StepModel(catalog.load("deepseek-v2-lite"), H100)
    assert model.stage_groups(3, 3) == ({"dense": 1, "moe": 8}, {"dense": 0, "moe": 9},
                                        {"dense": 0, "moe": 9})


def test_plan_never_ranks_a_layout_below_the_model_states_floor():
    """deepseek-v2-lite (15.7B) on 8 H100s: whatever the layout, the 8 GPUs hold at least the
    model's 18 bytes a parameter (Megatron's fp16 weights, fp32 gradients, master and Adam
    states) between them, so no ranked layout holds less than 15.7B x 18 / 8 a GPU; the plan
    also tries expert parallelism. Before the fix it counted 2.6B parameters."""
    spec = catalog.load("deepseek-v2-lite")
    total = analyze(spec, "train", batch=1, seq=2048).total().params
    result = plan(StepModel(spec, H100), 8, 64)
    assert result.ranked
    floor = total * 18 / 8
    for st in result.ranked:
        m = st.per_gpu
        assert m.weights + m.gradients + m.optimizer >= floor * (1 - 1e-12)
    assert any(st.layout.ep > 1 for st in result.ranked)


def test_plan_finds_no_room_for_deepseek_v3_on_64_gpus():
    """671B parameters at 18 bytes are 12.1 TB: 189 GB a GPU of 64 even if sharded perfectly,
    more than an 80 GB H100 holds. No layout may be ranked."""
    v3 = catalog.load("deepseek-v3")
    model = StepModel(v3, H100)
    result = plan(model, 64, 64)
    assert result.considered > 0 and not result.ranked
    check(Layout(64, dp=64, ep=64, zero=3), v3, 64)
    m = model.step(Layout(64, dp=64, ep=64, zero=3)).per_gpu
    assert m.weights + m.gradients + m.optimizer >= TOTAL_V3 * 18 / 64


def test_train_of_a_layout_that_does_not_fit_exits_1():
    """deepseek-v3 on 8 H100s holds 671B x 18 bytes over 8 GPUs at best: the step is printed (where
    the memory goes) and the exit code says it cannot run, with one line on stderr."""
    from typer.testing import CliRunner

    from costmodel.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["train", "deepseek-v3", "--cluster", "dgx-h100", "--gpus", "8", "-G", "8",
                                 "--ep", "8", "--zero", "3", "--format", "json"])
    assert result.exit_code == 1
    assert "does not fit" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    ok = runner.invoke(app, ["train", "deepseek-v2-lite", "--cluster", "dgx-h100", "--gpus", "8", "-G", "64",
                             "--ep", "8", "--micro-batch", "2", "--zero", "1"])
    assert ok.exit_code == 0, ok.output
