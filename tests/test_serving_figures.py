"""The serving and attention figures (costmodel/report/serving_figures.py): the report's serving
curve and attention variants, `report --format json`, and the `--plot`s of inference, serve and
deploy. Every point and cell is checked against the library called here directly (``serve``,
``compare_kv_heads``, ``decode``, ``search``), never read back from the section under test."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.deploy.search import Targets, search
from costmodel.deploy.workload import Workload, parse_lengths
from costmodel.devices.hardware import load_hardware
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.serve import decode
from costmodel.report import html, serving_figures
from costmodel.runtime.serving import serve
from costmodel.studies.attention_variants import compare_kv_heads, compare_windows

runner = CliRunner()
POINT = re.compile(r'<circle class="point" data-label="([^"]*)" data-series="([^"]*)" data-x="([^"]+)" '
                   r'data-y="([^"]+)"')


def points(chart: str) -> dict[str, list[tuple[float, float]]]:
    """Each series' points as the chart carries them (exact, in data-x / data-y)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for _, series, x, y in POINT.findall(chart):
        out.setdefault(series.replace("&amp;", "&"), []).append((float(x), float(y)))
    return out


def test_the_fit_line_sits_between_the_batches_that_fit_and_those_that_do_not() -> None:
    spec, hw = catalog.load("llama-3-8b"), load_hardware("h100-sxm")
    sv = serve(spec, hw, 2048, 256, (64, 128, 256))  # 256 sequences of 2,304 tokens: past 80 GB
    assert [p.fits for p in sv.points] == [True, True, False]
    s = serving_figures.serving_section(sv)
    assert [r[-1] for r in s.rows] == ["yes", "yes", "no"]
    x = float(re.findall(r'<line class="limit" x1="([\d.]+)"', s.chart)[0])
    xs = {float(x): float(cx) for x, cx in re.findall(r'data-x="([\d.]+)"[^>]*cx="([\d.]+)"', s.chart)}
    assert xs[128.0] < x < xs[256.0]


def test_attention_kv_and_intensity_equal_the_attention_command() -> None:
    """Each variant's KV cache and decode intensity at context C are `costmodel attention`'s
    decode row at --seq C-1 (compare_kv_heads), and the spec's own is its windows table's."""
    spec, hw = catalog.load("llama-3-8b"), load_hardware("h100-sxm")
    kv, intensity = serving_figures.attention_sections(spec, batch=2, hw=hw)
    contexts = [256, 512, 1024, 2048, 4096, 8192]
    assert sorted({int(r[1]) for r in kv.rows}) == contexts
    for c in (512, 8192):
        heads = [r for r in compare_kv_heads(spec, hw, batch=2, seq=c - 1) if r.phase == "decode"]
        mine = {(r[0], r[1]): r for r in kv.rows}
        works = {(r[0], r[1]): r for r in intensity.rows}
        for h in heads:
            name = f"{h.variant} (spec)" if h.own else h.variant
            assert mine[name, c][2] == h.kv_cache and isinstance(mine[name, c][2], int)
            assert works[name, c][2:] == (h.attention.flops, h.attention.bytes_fused,
                                          h.attention_roofline.intensity)
    full = {w.context: w.kv_cache for w in compare_windows(spec, hw, batch=2, contexts=contexts)}
    assert {int(r[1]): r[2] for r in kv.rows if r[0] == "GQA k=8 (spec)"} == full
    lines = points(kv.chart)
    assert list(lines) == ["MHA k=32", "GQA k=8 (spec)", "MQA k=1"]
    assert sum(map(len, lines.values())) == len(kv.rows)
    assert lines["MQA k=1"] == [(float(r[1]), float(r[2])) for r in kv.rows if r[0] == "MQA k=1"]
    assert points(intensity.chart)["MHA k=32"] == [(float(r[1]), r[4]) for r in intensity.rows
                                                   if r[0] == "MHA k=32"]


def test_latent_attention_in_both_conventions_beside_its_heads() -> None:
    spec = catalog.load("deepseek-v2-lite")
    kv, intensity = serving_figures.attention_sections(spec, hw=None)
    names = list(dict.fromkeys(r[0] for r in kv.rows))
    assert names == ["MLA 576/token naive (spec)", "MLA 576/token absorbed (spec)", "MHA k=16", "GQA k=8",
                     "MQA k=1"]
    by = {(r[0], r[1]): r for r in kv.rows}
    for c in {int(r[1]) for r in kv.rows}:  # one cache, two ways of running it
        assert by["MLA 576/token naive (spec)", c][2] == by["MLA 576/token absorbed (spec)", c][2]
    assert serving_figures.attention_sections(catalog.load("bert-base-uncased")) == []


def strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"JSON has {name}")

    return json.loads(text, parse_constant=refuse)


def test_report_json_is_the_sections_exactly(tmp_path: Path) -> None:
    args = ["report", "gpt2-small", "--hardware", "h100-sxm", "--seq", "128"]
    result = runner.invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 0, result.output
    data = strict(result.stdout)
    spec, hw = catalog.load("gpt2-small"), load_hardware("h100-sxm")
    parts = html.sections(spec, hw, seq=128)
    assert data == {"spec": "gpt2-small", "hardware": "h100-sxm", "sections": [p.to_dict() for p in parts]}
    got = {s["id"]: s for s in data["sections"]}
    assert ["attention-kv", "attention-intensity", "serving"] == list(got)[-3:]
    params = got["params"]["rows"]
    assert all(type(r[1]) is int for r in params) and sum(r[1] for r in params) == 124_439_808
    assert got["serving"]["units"] == ["", "s", "s", "s", "", ""]
    # the serving curve: `costmodel inference gpt2-small --hardware h100-sxm --seq 128 --output-tokens
    # 256 --batch 1,2,4,...,256`, computed here through the library
    sv = serve(spec, hw, 128, 256, (1, 2, 4, 8, 16, 32, 64, 128, 256))
    assert got["serving"]["rows"] == [[p.batch, p.ttft_s, p.tpot_s, p.latency_s, p.tokens_per_s, "yes"]
                                      for p in sv.points]
    assert points(parts[-1].chart) == {"TTFT": [(p.batch, p.ttft_s) for p in sv.points],
                                       "TPOT (mean)": [(p.batch, p.tpot_s) for p in sv.points]}

    # -o writes the page too; the CSV stays alone on stdout, `wrote` goes to stderr
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", "gpt2-small", "--seq", "128", "-f", "csv", "-o", str(out)])
    assert result.exit_code == 0 and out.is_file() and result.stderr == f"wrote {out}\n"
    cells = list(csv.DictReader(io.StringIO(result.stdout)))
    counts = html.sections(spec, None, seq=128)
    assert len(cells) == sum(len(p.rows) * (len(p.columns) - 1) for p in counts)
    kv = [c for c in cells if c["section"] == "attention-kv" and c["column"] == "KV cache"]
    assert [int(c["value"]) for c in kv] == [r[2] for r in counts[-2].rows] and kv[0]["unit"] == "B"


def test_report_without_output_prints_its_tables() -> None:
    result = runner.invoke(app, ["report", "gpt2-small", "--seq", "64"])
    assert result.exit_code == 0, result.output
    assert "Attention variants: KV cache against context" in result.stdout and "wrote" not in result.stdout


def test_inference_plot_is_latency_against_throughput(tmp_path: Path) -> None:
    out = tmp_path / "curve"
    result = runner.invoke(app, ["inference", "gpt2-small", "--hardware", "l4", "--seq", "128",
                                 "--output-tokens", "32", "--batch", "1,4,16", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    chart = (tmp_path / "curve.svg").read_text()  # no suffix: SVG
    sv = serve(catalog.load("gpt2-small"), load_hardware("l4"), 128, 32, (1, 4, 16))
    assert points(chart) == {"batch sizes": [(p.tokens_per_s, p.latency_s) for p in sv.points]}
    assert [t for t in re.findall(r'fill="#333">([^<]+)</text>', chart)] == ["B=1", "B=4", "B=16"]


def test_serve_plot_is_tpot_and_its_parts_against_batch(tmp_path: Path) -> None:
    out = tmp_path / "tpot.svg"
    result = runner.invoke(app, ["serve", "gpt2-small", "--cluster", "dgx-h100", "--tp", "2",
                                 "--batch", "1,8,64", "--seq", "128", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    cl = load_cluster("dgx-h100")
    ds = [decode(catalog.load("gpt2-small"), cl, 2, b, 128) for b in (1, 8, 64)]
    assert points(out.read_text()) == {"TPOT": [(d.batch, d.tpot_s) for d in ds],
                                       "compute": [(d.batch, d.compute_s) for d in ds],
                                       "communication": [(d.batch, d.comm_s) for d in ds]}
    assert all(d.comm_s > 0 for d in ds)


def test_deploy_plot_is_every_steady_deployment_and_the_front(tmp_path: Path) -> None:
    args = ["--seq", "128", "--output-tokens", "64", "-b", "8,64", "--max-num-tokens", "2048",
            "--tpot", "0.01"]
    out = tmp_path / "front.svg"
    result = runner.invoke(app, ["deploy", "gpt2-small", "--cluster", "dgx-h100", "--gpus", "2", *args,
                                 "--plot", str(out)])
    assert result.exit_code in (0, 1), result.output
    r = search(catalog.load("gpt2-small"), load_cluster("dgx-h100"), 2,
               Workload(parse_lengths("128", "--seq"), parse_lengths("64", "--output-tokens")),
               batches=(8, 64), tokens=(2048,), targets=Targets(tpot=0.01))
    ok = [d for d in r.deployments if d.stable]
    drawn = points(out.read_text())
    assert drawn.pop("Pareto front") == [(d.tokens_per_s_per_user, d.tokens_per_s_per_gpu) for d in r.front]
    assert sorted(p for ps in drawn.values() for p in ps) == sorted(
        (d.tokens_per_s_per_user, d.tokens_per_s_per_gpu) for d in ok)
    assert set(drawn) <= {"meets the targets", "misses them"} and r.front
    assert all(math.isfinite(x) and x > 0 for ps in drawn.values() for p in ps for x in p)


@pytest.mark.parametrize("command", [
    ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--output-tokens", "4", "--batch", "1"],
    ["serve", "gpt2-small", "--cluster", "dgx-h100", "--tp", "2", "--seq", "64"],
    ["deploy", "gpt2-small", "--cluster", "dgx-h100", "--gpus", "2", "--seq", "64", "--output-tokens", "4"]])
def test_plot_names_are_checked_before_the_work(tmp_path: Path, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--plot", str(tmp_path / "x.jpg")])
    assert result.exit_code == 2 and result.stderr.startswith("error: --plot: ")
    assert "unknown format" in result.stderr
    assert result.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []
