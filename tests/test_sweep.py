"""Sweeps: axes, values against the exact integer path and by hand, speed, tables and plots."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.studies.attention_variants import with_kv_heads
from costmodel.studies.sweep import Axis, parse_axis, sweep

runner = CliRunner()
H100 = load_hardware("h100-sxm")


def test_parse_axis():
    assert parse_axis("seq=512:131072").values.tolist() == [2**i for i in range(9, 18)]
    assert parse_axis("seq=500:3000").values.tolist() == [500, 1000, 2000, 3000]
    assert parse_axis("batch=1,64,8").values.tolist() == [1, 8, 64]
    assert parse_axis("batch=1:100:3").values.tolist() == [1, 10, 100]


@pytest.mark.parametrize("text, message", [
    ("tokens=1:2",
     "--over: 'tokens=1:2': expected NAME=START:STOP[:POINTS] or NAME=A,B,C with NAME one of seq, batch"),
    ("seq=9:3", "--over seq: need 1 <= START <= STOP (got 9:3)"),
    ("seq=a:b", "--over seq: 'a:b' is not START:STOP[:POINTS] nor a list of integers"),
    ("batch=0,4", "--over batch: values must be at least 1 (got 0)"),
])
def test_bad_axis_is_one_line(text, message):
    with pytest.raises(AnalysisError) as e:
        parse_axis(text)
    assert str(e.value) == message
    result = runner.invoke(app, ["sweep", "gpt2-small", "--over", text])
    assert result.exit_code == 2 and result.output == f"error: {message}\n"


@pytest.mark.parametrize("name", ["gemma-2-9b", "t5-11b", "gpt2-small"])
@pytest.mark.parametrize("quantity", ["intensity", "kv_cache", "roofline"])
def test_sweep_equals_the_exact_path(name, quantity):
    """Lambdified float64 values agree with analyze's integers at corners and inside the grid."""
    spec = catalog.load(name)
    sw = sweep(spec, quantity, [parse_axis("seq=16:1000:13"), parse_axis("batch=1,7,256")], H100)
    for s in sw.series:
        variant = with_kv_heads(spec, s.kv_heads)
        for i, j in ((0, 0), (6, 1), (-1, -1)):
            t = analyze(variant, s.phase, batch=int(s.batch[j]), seq=int(s.seq[i])).total()
            exact = {"intensity": t.flops / t.bytes_fused, "kv_cache": t.kv_cache,
                     "roofline": max(t.flops / H100.peak("bf16"),
                                 t.bytes_fused / H100.memory_bandwidth)}[quantity]
            assert s.values[i, j] == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("name, hardware, dtype", [
    ("llama-3-8b", "h200", "bf16"), ("deepseek-v2-lite", "h100-sxm", "bf16"),
    ("mixtral-8x7b", "h100-sxm", "fp8"), ("t5-11b", "a100-80gb", "bf16")])
def test_a_swept_time_is_what_predict_times_at_each_point(name, hardware, dtype):
    """On a profile with measured tables a swept time is the calibrated model's (``predict`` of
    ``analyze`` at that point, the device's default kernels), an FP8 checkpoint's bf16 head
    included; the roofline is its lower bound."""
    from costmodel.runtime.kernels import KERNELS
    from costmodel.runtime.timing import predict
    from costmodel.studies.attention_variants import kv_head_variants

    spec, hw = catalog.load(name), load_hardware(hardware)
    axes = [parse_axis(f"seq=64:{min(4096, spec.max_seq_len)}:5"), parse_axis("batch=1,3,32")]
    phases = ["prefill", "decode", "train"] if dtype == "bf16" else ["prefill", "decode"]
    sw = sweep(spec, "time", axes, hw, dtype=dtype, phases=phases)
    assert sw.timed == "calibrated" and sw.reads.errors
    variants = {v.label: v for v in kv_head_variants(spec)}
    for s in sw.series:
        v = variants[s.variant]
        for i, j in ((0, 0), (2, 1), (-1, -1)):
            a = analyze(v.spec, s.phase, batch=int(s.batch[j]), seq=int(s.seq[i]), dtype=dtype, mla=v.mla)
            # (at fp8 the grid counts the bf16 head's activations at 2 bytes, the analysis at 1)
            rel = 1e-9 if dtype == "bf16" else 1e-3
            assert s.values[i, j] == pytest.approx(predict(a, hw, KERNELS["flash"]).time_s, rel=rel)
    roof = sweep(spec, "roofline", axes, hw, dtype=dtype, phases=phases)
    for s, r in zip(sw.series, roof.series, strict=True):
        assert (s.values >= r.values * (1 - 1e-12)).all()


def test_a_time_without_tables_is_the_roofline_and_says_so():
    spec, a100, over = catalog.load("llama-3-8b"), load_hardware("a100-80gb"), [parse_axis("batch=1,8")]
    sw = sweep(spec, "time", over, a100, dtype="fp32")
    assert sw.timed == "roofline: a100-80gb has no efficiency tables for fp32"
    roof = sweep(spec, "roofline", over, a100, dtype="fp32")
    assert all((a.values == b.values).all() for a, b in zip(sw.series, roof.series, strict=True))
    out = runner.invoke(app, ["sweep", "llama-3-8b", "--over", "batch=1,8", "-q", "time",
                              "--hardware", "a100-80gb", "--dtype", "fp32"])
    assert out.exit_code == 0 and "time: roofline: a100-80gb has no efficiency tables for fp32" in out.output
    bad = runner.invoke(app, ["sweep", "llama-3-8b", "--over", "batch=1,8", "--kernels", "eager"])
    assert bad.exit_code == 2
    assert bad.output == "error: --kernels: the kernels a time assumes; give --quantity time\n"
    args = ["sweep", "llama-3-8b", "--over", "batch=1,8", "-q", "time", "--kernels", "eager", "-f", "json"]
    data = json.loads(runner.invoke(app, [*args, "--hardware", "h100-sxm"]).output)
    assert data["time_model"] == "calibrated" and data["kernels"]["name"] == "eager"
    assert "gemm/bf16" in data["errors"]
    l4 = json.loads(runner.invoke(app, [*args, "--hardware", "l4"]).output)  # datasheet tables, none measured
    assert l4["time_model"] == "calibrated" and l4["errors"] == {}


def test_kv_cache_sweep_by_hand():
    """llama-2-7b MHA decode with 4095 cached tokens (C = 4096), batch 2: 2 x 512 KiB x 4096 = 4 GiB."""
    sw = sweep(catalog.load("llama-2-7b"), "kv_cache", [parse_axis("seq=1023,4095"), parse_axis("batch=2")],
               H100, phases=["decode"])
    assert sw.series[0].values[:, 0].tolist() == [2 * 524_288 * 1024, 4 * 2**30]


def test_ten_thousand_points_are_vectorised(monkeypatch):
    """100 x 100 (seq, batch) points of three variants in two phases: 60,000 values from one
    lambdified expression per variant and phase, not from 60,000 calls of analyze (the speed
    itself is measured by bench/sweep_speed.py, not asserted here)."""
    import costmodel.studies.sweep as sweep_module

    calls = []
    real = sweep_module.analyze
    monkeypatch.setattr(sweep_module, "analyze", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    spec = catalog.load("llama-3-8b")
    axes = [Axis("seq", np.unique(np.rint(np.geomspace(512, 131072, 100)).astype(np.int64))),
            Axis("batch", np.arange(1, 101, dtype=np.int64))]
    sw = sweep(spec, "time", axes, H100)
    assert sw.points == 6 * 100 * 100
    assert len(calls) <= 6  # at most one exact cross-check per variant and phase


def test_learned_positions_bound_the_sweep():
    result = runner.invoke(app, ["sweep", "gpt2-small", "--over", "seq=512:2048"])
    assert result.exit_code == 2
    assert result.output == ("error: seq: prefill attends to 2048 positions, "
                             "beyond the 1024 learned positions of gpt2-small\n")


def test_readme_sweep_example_table():
    result = runner.invoke(app, ["sweep", "llama-3-8b", "--over", "seq=512:131072"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "MHA k=32 prefill" in result.output and "MQA k=1 decode" in result.output
    assert any(line.split()[:1] == ["131072"] for line in lines)


def test_readme_sweep_csv_example():
    result = runner.invoke(app, ["sweep", "llama-3-8b", "--over", "seq=512:131072:100", "--over",
                                 "batch=1:100:100", "-f", "csv"])
    assert result.exit_code == 0, result.output
    batches = len(set(np.rint(np.geomspace(1, 100, 100)).tolist()))  # 100 points rounded: repeats merge
    assert len(result.stdout.splitlines()) == 1 + 3 * 2 * 100 * batches  # stderr: the RoPE warning


def test_sweep_json_and_csv():
    data = json.loads(runner.invoke(app, ["sweep", "mistral-7b", "-q", "kv_cache", "--over", "batch=1,2",
                                          "-f", "json"]).output)
    (series,) = [s for s in data["series"] if s["kv_heads"] == 8]
    # decode at the default 2047 cached tokens: C = 2048 < w = 4096, so every token is kept
    assert series["phase"] == "decode" and series["seq"] == [2047]
    assert series["values"] == [[2 * 32 * 8 * 128 * 2 * 2048, 2 * 2 * 32 * 8 * 128 * 2 * 2048]]
    csv_out = runner.invoke(app, ["sweep", "mistral-7b", "--over", "batch=1,2", "-f", "csv"]).output
    assert csv_out.splitlines()[0] == "seq,batch,variant,kv_heads,phase,intensity"
    assert len(csv_out.splitlines()) == 1 + 2 * 3 * 2


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["--over", "seq=512:131072", "--over", "batch=1:256", "--quantity", "intensity"],
    ["--over", "seq=512:131072", "-q", "kv_cache"],
    ["--over", "batch=1:64", "-q", "time", "--hardware", "h200"],
])
def test_readme_sweep_plot_examples(tmp_path, args):
    pytest.importorskip("vl_convert", reason="the plot extra rasterises the SVG into a PNG")
    out = tmp_path / "chart.png"
    result = runner.invoke(app, ["sweep", "llama-3-8b", *args, "--plot", str(out), "-f", "csv"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def test_png_without_the_plot_extra_is_one_line_and_svg_needs_none(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vl_convert", None)  # import vl_convert raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # nor is matplotlib used
    result = runner.invoke(app, ["sweep", "gpt2-small", "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert result.output == ("error: --plot: PNG needs vl-convert-python: install it with pip install "
                             "'costmodel[plot]', or give a name ending in .svg\n")
    assert list(tmp_path.iterdir()) == []
    result = runner.invoke(app, ["sweep", "gpt2-small", "--plot", str(tmp_path / "x.svg")])
    assert result.exit_code == 0 and (tmp_path / "x.svg").read_text().startswith("<?xml")


def test_a_component_without_bytes_has_null_intensity_in_json() -> None:
    """The softmax inside flash attention moves no bytes of its own at the fused bound: its
    intensity is infinite, which JSON cannot hold; it was an internal error, now null."""
    result = CliRunner().invoke(app, ["sweep", "gpt2-small", "-c", "layers/attention/softmax",
                                      "--over", "seq=256:512", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["series"][0]["values"] == [[None], [None]] and "null" in data
    whole = json.loads(CliRunner().invoke(app, ["sweep", "gpt2-small", "--over", "seq=256:512",
                                                "-f", "json"]).stdout)
    assert all(v[0] > 0 for v in whole["series"][0]["values"])  # finite values stay numbers
