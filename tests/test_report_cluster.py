"""The cluster's figures (``costmodel.report.cluster``): the step's waterfall adds up to the step
time the parallel model gives (read from the library's ``Step``, not from the section), each
collective's exposed and overlapped time is its calls'; every layout the plan's chart draws is a
point at the library's memory and step time; `train --plot`, `plan --plot` and `report --cluster`
write what they say."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.engine import Overlap
from costmodel.parallel.layout import Layout, Recompute
from costmodel.parallel.plan import Plan, plan
from costmodel.parallel.step import Step, StepModel
from costmodel.report import cluster
from costmodel.report.files import save_plot

runner = CliRunner()
GIB = 2 ** 30
#: A plan small enough for a test (about 260 layouts) with a few that do not fit.
SMALL = ("llama-2-7b", "dgx-a100-80gb", 4, 4, 512)


def marks(svg_text: str, cls: str) -> list[dict[str, str]]:
    """Every element of class `cls` in an SVG, as its attributes."""
    found = re.findall(rf'<\w+ class="{cls}"([^>]*)>', svg_text)
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in found]


@functools.cache
def steps() -> list[Step]:
    """Steps with every part the waterfall names: TP, PP sends and their all-gather, DP, a tied
    embedding's sync, EP's all-to-all, the bubble, overlapped and exposed communication."""
    both = Overlap(tp=True, dp=True)
    gpt2 = StepModel(catalog.load("gpt2-small"), load_cluster("dgx-h100"), 512, overlap=both)
    moe = StepModel(catalog.load("olmoe-1b-7b"), load_cluster("dgx-h100"), 512)
    return [gpt2.step(Layout(16, 1, 2, 2, 4, interleave=2, zero=1)),
            gpt2.step(Layout(16, 2, 4, 2, 2, sequence_parallel=True, recompute=Recompute.full)),
            moe.step(Layout(16, 1, 2, 2, 4, ep=4))]


@pytest.mark.parametrize("step", steps(), ids=lambda s: s.spec.name + " " + s.layout.label())
def test_waterfall_adds_up_to_the_step_time(step: Step) -> None:
    section = cluster.waterfall_section(step)
    bars = marks(section.chart, "bar")
    assert len(bars) == len(section.rows) > 0
    # The bars, in order, start where the one above ended and end at the step time.
    at = 0.0
    for b in bars:
        assert float(b["data-start"]) == at
        at += float(b["data-value"])
    assert at == pytest.approx(step.step_time_s, rel=1e-12)
    (total,) = marks(section.chart, "total")
    assert float(total["data-value"]) == pytest.approx(step.step_time_s, rel=1e-12)
    # Each group of bars is its breakdown part; the overlapped time is the calls' time not exposed.
    parts = cluster.step_parts(step)
    compute = sum(p.seconds for p in parts if p.group == "compute")
    assert compute == pytest.approx(step.breakdown["compute"], rel=1e-12)
    assert sum(p.seconds for p in parts if p.group == "pipeline bubble") == step.breakdown["pipeline_bubble"]
    comm = sum(v for k, v in step.breakdown.items() if k.endswith(("_comm", "_sync")))
    exposed = sum(p.seconds for p in parts if p.group.startswith("communication"))
    assert exposed == pytest.approx(comm, rel=1e-12)
    whole = sum(n * c.time_s for c, n, _ in step.collectives)
    assert sum(p.seconds + p.overlapped for p in parts if p.group.startswith("communication")) == \
        pytest.approx(whole, rel=1e-12)
    hidden = marks(section.chart, "hidden")
    assert len(hidden) == sum(p.overlapped > 0 for p in parts)


def test_the_waterfall_names_every_parallelism() -> None:
    names = {p.name for s in steps() for p in cluster.step_parts(s)}
    assert {"TP all-reduce", "TP all-gather", "TP reduce-scatter", "PP send", "PP receive all-gather (TP)",
            "DP all-reduce", "DP reduce-scatter", "tied-embedding all-reduce", "EP all-to-all",
            "pipeline bubble", "optimizer step", "ffn"} <= names
    assert any(p.overlapped > 0 and p.seconds < p.overlapped for s in steps() for p in cluster.step_parts(s))


@pytest.fixture(scope="module")
def small() -> Plan:
    name, cl, gpus, batch, seq = SMALL
    return plan(StepModel(catalog.load(name), load_cluster(cl), seq), gpus, batch, unfit=True)


@pytest.mark.parametrize("most", [cluster.MOST_POINTS, 40])
def test_every_layout_drawn_is_the_librarys(small: Plan, most: int) -> None:
    assert small.ranked and small.unfit  # the chart has both colours to draw
    by_label = {s.layout.label(): s for s in (*small.ranked, *small.unfit)}
    assert len(by_label) == len(small.ranked) + len(small.unfit)  # a label names one layout
    section = cluster.layouts_section(small, top=5, most=most)
    points = marks(section.chart, "point")
    assert len(points) == min(most, len(small.ranked) + len(small.unfit))
    assert len({p["data-label"] for p in points}) == len(points)
    for p in points:
        s = by_label[p["data-label"]]
        assert float(p["data-x"]) * GIB == s.per_gpu.total and float(p["data-y"]) == s.step_time_s
        assert (p["data-series"] == "does not fit") == (not s.fits)
    # The front: no drawn layout that fits is both lighter and faster than one on it; the best is on it.
    front = [by_label[p["data-label"]] for p in points if p["data-series"] == "fastest for its memory"]
    assert small.ranked[0] in front
    for f in front:
        assert not any(o.per_gpu.total <= f.per_gpu.total and o.step_time_s < f.step_time_s
                       for o in small.ranked)
    assert section.rows[0][1] == small.ranked[0].layout.label() and len(section.rows) == 5
    assert marks(section.chart, "limit")  # the device's memory


def test_train_plot_is_the_step_train_prints(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "gpt2-small", "--cluster", "dgx-h100", "-n", "16", "-G", "16",
                                 "--tp", "2", "--pp", "2", "--overlap", "tp", "--seq", "512", "-f", "json",
                                 "--plot", str(tmp_path / "step")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)["step_time_s"]
    bars = marks((tmp_path / "step.svg").read_text(), "bar")  # .svg added to a name without a suffix
    assert sum(float(b["data-value"]) for b in bars) == pytest.approx(printed, rel=1e-12)


def test_plan_plot_draws_the_layouts_plan_prints(tmp_path: Path) -> None:
    name, cl, gpus, batch, seq = SMALL
    out = tmp_path / "layouts.svg"
    result = runner.invoke(app, ["plan", name, "--cluster", cl, "-n", str(gpus), "-G", str(batch), "--seq",
                                 str(seq), "--top", "3", "-f", "json", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    drawn = {(float(p["data-x"]) * GIB, float(p["data-y"])) for p in marks(out.read_text(), "point")}
    printed = json.loads(result.stdout)["layouts"]
    assert len(printed) == 3
    for row in printed:  # each layout printed is drawn, at the memory and the step time printed
        assert (row["memory"]["per_gpu"]["total"], row["step_time_s"]) in drawn


def test_plot_png(tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    out = save_plot(cluster.waterfall_section(steps()[0]).chart, tmp_path / "step.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_with_a_cluster(tmp_path: Path) -> None:
    name, cl, gpus, batch, seq = SMALL
    out = tmp_path / "r.html"
    # --tp given: that layout's step, drawn whether it fits or not; TP 1 does not: the page, then exit 1.
    result = runner.invoke(app, ["report", name, "--cluster", cl, "-n", str(gpus), "-G", str(batch), "--seq",
                                 str(seq), "--tp", "1", "-o", str(out)])
    assert result.exit_code == 1 and result.stderr.startswith("error: TP1 PP1 DP4 mb1 does not fit: ")
    page = out.read_text()
    for sid in ("card", "roofline-train", "memory", "cluster-step", "cluster-layouts"):
        assert f'<section id="{sid}">' in page, sid
    assert "a100-80gb" in page.split('<section id="params">')[0]  # the cluster's GPU is the device


ON = ["--cluster", "dgx-h100", "-n", "4", "-G", "4"]


@pytest.mark.parametrize(("extra", "error"), [
    (["--gpus", "4"], "error: --gpus: needs --cluster"),
    (["--cluster", "dgx-h100", "-n", "4"], "error: --global-batch: needed with --cluster"),
    ([*ON, "--hardware", "h100-sxm"], "error: --hardware: not with"),
    ([*ON, "--dtype", "fp32"], "error: --dtype: a training step"),
    ([*ON, "--tp", "3"], "error: --tp: 3 does not divide"),
])
def test_report_cluster_bad_input(tmp_path: Path, extra: list[str], error: str) -> None:
    result = runner.invoke(app, ["report", "gpt2-xl", "-o", str(tmp_path / "r.html"), *extra])
    assert result.exit_code == 2 and result.stderr.startswith(error), result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
