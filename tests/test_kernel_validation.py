"""bench/kernel_validation.py: the cross-validation of the measured kernel tables (issue 21).

The page's tables are what the script computes now (regenerate, never hand-edit); the issue's
targets hold where docs/gpu-time.md says they do, and the misses are the documented ones; the
left-out machinery is exact where log-log interpolation must be; the GEMMs a Llama step asks
for lie inside the grid but the LM head's."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from costmodel.devices.kernels import Grid, kernels_root, load_kernels

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    path = ROOT / "bench" / "kernel_validation.py"
    spec = importlib.util.spec_from_file_location("kernel_validation", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


kv = _script()

HOPPER_ON = ("h100-sxm", "h200", "b200")


def test_the_page_holds_what_the_script_computes() -> None:
    page = (ROOT / "docs" / "gpu-time.md").read_text()
    assert kv.generated(page) == kv.markdown(), (
        "docs/gpu-time.md is stale: python bench/kernel_validation.py --write"
    )


def rows(gpu: str, op: str) -> dict[str, object]:
    return {r.against.split()[0]: r.stats for r in kv.against_framework(gpu) if r.op == op}


# --- the targets: median <= 10% (attention 15%), worst within 2x -----------------------


@pytest.mark.parametrize("gpu", kv.GPUS)
def test_bf16_gemms_meet_the_median_target_against_both_other_frameworks(gpu) -> None:
    got = rows(gpu, "gemm/bf16")
    assert set(got) == {"sglang", "trtllm"}
    for framework, s in got.items():
        assert s.points >= 400 and s.median <= 0.10, (gpu, framework, s)


def test_bf16_gemms_meet_the_median_and_the_envelope_bounds_the_worst() -> None:
    """Every bf16 median within 10%; the worst within 2x on H100, within 2.6x where the time
    envelope lowers a wave step below its measurement (docs/gpu-time.md: A100's M = 769, H200,
    B200)."""
    for gpu in kv.GPUS:
        for framework, s in rows(gpu, "gemm/bf16").items():
            assert s.median <= 0.10, (gpu, framework, s)
            assert s.worst <= (2 if gpu == "h100-sxm" else 2.6), (gpu, framework, s)


@pytest.mark.parametrize("gpu", HOPPER_ON)
def test_attention_against_sglang_on_hopper_and_blackwell_is_within_the_medians_reach(gpu) -> None:
    """SGLang runs the same kernels as vLLM there (FA3; TRT-LLM's MHA on B200): the median meets
    15%, but H200's decode at 15.0% and B200's at 16.2%, the frameworks' own disagreement on the
    very shapes (13.9%, 13.1%) plus the lookup's share."""
    for op in ("attention/prefill", "attention/decode"):
        s = rows(gpu, op)["sglang"]
        if (gpu, op) in (("h200", "attention/decode"), ("b200", "attention/decode")):
            assert 0.15 < s.median < 0.17
        else:
            assert s.median <= 0.15, (gpu, op, s)


def test_where_a_median_target_is_missed_the_frameworks_disagree_on_the_very_shapes() -> None:
    """Every row: the lookup's median is within 4 percentage points of the two frameworks'
    disagreement on the shapes the table measured itself (no lookup involved); a miss is theirs,
    not the interpolation's."""
    for gpu in kv.GPUS:
        for r in kv.against_framework(gpu):
            assert r.same is not None and r.same.points >= 100, r
            assert r.stats.median <= r.same.median + 0.04, r
            if r.stats.median > kv.target(r.op):
                assert r.same.median > kv.target(r.op) - 0.02, r


def test_the_documented_misses_are_the_computed_ones() -> None:
    """The rows of docs/gpu-time.md's holdout table whose target is missed are exactly those the
    page's "Where the targets are missed" section explains, by op class and framework."""
    missed = {
        (r.op, r.against.split()[0])
        for gpu in kv.GPUS
        for r in kv.against_framework(gpu)
        if not r.stats.met(r.op)
    }
    assert missed == {
        ("gemm/bf16", "sglang"),  # worst past 2x: the envelope at a wave step
        ("gemm/bf16", "trtllm"),
        ("gemm/fp8", "sglang"),
        ("gemm/fp8", "trtllm"),
        ("gemm/nvfp4", "vllm"),  # B200: FlashInfer's CuTe DSL kernel, not TRT-LLM's
        ("gemm/nvfp4", "sglang"),
        ("attention/prefill", "sglang"),
        ("attention/prefill", "trtllm"),
        ("attention/decode", "sglang"),
        ("attention/decode", "trtllm"),
    }
    page = (ROOT / "docs" / "gpu-time.md").read_text()
    section = page.split("## Where the targets are missed", 1)[1].split("\n## ", 1)[0]
    for words in ("wave", "fp8", "nvfp4", "TRT-LLM", "SGLang", "A100", "envelope"):
        assert words in section


@pytest.mark.parametrize("gpu", kv.GPUS)
def test_left_out_points_meet_the_median_target_everywhere(gpu) -> None:
    """The interpolation rule on the framework's own data: every axis, every op class, and the
    nearest-configuration rule for attention."""
    got = kv.left_out(gpu)
    assert {r.op for r in got} >= {"gemm/bf16", "attention/prefill", "attention/decode", "collectives"}
    for r in got:
        assert r.stats.points >= 80 and r.stats.median <= kv.target(r.op), r


def test_left_out_bf16_gemms_on_h100_are_within_2x() -> None:
    for r in kv.left_out("h100-sxm"):
        if r.op == "gemm/bf16":
            assert r.stats.worst <= 2, r


# --- the machinery ------------------------------------------------------------------------------


def test_a_power_law_left_out_is_predicted_exactly() -> None:
    """t = M^1.5 x N on log-spaced axes: log-log interpolation is exact, so every removed line is
    predicted to rounding, and the removed points are the odd interior lines only."""
    M, N = [1.0, 2.0, 4.0, 8.0, 16.0], [3.0, 9.0, 27.0]
    g = Grid([M, N], [m**1.5 * n for m in M for n in N], [], (1, 1), "test")
    small, lost = kv.thinned(g, 0)
    assert small.axes == [[1.0, 4.0, 16.0], N]
    assert sorted({kv.coords(g, f)[0] for f in lost}) == [2.0, 8.0]
    for f in lost:
        m, n = kv.coords(g, f)
        assert small(m, n).time_s == pytest.approx(m**1.5 * n, rel=1e-12)


def test_filled_points_are_never_truth_and_stay_filled_in_the_thinned_grid() -> None:
    M, N = [1.0, 2.0, 4.0], [1.0, 2.0]
    g = Grid([M, N], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 4], (1, 1), "test")  # (2, 1) and (4, 1)
    small, lost = kv.thinned(g, 0)
    assert lost == [3]  # (2, 2): (2, 1) was filled
    assert small.filled == frozenset({2})  # (4, 1), now the third point
    assert not small(4, 1).inside


def test_stats_read_ratios_as_the_page_says() -> None:
    s = kv.Stats.of([1.0, 1.1, 0.5, 1.2], inside=3)
    assert (s.points, s.inside) == (4, 3)
    assert s.median == pytest.approx(0.15)  # |errors| 0, 0.1, 0.2, 0.5
    assert s.p90 == pytest.approx(0.5) and s.worst == pytest.approx(2.0)
    assert s.met("attention/decode") is False and kv.Stats.of([1.05], 1).met("gemm/bf16")


# --- the shapes the model asks for --------------------------------------------------------------


def test_a_llama_3_8b_decode_step_reads_the_gemm_grid_but_for_its_lm_head() -> None:
    """d_model 4096, KV 8 x 128, d_ff 14336, vocabulary 128,256: at batch 64 every product is
    64 x K x N with K, N in 1024..14336, inside H100's grid (M 1..32768, N and K 32..65536), but
    the LM head's N = 128,256."""
    gemms = kv.model_gemms("llama-3-8b", "naive", "decode", 64, 2048)
    shapes = {leaf: (M, K, N) for leaf, _, M, K, N in gemms}
    assert shapes == {
        "q": (64, 4096, 4096),
        "k": (64, 4096, 1024),
        "v": (64, 4096, 1024),
        "out": (64, 4096, 4096),
        "gate": (64, 4096, 14336),
        "up": (64, 4096, 14336),
        "down": (64, 14336, 4096),
        "lm_head": (64, 4096, 128256),
    }
    k = load_kernels("h100-sxm")
    outside = {leaf for leaf, _, M, K, N in gemms if not k.gemm("bf16", M, N, K).inside}
    assert outside == {"lm_head"}
    c = kv.coverage("llama-3-8b", "naive", "decode", 64, 2048)
    assert c.calls == 7 * 32 + 1 and c.inside["h100-sxm"] == pytest.approx(224 / 225)
    assert 0.85 < c.time_inside["h100-sxm"] < 1 and "lm_head (N 128,256 > 65,536)" in c.outside


def test_h200_and_b200_share_h100s_gemm_axes() -> None:
    """What lets the page give the model's coverage for a100-80gb and h100-sxm alone."""
    axes = load_kernels("h100-sxm").gemms["bf16"].axes
    for gpu in ("h200", "b200"):
        assert load_kernels(gpu).gemms["bf16"].axes == axes
        assert math.isclose(load_kernels(gpu).gemms["fp8"].axes[0][-1], axes[0][-1])


def test_the_error_bands_are_what_the_validation_computes_now() -> None:
    """specs/kernels/<gpu>/errors.json, which every predicted time carries, is the validation's
    own figure (regenerate with ``python bench/kernel_validation.py --write``)."""
    for gpu in kv.GPUS:
        written = json.loads((kernels_root() / gpu / "errors.json").read_text())["bands"]
        assert written == kv.bands(gpu)
