"""`costmodel inference`: TTFT, TPOT, latency and throughput from the time model; the examples
of docs/time.md; bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.runtime.serving import HEAD, parse_batches, serve
from costmodel.runtime.timing import Kernels, predict

runner = CliRunner()


def roofline_h100():
    """The H100 datasheet profile without its efficiency tables: the serving arithmetic below is
    hand-derived from the roofline."""
    return load_hardware("h100-sxm").model_copy(update={"efficiency": None})


def test_ttft_is_the_prefill_with_the_head_over_the_last_position_only() -> None:
    spec, hw = catalog.load("llama-2-7b"), roofline_h100()
    # eager kernels (the test is the head's, and their roofline counts every FLOP)
    sv = serve(spec, hw, prompt=512, output=2, batches=(4,), all_logits=True, kernels=Kernels())
    pre = analyze(spec, "prefill", batch=4, seq=512)
    assert sv.points[0].ttft_s == predict(pre, hw).time_s
    # last position only: the roofline of the prefill without its head, plus the head over B rows
    # (the head of a decode step: 4 rows, the same weights)
    sv_last = serve(spec, hw, prompt=512, output=2, batches=(4,), kernels=Kernels())
    kept = [r for r in pre.rows if r.path not in HEAD]
    body = max(sum(r.flops for r in kept) / hw.peak("bf16"),
               sum(r.bytes_unfused for r in kept) / hw.memory_bandwidth)
    dec = analyze(spec, "decode", batch=4, seq=512)
    head = dec.total("lm_head")
    head_t = max(head.flops / hw.peak("bf16"), head.bytes_unfused / hw.memory_bandwidth)
    assert sv_last.points[0].ttft_s == pytest.approx(body + head_t)
    assert sv_last.points[0].ttft_s < sv.points[0].ttft_s


def test_tpot_grows_with_the_context_and_latency_adds_up() -> None:
    spec, hw = catalog.load("llama-2-7b"), roofline_h100()
    P, O, B = 1000, 300, 8
    p = serve(spec, hw, prompt=P, output=O, batches=(B,)).points[0]
    first = predict(analyze(spec, "decode", batch=B, seq=P), hw).time_s  # step 1: P cached
    last = predict(analyze(spec, "decode", batch=B, seq=P + O - 2), hw).time_s
    assert p.tpot_first_s == first and p.tpot_last_s == last and first < p.tpot_s < last
    # the roofline's decode time is linear in the context here, so the mean is the midpoint
    assert p.tpot_s == pytest.approx((first + last) / 2, rel=1e-9)
    assert p.latency_s == pytest.approx(p.ttft_s + (O - 1) * p.tpot_s)
    assert p.tokens_per_s == pytest.approx(B * O / p.latency_s)


def test_one_output_token_is_the_prefill_alone() -> None:
    p = serve(catalog.load("gpt2-small"), load_hardware("a100-80gb"), 100, 1, (1,)).points[0]
    assert p.tpot_s is None and p.latency_s == p.ttft_s


def test_parse_batches() -> None:
    assert parse_batches("1,8,64") == (1, 8, 64)
    for bad in ("1,0,8", "a,b", "-1"):
        with pytest.raises(AnalysisError, match="batch"):
            parse_batches(bad)


# --- docs/time.md's examples -----------------------------------------------------------------


def test_readme_inference_example() -> None:
    result = runner.invoke(app, ["inference", "llama-3-8b", "--hardware", "h100-sxm", "--seq", "2048",
                                 "--output-tokens", "256", "--batch", "1,8,64"])
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output and "last position only" in result.output
    assert "no efficiency tables" not in result.output  # the datasheet profiles carry tables (bf16)


def test_readme_inference_json() -> None:
    result = runner.invoke(app, ["inference", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1,8",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [b["batch"] for b in data["batches"]] == [1, 8]
    for b in data["batches"]:
        assert {"ttft_s", "tpot_s", "tokens_per_s", "latency_s", "fits"} <= set(b)
    assert data["batches"][1]["tokens_per_s"] > data["batches"][0]["tokens_per_s"]


@pytest.mark.parametrize("args, message", [
    (["--batch", "1,0,8"], "batch: every batch size must be at least 1"),
    (["--batch", "x"], "batch:"),
    (["--output-tokens", "0"], "output:"),
    (["--hardware", "nope"], "hardware nope"),
])
def test_inference_bad_input_is_one_line_and_exit_2(args, message) -> None:
    base = ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--output-tokens", "8"]
    result = runner.invoke(app, base + args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


# --- latent attention in either convention (--mla) ------------------------------------------------


def test_mla_convention_sets_the_serving_times_not_the_cache() -> None:
    """DeepSeek-V3 served from a 32k prompt (roofline): each phase is the analysis in the chosen
    convention; absorbed decode skips re-expanding 32k latents through kv_b (TPOT far lower),
    absorbed prefill pays 2h(2 r_kv + d_r) FLOPs a pair instead of 2h(d_n + d_r + d_v) (TTFT
    higher); the cache, and so what fits, is the latent in both."""
    spec, hw = catalog.load("deepseek-v3"), roofline_h100()
    P, O, B = 32768, 2, 4
    points = {mla: serve(spec, hw, P, O, (B,), all_logits=True, mla=mla).points[0] for mla in ("naive",
                                                                                               "absorbed")}
    for mla, p in points.items():
        assert p.tpot_first_s == predict(analyze(spec, "decode", batch=B, seq=P, mla=mla), hw).time_s
        assert p.ttft_s == predict(analyze(spec, "prefill", batch=B, seq=P, mla=mla), hw).time_s
    naive, absorbed = points["naive"], points["absorbed"]
    assert absorbed.tpot_s < naive.tpot_s / 5 and absorbed.ttft_s > naive.ttft_s
    assert absorbed.fits == naive.fits
    kv = {mla: analyze(spec, "decode", batch=B, seq=P, mla=mla).total().kv_cache for mla in points}
    assert kv["naive"] == kv["absorbed"] == B * (P + 1) * 576 * 61 * 2


def test_calibrated_time_uses_the_analysis_convention() -> None:
    """With efficiency tables every gemm is timed at its shape: the absorbed decode step times
    the absorbed kv_b products (query tokens only), not the naive ones over the whole context."""
    spec, hw = catalog.load("deepseek-v3"), load_hardware("h100-sxm")
    a = {mla: analyze(spec, "decode", batch=8, seq=32768, mla=mla) for mla in ("naive", "absorbed")}
    p = {mla: predict(a[mla], hw) for mla in a}
    assert p["naive"].calibrated and p["absorbed"].calibrated
    kv_b = {mla: sum(r.time_s for r in p[mla].rows if r.path.endswith("attention/kv_b")) for mla in p}
    assert kv_b["absorbed"] < kv_b["naive"] / 100
    assert p["absorbed"].time_s < p["naive"].time_s


def test_inference_mla_option() -> None:
    """`inference --mla absorbed` runs latent attention absorbed and says so (table and JSON);
    absorbed is a GPU's default; a spec without latent attention has no such key."""
    base = ["inference", "deepseek-v2-lite", "--hardware", "h100-sxm", "--seq", "4096",
            "--output-tokens", "16", "--batch", "1,8"]
    out = {mla: runner.invoke(app, [*base, "--mla", mla, "--format", "json"]) for mla in ("naive",
                                                                                          "absorbed")}
    for mla, result in out.items():
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["mla_convention"] == mla
    data = {mla: json.loads(r.output) for mla, r in out.items()}
    assert data["absorbed"]["batches"][1]["tpot_s"] < data["naive"]["batches"][1]["tpot_s"]
    assert json.loads(runner.invoke(app, [*base, "--format", "json"]).output)["mla_convention"] == "absorbed"
    table = runner.invoke(app, [*base, "--mla", "absorbed"])
    assert table.exit_code == 0 and "latent attention: absorbed" in table.output
    dense = runner.invoke(app, ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64",
                                "--output-tokens", "4",
                                "--format", "json"])
    assert "mla_convention" not in json.loads(dense.output)
    bad = runner.invoke(app, [*base, "--mla", "fused"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
