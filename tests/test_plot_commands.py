"""Every command's `--plot FILE` (issue 25): an SVG drawn by report/svg.py, sized to be read. For
each: the file is written (.svg added to a name without a suffix), its tick labels along each
axis never overlap (widths estimated with svg.CHAR_W, as test_report_html's
test_ticks_never_overlap does) and stay inside the chart, every axis has a name with its unit in
parentheses, the title names the spec and the device, and the marks carry the library's numbers
(computed here through the library or by hand, not read back from the chart)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.report import svg
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.on_device import analyze
from costmodel.runtime.timing import predict

runner = CliRunner()
SPEC, HW = "gpt2-small", "h100-sxm"
SWEEP = ("sweep", SPEC, "--over", "seq=128:512", "--over", "batch=1,8", "--hardware", HW)
CLUSTER = ("--cluster", "dgx-h100", "-n", "2", "-G", "2", "--seq", "256")
#: command -> its arguments before --plot, and the device its title names (small shapes: each
#: draws in well under a second). Their numbers are checked here for analyze, memory and sweep;
#: test_serving_figures and test_report_cluster check the others'.
CASES = {
    "analyze": (("analyze", SPEC, "--hardware", HW, "--seq", "256"), HW),
    "memory": (("memory", SPEC, "--hardware", HW, "--seq", "256"), HW),
    "sweep": (SWEEP, HW),
    "inference": (("inference", SPEC, "--hardware", "l4", "--seq", "128", "--output-tokens", "16", "--batch",
                   "1,8"), "l4"),
    "serve": (("serve", SPEC, "--cluster", "dgx-h100", "--tp", "2", "--batch", "1,8", "--seq", "128"),
              "h100-sxm"),
    "deploy": (("deploy", SPEC, "--cluster", "dgx-h100", "--gpus", "2", "--seq", "128", "--output-tokens",
                "64", "-b", "8,64", "--max-num-tokens", "2048"), "h100-sxm"),
    "train": (("train", SPEC, *CLUSTER), "h100-sxm"),  # a cluster's charts name its device
    "plan": (("plan", SPEC, *CLUSTER), "h100-sxm"),
}
UNITS = {"FLOP/B", "FLOP/s", "bytes", "s", "tokens", "sequences", "GiB", "tokens/s", "%"}


def test_every_plot_command_is_checked() -> None:
    group = typer.main.get_command(app)
    commands = group.commands  # type: ignore[attr-defined]
    drawn = {name for name, c in commands.items() if any("--plot" in p.opts for p in c.params)}
    assert drawn == set(CASES)


@pytest.mark.parametrize("command", sorted(set(CASES) - {"analyze", "memory", "sweep"}))
def test_every_chart_is_readable(tmp_path: Path, command: str) -> None:
    args, device = CASES[command]
    readable(draw(tmp_path, *args), SPEC, device)


def draw(tmp_path: Path, *args: str, name: str = "chart.svg") -> str:
    result = runner.invoke(app, [*args, "--plot", str(tmp_path / name), "-f", "json"])
    assert result.exit_code == 0, result.output
    out = tmp_path / (name if name.endswith(".svg") else name + ".svg")
    assert f"wrote {out}" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    return out.read_text(encoding="utf-8")


def readable(chart: str, spec: str, device: str) -> None:
    """Ticks apart and inside, axes named with a unit, the title saying what and where."""
    title = unescape(re.search(r"<title>([^<]*)</title>", chart).group(1))  # type: ignore[union-attr]
    assert spec in title and device in title, title
    width = max(float(w) for w in re.findall(r'<svg [^>]*width="([\d.]+)"', chart))
    groups = re.findall(r'<g class="ticks" data-axis="(x|y)">(.*?)</g>', chart, re.S)
    names = re.findall(r'<g class="axis-name" data-axis="(x|y)"><text[^>]*>([^<]*)</text></g>', chart)
    assert groups and sorted(a for a, _ in groups) == sorted(a for a, _ in names)
    for axis, body in groups:
        ticks = [(float(x), float(y), unescape(t)) for x, y, t in
                 re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', body)]
        assert len(ticks) >= 2, (axis, body)
        if axis == "x":  # centred labels: half of each either side of its tick
            ticks.sort()
            for (x0, _, a), (x1, _, b) in zip(ticks, ticks[1:], strict=False):
                assert x1 - x0 >= (len(a) + len(b)) * svg.CHAR_W / 2, (a, b)
            assert all(len(t) * svg.CHAR_W / 2 <= x <= width - len(t) * svg.CHAR_W / 2 for x, _, t in ticks)
        else:  # one line of 11 px text each
            ys = sorted(y for _, y, _ in ticks)
            assert all(b - a >= 12 for a, b in zip(ys, ys[1:], strict=False)), ticks
    for _, name in names:
        unit = re.search(r"\(([^)]*)\)", unescape(name))
        assert unit and re.split(r"[;,]", unit.group(1))[0].split(": ")[0] in UNITS, name


def marks(chart: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'(data-[a-z]+)="([^"]*)"', m)) for m in
            re.findall(r'<(?:circle|rect) class="(?:point|seg)"([^>]*)>', chart)]


def test_analyze_draws_each_phase_roofline(tmp_path: Path) -> None:
    chart = draw(tmp_path, *CASES["analyze"][0], name="chart")  # no suffix: .svg added
    readable(chart, SPEC, HW)
    spec, hw = catalog.load(SPEC), load_hardware(HW)
    peak, bw = hw.peak("bf16"), hw.memory_bandwidth
    seen = 0
    for phase in ("train", "prefill", "decode"):
        a = analyze(spec, phase, seq=256, hardware=hw, mla="naive")
        pred = {r.path: r for r in predict(a, hw, a.assumed_kernels).rows}
        counted = {r.path: r for r in a.rows}
        mine = [m for m in marks(chart) if m["data-series"].split(":")[0] == phase]
        assert len(mine) == sum(1 for r in pred.values() if r.flops > 0 and r.bytes > 0 and r.time_s > 0)
        for m in mine:
            path = unescape(m["data-label"]).removeprefix(phase + " ")
            r, c = pred[path], counted[path]
            if "flash" in m["data-series"]:  # the kernel executes the unmasked pairs only
                executed = c.flops_matmul_effective + c.flops_other
            else:  # a prediction of its own kernel never beats the roof at the bytes it moves
                executed = r.flops
                assert float(m["data-y"]) <= min(peak, bw * float(m["data-x"])) * (1 + 1e-9), m
            assert (float(m["data-x"]), float(m["data-y"])) == (executed / r.bytes, executed / r.time_s)
            seen += 1
    assert seen == len(marks(chart))


def test_analyze_plot_needs_a_device(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", SPEC, "--plot", str(tmp_path / "c.svg")])
    assert result.exit_code == 2 and result.stderr == (
        "error: --plot: draws the per-component roofline on a device; give --hardware\n")
    assert list(tmp_path.iterdir()) == []


def test_memory_draws_what_one_device_holds(tmp_path: Path) -> None:
    chart = draw(tmp_path, *CASES["memory"][0], "--optimizer", "sgd")
    readable(chart, SPEC, HW)
    m = memory(catalog.load(SPEC), "train", 1, 256, run=Run(optimizer="sgd", flash=True, mla="absorbed"))
    segs = [int(float(s["data-value"])) for s in marks(chart)]
    assert segs == [m.total("weights"), m.total("gradients"), m.total("optimizer"), m.peak_activations, 0]
    assert sum(segs) == m.peak
    assert re.search(r'<line x1="[\d.]+" y1="\d+" x2="[\d.]+" y2="\d+" stroke="#D55E00"', chart)  # 80 GB


def test_sweep_roofline_and_lanes(tmp_path: Path) -> None:
    chart = draw(tmp_path, *SWEEP)
    readable(chart, SPEC, HW)
    hw = load_hardware(HW)
    peak, bw = hw.peak("bf16"), hw.memory_bandwidth
    points = marks(chart)
    on_roof = [p for p in points if "data-y" in p]
    lanes = [p for p in points if "data-lane" in p]
    # 2 variants (MHA k=12, MQA k=1) x 2 phases x 3 seq x 2 batch, each on the roof and in a lane
    assert len(on_roof) == len(lanes) == 2 * 2 * 3 * 2 and len(points) == 2 * len(on_roof)
    assert [p["data-x"] for p in on_roof] == [p["data-x"] for p in lanes]
    spec = catalog.load(SPEC)
    for p in on_roof:
        x = float(p["data-x"])
        assert float(p["data-y"]) == min(peak, x * bw)
        if p["data-series"] == "MHA k=12 prefill":  # the spec itself: its intensity through analyze
            seq, batch = (int(v.replace(",", "")) for v in re.findall(r"=([\d,]+)", p["data-label"]))
            t = analyze(spec, "prefill", batch=batch, seq=seq).total()
            assert x == pytest.approx(t.flops / t.bytes_fused, rel=1e-12)


def test_sweep_kv_cache_panels(tmp_path: Path) -> None:
    chart = draw(tmp_path, *SWEEP, "-q", "kv_cache")
    readable(chart, SPEC, HW)
    assert chart.count('<svg x="0"') == 2  # a panel per batch (1 and 8)
    points = marks(chart)
    assert len(points) == 2 * 2 * 3  # 2 panels x 2 variants x 3 seq, decode alone
    for panel, batch in ((points[:6], 1), (points[6:], 8)):
        for p in panel:  # by hand: K and V, 12 layers, k heads of 64, 2 bytes, seq + 1 tokens
            k = 12 if p["data-series"].startswith("MHA") else 1
            assert float(p["data-y"]) == 2 * 12 * k * 64 * 2 * (float(p["data-x"]) + 1) * batch


def test_sweep_with_nothing_a_log_axis_can_place_is_one_line(tmp_path: Path) -> None:
    """The fused lower bound moves no bytes for softmax: every intensity is infinite."""
    result = runner.invoke(app, ["sweep", SPEC, "--over", "seq=64:128", "-c", "layers/attention/softmax",
                                 "--plot", str(tmp_path / "c.svg")])
    assert result.exit_code == 2 and result.stderr == (
        "error: --plot: no point of this sweep can go on a log axis (every intensity of "
        "layers/attention/softmax is 0 or infinite)\n")
    assert list(tmp_path.iterdir()) == []
