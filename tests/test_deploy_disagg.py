"""Issue 24's deployments as deployed: wide EP (EP not dividing the experts, redundant experts,
the slowest rank), disaggregated prefill and decode pools (xPyD) with the KV transfer, and the
published SGLang figures beside ours (bench/disagg_check.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.deploy.disagg import (
    Disaggregated,
    decode_tokens_per_s,
    engine_layout,
    link_of,
    prefill_side,
    search_all,
    transfer_seconds,
)
from costmodel.deploy.experts import ExpertShard, Placement, layouts, step_times
from costmodel.deploy.search import ENGINE, Targets
from costmodel.deploy.workload import Workload, fixed
from costmodel.parallel.cluster import load_cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
DGX = load_cluster("dgx-h100")
LLAMA = catalog.load("llama-3-8b")


def test_placement_as_published() -> None:
    """DeepSeek's day-6 note: 9 routed experts a GPU in prefill (EP32) and 2 in decode (EP144),
    each with 32 redundant; 72 GPUs over 256 experts without them: 4 on some ranks, 3 on others."""
    assert Placement(256, 32, 32).per_rank == 9 and Placement(256, 144, 32).per_rank == 2
    assert Placement(256, 32, 32).load == 1.0 and Placement(256, 144, 32).even
    bare = Placement(256, 72)
    assert (bare.per_rank, bare.slots // bare.ep, bare.even) == (4, 3, False)
    assert bare.load == pytest.approx(4 * 72 / 256)  # the fullest rank: 4 of 256 where the mean is 1/72
    assert Placement(256, 72, 32).load == 1.0


def test_layouts_take_ep_that_does_not_divide_the_experts() -> None:
    """qwen3-30b-a3b (128 experts) on 12 GPUs: EP 3, 6 and 12 run (none divides 128)."""
    found, _ = layouts(catalog.load("qwen3-30b-a3b"), DGX, 12)
    assert {(1, 3), (1, 6), (1, 12), (2, 6), (4, 3)} <= set(found)
    assert all(12 % (tp * ep) == 0 for tp, ep in found)


def test_the_slowest_rank_sets_the_step() -> None:
    """deepseek-v2-lite (64 experts) on EP24: 3 experts on the fullest rank with or without 8
    redundant slots (the same weights), but without them it runs 3 x 24 / 64 = 1.125 x the mean
    token copies: its routed experts and all-to-alls take longer, nothing else changes."""
    spec = catalog.load("deepseek-v2-lite")
    cl = load_cluster("gb200-nvl72")

    def shard(r: int) -> ExpertShard:
        return ExpertShard(spec, 1, 24, "bf16", Widths(), KERNELS["flash"], "absorbed", redundant=r)

    uneven, even = shard(0), shard(8)
    assert uneven.local.ffn.n_experts == even.local.ffn.n_experts == 3  # type: ignore[union-attr]
    a, b = (step_times(s, cl, 512, 1024.0, np.array([1.0, 1024.0])) for s in (uneven, even))
    # (a few tokens round to the same count, and a table holds its time below its smallest one)
    assert np.all(a.body >= b.body) and np.all(a.comm >= b.comm)
    assert a.body[-1] > b.body[-1] and a.comm[-1] > b.comm[-1]
    assert np.array_equal(a.head, b.head) and np.array_equal(a.core_decode, b.core_decode)


def test_kv_transfer_over_the_link_the_pools_span() -> None:
    """llama-3-8b's 4096-token prompt on one TP1 GPU: 4096 x 2 x 32 layers x 8 heads x 128 x 2 B
    = 512 MiB; inside one node over NVLink, across nodes at one NIC's 47 GB/s (dgx-h100's
    profile: 50 GB/s x 0.94) after NCCL's 8.4 us per call and the network's 9.6 us a step."""
    token = 2 * 32 * 8 * 128 * 2
    size = 4096 * token
    assert (link_of(DGX, 8), link_of(DGX, 16)) == ("nvlink", "network")
    net = transfer_seconds(DGX, 16, 4096, token)
    assert net == pytest.approx(8.4e-6 + 9.6e-6 + size / (50e9 * 0.94), rel=1e-9)
    assert transfer_seconds(DGX, 8, 4096, token) < net / 5


def test_prefill_capacity_and_decode_rate_from_the_step() -> None:
    """A prefill engine's capacity is B / P prompts per full step of B tokens; a decode engine's
    rate is c / TPOT(c), TPOT a step of c decoders and no chunk."""
    shard = ExpertShard(LLAMA, 1, 1, "bf16", Widths(), KERNELS["flash"], "absorbed")
    w = Workload(fixed(1024), fixed(256))
    lay = engine_layout(shard, DGX, w, ENGINE, (8192,), (64,))
    side = prefill_side(lay, DGX, 8, 8192, w, ENGINE)
    t = lay.times
    core = 8 * float(t.prompt_core(np.array([1024.0]))[0])  # 8 prompts of 1024 in a step of 8192
    full = t.step(np.zeros(1), np.full(1, 8192.0), np.full(1, core), np.full(1, 8.0))[0]
    assert side.capacity == pytest.approx(8 / full)
    step = t.step(np.full(1, 64.0), np.zeros(1), np.zeros(1), np.full(1, 64.0))[0]
    assert decode_tokens_per_s(lay, 64) == pytest.approx(64 / step)


def test_disaggregated_rows_balance_the_pools() -> None:
    """Every xPyD row serves at most what its slower pool sustains, over all the GPUs of both;
    its TPOT is one number (no chunk beside); the ranking holds both modes."""
    w = Workload(fixed(1024), fixed(256))
    r = search_all(LLAMA, DGX, 8, w, batches=(32, 128), targets=Targets(1.0, 0.05))
    dis = [d for d in r.deployments if isinstance(d, Disaggregated)]
    assert dis and any(d.mode == "aggregated" for d in r.deployments)
    assert {d.bound for d in dis} >= {"decode", "prefill"}
    for d in dis[:20]:
        assert d.gpus == 8 and len(set(d.tpot.values())) == 1
        lay = engine_layout(ExpertShard(LLAMA, d.decode.tp, 1, "bf16", Widths(), KERNELS["flash"],
                                        r.mla), DGX, w, ENGINE, (8192,), (32, 128))
        decode = d.decode.engines * decode_tokens_per_s(lay, d.decode.max_batch) / 255 * 256
        assert d.tokens_per_s_per_gpu * 8 <= decode * (1 + 1e-6)
        assert d.ttft[50] > d.transfer_s > 0


def test_cli_json_mode_column_and_bad_input() -> None:
    got = runner.invoke(app, ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "4", "--seq", "512",
                              "--output-tokens", "128", "-b", "64", "--disaggregated", "-f", "json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert out["modes"] == ["aggregated", "disaggregated"]
    modes = {d["mode"] for d in out["ranked"]}
    assert "aggregated" in modes and any(m.startswith("disaggregated ") for m in modes)
    for extra, line in ((["--redundant-experts", "-1"], "--redundant-experts: must be at least 0"),
                        (["--redundant-experts", "8"], "--redundant-experts: llama-3-8b has no routed")):
        bad = runner.invoke(app, ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "4", "--seq",
                                  "512", "--output-tokens", "128", *extra])
        assert bad.exit_code == 2 and line in bad.output


def _check() -> ModuleType:
    path = ROOT / "bench" / "disagg_check.py"
    spec = importlib.util.spec_from_file_location("disagg_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_sglang_96_h100_figures_as_we_get_them() -> None:
    """SGLang's published DeepSeek-V3 pools (LMSYS blog 2025-05-05) beside ours: we are slower
    by 57-59% in prefill and 63% in decode (docs/serving.md says why: vLLM's fused-MoE tables
    against DeepGEMM, no two-batch overlap, every top_k copy sent). Held, not tuned: a change
    that moves an error by more than 3 points must update the docs' table."""
    errors = [e for _, _, e in _check().rows()]
    assert [round(100 * e) for e in errors] == pytest.approx([-59, -58, -57, -63], abs=3)
    assert math.isclose(float(np.median(np.abs(errors))), 0.58, abs_tol=0.03)
