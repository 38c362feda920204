"""`costmodel deploy` (issue 24): the workload at the edge, the engine's pages counted by hand, the
steady state against `inference` at one request, and the search's ranking, front and exits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.deploy.engine import Engine, engine_memory
from costmodel.deploy.search import Targets, search
from costmodel.deploy.step import Shard, step_times
from costmodel.deploy.workload import Workload, fixed, parse_lengths
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import load_cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS
from costmodel.runtime.serving import serve

runner = CliRunner()
LLAMA = catalog.load("llama-3-8b")
DGX = load_cluster("dgx-h100")


def test_pages_bound_the_concurrency_by_hand() -> None:
    """llama-3-8b on one h100-sxm, bf16, pages of 16 tokens, 0.9 of 80 GB, 8192-token budget."""
    shard = Shard(LLAMA, 1, 1, "bf16", Widths(), KERNELS["flash"], "absorbed")
    m = engine_memory(shard, 80e9, Engine(16, 0.9, 256, 8192), Workload(fixed(1024), fixed(1024)))
    weights = 8_030_261_248 * 2  # parameters x bf16
    # The activations' peak of one 8192-token step: the FFN's, the residual stream and the
    # normalised input (2 x 8192 x 4096) and SwiGLU's gate, up and product (3 x 8192 x 14336), bf16.
    ffn = 2 * (2 * 8192 * 4096) + 2 * (3 * 8192 * 14336)
    page = 16 * 2 * 32 * 8 * 128 * 2  # tokens x (K, V) x layers x kv heads x d_h x bf16 = 2 MiB
    free = int(0.9 * 80e9) - weights - ffn
    assert (m.weights, m.activations, m.page_bytes) == (weights, ffn, page)
    assert m.pages == free // page == 26_274
    assert m.pages_per_request == 2048 // 16
    assert m.max_running == 26_274 // 128 == 205
    # the search runs no more than that many: max batch 256 leaves 51 queued
    r = search(LLAMA, DGX, 1, Workload(fixed(1024), fixed(1024)), batches=(256,))
    d = r.deployments[0]
    assert d.running == 205 and d.concurrency == 256


def test_one_request_is_inference_at_batch_1() -> None:
    """At concurrency 1 a request prefills its whole prompt in one step (2048 <= the budget),
    then decodes alone: inference's TTFT to the float, its TPOT to the difference between the
    mean context (ours) and the mean over the steps' contexts (inference's trapezoid)."""
    r = search(LLAMA, DGX, 1, Workload(fixed(2048), fixed(256), concurrency=1), batches=(1,))
    d = r.deployments[0]
    sv = serve(LLAMA, DGX.hardware, 2048, 256, (1,)).points[0]
    assert d.ttft_mean == pytest.approx(sv.ttft_s, rel=1e-9)
    assert sv.tpot_s is not None and d.tpot_mean == pytest.approx(sv.tpot_s, rel=1e-4)
    assert d.tokens_per_s_per_gpu == pytest.approx(256 / (sv.ttft_s + 255 * sv.tpot_s), rel=1e-4)


def test_tpot_rises_with_concurrency_and_throughput_with_it() -> None:
    r = search(LLAMA, DGX, 1, Workload(fixed(1024), fixed(512)), batches=(1, 4, 16, 64, 128))
    by = sorted(r.deployments, key=lambda d: d.max_batch)
    tpot = [d.tpot_mean for d in by]
    gpu = [d.tokens_per_s_per_gpu for d in by]
    assert tpot == sorted(tpot) and len(set(tpot)) == len(tpot)
    assert gpu == sorted(gpu)


def test_a_step_never_beats_physics() -> None:
    shard = Shard(LLAMA, 1, 1, "bf16", Widths(), KERNELS["flash"], "absorbed")
    t = step_times(shard, DGX, 8192, 1500.0, np.array([1.0, 1024.0]))
    n = np.array([1.0, 8.0, 64.0, 256.0])
    got = t.step(n, np.zeros(4), np.zeros(4), n)
    assert all(g >= t.floor(float(x), 0.0) for g, x in zip(got, n, strict=True))
    assert got[0] >= 16_060_522_496 / DGX.hardware.memory_bandwidth  # the weights, read once


def test_lengths() -> None:
    assert parse_lengths("1024", "--seq").values == (1024,)
    u = parse_lengths("1..100", "--seq")
    assert (u.mean, u.quantile(0.5), u.quantile(0.9), u.quantile(0.99)) == (50.5, 50, 90, 99)


def test_histogram_files(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("length,weight\n100,3\n300,1\n")
    (tmp_path / "h.json").write_text(json.dumps({"100": 3, "300": 1}))
    for name in ("h.csv", "h.json"):
        h = parse_lengths(str(tmp_path / name), "--seq")
        assert h.values == (100, 300) and h.weights == (0.75, 0.25) and h.mean == 150
        assert (h.quantile(0.5), h.quantile(0.75), h.quantile(0.9)) == (100, 100, 300)
    (tmp_path / "bad.csv").write_text("a,b,c\nx,y,z\n")
    with pytest.raises(AnalysisError, match=r"^--output-tokens: .*bad.csv: not a histogram"):
        parse_lengths(str(tmp_path / "bad.csv"), "--output-tokens")


@pytest.mark.parametrize("extra,line", [
    (["--seq", "8000", "--output-tokens", "1024"], r"error: --seq and --output-tokens: .* past llama-3-8b's"),
    (["--seq", "128", "--output-tokens", "128", "--rate", "0"], r"error: --rate: must be a finite number"),
    (["--seq", "128", "--output-tokens", "128", "--rate", "-2"], r"error: --rate: must be a finite number"),
    (["--seq", "0..10", "--output-tokens", "128"], r"error: --seq: every length must be at least 1"),
    (["--seq", "lots", "--output-tokens", "128"], r"error: --seq: 'lots' is not a length"),
    (["--seq", "128", "--output-tokens", "128", "--concurrency", "0"], r"error: --concurrency: must be"),
])
def test_bad_input_is_one_line_exit_2(extra: list[str], line: str) -> None:
    result = runner.invoke(app, ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "1", *extra])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1
    import re

    assert re.match(line, result.stderr), result.stderr


def test_an_sla_nothing_meets_shows_the_closest_exit_1() -> None:
    result = runner.invoke(app, ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "2", "--seq",
                                 "1024", "--output-tokens", "128", "--tpot", "0.0001", "-b", "1,8",
                                 "-f", "json"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: no deployment meets TPOT p90 <= 0.0001 s; the closest are shown"
    data = json.loads(result.stdout)
    assert data["meeting"] == 0 and data["closest"] and data["ranked"] == []


def test_json_ranked_front_and_cost() -> None:
    result = runner.invoke(app, ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "4", "--seq",
                                 "512..1536", "--output-tokens", "256", "--ttft", "0.5", "--tpot", "0.05",
                                 "--price", "2", "-b", "8,64,256", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    data = json.loads(result.stdout)
    ranked = data["ranked"]
    assert ranked and all(d["ttft_s"]["p90"] <= 0.5 and d["tpot_s"]["p90"] <= 0.05 for d in ranked)
    per_gpu = [d["output_tokens_per_s_per_gpu"] for d in ranked]
    assert per_gpu == sorted(per_gpu, reverse=True)
    d = ranked[0]
    assert isinstance(d["tp"], int) and isinstance(d["memory_per_gpu"]["pages"], int)
    assert d["cost_per_million_output_tokens"] == pytest.approx(2 / 3600 / per_gpu[0] * 1e6)
    assert d["ttft_s"]["p50"] <= d["ttft_s"]["p90"] <= d["ttft_s"]["p99"]  # prompts of 512..1536
    front = data["front"]
    for a in front:  # nothing in the front is beaten on both axes by any deployment
        gpu, user = a["output_tokens_per_s_per_gpu"], a["output_tokens_per_s_per_user"]
        assert not any(b["output_tokens_per_s_per_gpu"] > gpu and b["output_tokens_per_s_per_user"] > user
                       for b in ranked)


def test_open_loop_queues_and_overloads() -> None:
    low = search(LLAMA, DGX, 1, Workload(fixed(1024), fixed(256), rate=0.5), batches=(64,)).deployments[0]
    high = search(LLAMA, DGX, 1, Workload(fixed(1024), fixed(256), rate=1e4), batches=(64,)).deployments[0]
    assert low.stable and low.running < 2 and low.tokens_per_s_per_gpu == pytest.approx(0.5 * 256)
    assert not high.stable and math.isinf(high.ttft[90])


def test_moe_searches_expert_parallel_layouts() -> None:
    spec = catalog.load("qwen3-30b-a3b")
    r = search(spec, DGX, 4, Workload(fixed(1024), fixed(256)), batches=(64,), targets=Targets(tpot=1.0))
    assert {"TP1 EP4", "TP2 EP2", "TP4"} <= set(r.layouts)
    assert any(d.ep > 1 for d in r.deployments)


def test_the_serving_engine_preset_and_its_overrides() -> None:
    """--engine trtllm: TensorRT-LLM's pages of 32 tokens, its free-memory rule, whole prompts, an
    fp8 cache read at the bf16 kernel's bandwidth (decode faster than vLLM's measured fp8 kernel);
    --block-size overrides the preset's page."""
    base = ["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "1", "--seq", "1024",
            "--output-tokens", "256", "-b", "64", "--kv-dtype", "fp8", "-f", "json"]

    def best(*extra: str) -> dict:  # type: ignore[type-arg]
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        return dict(data["ranked"][0], engine=data["engine"])

    vllm, trt, trt16 = best(), best("--engine", "trtllm"), best("--engine", "trtllm", "--block-size", "16")
    assert vllm["memory_per_gpu"]["page_bytes"] * 2 == trt["memory_per_gpu"]["page_bytes"]
    assert trt16["memory_per_gpu"]["page_bytes"] == vllm["memory_per_gpu"]["page_bytes"]
    assert trt["tpot_s"]["mean"] < vllm["tpot_s"]["mean"]
    # TensorRT-LLM's cache is 0.9 of what the weights and activations leave of the device; vLLM's
    # what they leave of 0.9 of it (h100-sxm: 80e9 bytes), each in whole pages
    for d, rule in ((vllm, lambda w: 0.9 * 80e9 - w), (trt, lambda w: 0.9 * (80e9 - w))):
        mem = d["memory_per_gpu"]
        cache = rule(mem["weights"] + mem["activations"])
        assert cache - mem["page_bytes"] < mem["kv_cache"] <= cache
    assert (vllm["engine"]["engine"], trt["engine"]["engine"]) == ("vllm", "trtllm")
    assert trt["engine"]["chunked_prefill"] is False and trt["engine"]["fp8_cache_read"] == "bf16-rate"
    assert (vllm["engine"]["kernel_framework"], trt["engine"]["kernel_framework"]) == (None, "trtllm")
