"""`costmodel report`: the page read back with ``html.parser`` as a person's browser would get it.
Every section present, every chart an <svg> whose bars or points are as many as its table's rows,
the tables' numbers equal to the library's (read here through the library, not the renderer),
and bad output paths refused in one line with no file left behind."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import count_params
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.report import html as report_html
from costmodel.report import svg
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.on_device import analyze
from costmodel.runtime.timing import predict
from costmodel.studies.op_classes import phase_classes

runner = CliRunner()
SPEC, HW = "gpt2-small", "h100-sxm"
SEQ = 256  # small shapes: the page in well under a second


@dataclass
class Sec:
    svgs: int = 0
    marks: list[dict[str, str]] = field(default_factory=list)  # bars, segments, points
    rows: list[list[tuple[str, str | None]]] = field(default_factory=list)  # (text, data-value)

    def column(self, i: int) -> list[float]:
        return [float(r[i][1]) for r in self.rows if r[i][1] is not None]  # type: ignore[arg-type]

    def names(self) -> list[str]:
        return [r[0][0] for r in self.rows]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, Sec] = {}
        self.current: Sec | None = None
        self.in_body = False
        self.cell: list[Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.current = self.sections[a["id"]] = Sec()
        elif self.current is None:
            return
        elif tag == "svg":
            self.current.svgs += 1
        elif a.get("class") in ("bar", "seg", "point"):
            self.current.marks.append(a)
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.current.rows.append([])
        elif tag == "td" and self.in_body:
            self.cell = ["", a.get("data-value")]

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.cell is not None and self.current is not None:
            self.current.rows[-1].append((self.cell[0], self.cell[1]))
            self.cell = None
        elif tag == "tbody":
            self.in_body = False
        elif tag == "section":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell[0] += data


def render(tmp: Path, *args: str) -> dict[str, Sec]:
    out = tmp / "r.html"
    result = runner.invoke(app, ["report", *args, "--seq", str(SEQ), "-o", str(out)])
    assert result.exit_code == 0, result.output
    p = Page()
    p.feed(out.read_text(encoding="utf-8"))
    return p.sections


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sec]:
    return render(tmp_path_factory.mktemp("report"), SPEC, "--hardware", HW)


PHASES = ("train", "prefill", "decode")


def test_every_section_present(page: dict[str, Sec]) -> None:
    assert list(page) == ["card", "params", "phases", *(f"classes-{p}" for p in PHASES),
                          *(f"roofline-{p}" for p in PHASES), "memory", "attention-kv", "attention-intensity",
                          "serving"]


def test_every_chart_has_its_tables_data(page: dict[str, Sec]) -> None:
    per_row = {"params": 1, "phases": 1, "memory": 5, "serving": 2}  # memory: a segment per category;
    # serving: TTFT and TPOT at each batch
    for name, s in page.items():
        assert s.rows, name
        if name == "card":
            assert s.svgs == 0
            continue
        assert s.svgs == 1, name
        k = 2 if name.startswith("classes-") else per_row.get(name, 1)  # FLOP share and time share
        assert len(s.marks) == k * len(s.rows) > 0, name
        assert any(float(m.get("data-value", m.get("data-y", "0"))) > 0 for m in s.marks), name


def test_params_equal_analyze() -> None:
    spec = catalog.load(SPEC)
    sections = {s.id: s for s in report_html.sections(spec, seq=SEQ)}
    a = analyze(spec, "train", seq=SEQ)
    rows = sections["params"].rows
    assert sum(int(r[1]) for r in rows) == a.total().params == count_params(spec) == 124_439_808
    groups: dict[str, int] = {}  # the sub-blocks, summed here from the analysis's own rows
    for r in a.rows:
        groups[r.key.block_path] = groups.get(r.key.block_path, 0) + r.params
    assert {str(r[0]): int(r[1]) for r in rows} == {k: v for k, v in groups.items() if v}


def test_page_numbers_equal_the_library(page: dict[str, Sec]) -> None:
    spec, hw = catalog.load(SPEC), load_hardware(HW)
    assert sum(page["params"].column(1)) == count_params(spec)
    assert page["phases"].names() == list(PHASES)
    for phase, flops, fused in zip(PHASES, page["phases"].column(1), page["phases"].column(2), strict=True):
        t = analyze(spec, phase, seq=SEQ).total()
        assert (flops, fused) == (t.flops, t.bytes_fused)
    for phase in PHASES:
        a = analyze(spec, phase, seq=SEQ, hardware=hw, mla="naive")
        c = phase_classes(a)
        s = page[f"classes-{phase}"]
        assert s.column(1) == [r.flops for r in c.rows]
        assert s.column(4) == pytest.approx([r.time_share for r in c.rows], rel=1e-12)
        assert sum(s.column(2)) == pytest.approx(1.0)
        pred = {r.path: r for r in predict(a, hw, a.assumed_kernels).rows}
        peak, bw = hw.peak("bf16"), hw.memory_bandwidth
        counted = {r.path: r for r in a.rows}
        flash = 0
        for m in page[f"roofline-{phase}"].marks:
            r, c = pred[m["data-label"]], counted[m["data-label"]]
            if m["data-group"] == "1":  # flash attention's core: the unmasked pairs only
                flash += 1
                assert r.key.attention_core and r.flops == c.flops_matmul + c.flops_other
                executed = c.flops_matmul_effective + c.flops_other
            else:  # a prediction of its own kernel never beats the device's roof at the bytes it moves
                executed = r.flops
                assert float(m["data-y"]) <= min(peak, bw * float(m["data-x"])) * (1 + 1e-9), m
            assert float(m["data-x"]) == executed / r.bytes
            assert float(m["data-y"]) == executed / r.time_s
        assert flash == 2  # h100-sxm runs flash attention: scores and AV
    peaks = page["memory"].column(6)
    train = memory(spec, "train", 1, SEQ, run=Run(flash=True, mla="absorbed"))
    assert peaks[0] == train.peak and sum(page["memory"].column(i)[0] for i in range(1, 6)) == train.peak


def test_encoder_has_no_decode(tmp_path: Path) -> None:
    sections = render(tmp_path, "bert-base-uncased")
    assert "classes-train" not in sections  # no --hardware: counts only
    assert sections["phases"].names() == ["train", "prefill"]
    assert [m["data-label"] for m in sections["memory"].marks][::5] == ["train", "prefill"]


@pytest.mark.parametrize("name", ["missing/r.html", "r.png", "r", ""])
def test_bad_output_is_one_line_and_leaves_nothing(tmp_path: Path, name: str) -> None:
    target = str(tmp_path / name) if name else ""
    result = runner.invoke(app, ["report", SPEC, "-o", target])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --output"), result.stderr
    assert list(tmp_path.rglob("*")) == []


def test_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the user cannot write into (asked of os.access: root, as CI runs, writes anywhere,
    so the check is made to see the folder as a user would)."""
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == folder else real(p, mode))
    result = runner.invoke(app, ["report", SPEC, "-o", str(folder / "r.html")])
    assert result.exit_code == 2 and "not writable" in result.stderr
    assert list(folder.iterdir()) == []


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    result = runner.invoke(app, ["report", SPEC, "--seq", "16", "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "No space left" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_ticks_never_overlap() -> None:
    chart = svg.hbars("t", ["a", "b"], [123_456_789_012.0, 7.0], lambda v: f"{v:,.0f} FLOP", "FLOPs",
                      width=400)
    ticks = [t for t in axis_texts(chart) if t[1] == 30 + 2 * 22 + 14]  # the axis labels' row
    assert len(ticks) >= 2
    for (x0, _, a), (x1, _, b) in zip(ticks, ticks[1:], strict=False):
        assert x1 - x0 >= (len(a) + len(b)) * svg.CHAR_W / 2, (a, b)


def axis_texts(chart: str) -> list[tuple[float, float, str]]:
    import re

    return [(float(x), float(y), t) for x, y, t in
            re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle">([^<]*)</text>', chart)]
