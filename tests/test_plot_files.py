"""What `--plot` and `report -o` write (costmodel/report/files.py) and the x-y chart every plot is
drawn with (`svg.xy`): the file's format follows its suffix; PNG and PDF are the same SVG
rasterised; bad names are one line; ticks never overlap; every point is on the page with its
exact values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from costmodel.analysis import AnalysisError
from costmodel.report import files, svg

CHART = svg.xy("TTFT against batch", [svg.Series("TTFT", [(1, 0.02), (8, 0.05), (64, 0.4)], line=True),
                                      svg.Series("TPOT", [(1, 0.01), (8, 0.011), (64, 0.02)], line=True,
                                                 dashed=True)],
               svg.Axis("batch (requests, log)"), svg.Axis("time (s, log)", "s"),
               y_limits=[("target 0.1 s", 0.1)])


def test_every_point_with_its_values() -> None:
    points = re.findall(r'<circle class="point"[^>]*data-series="(\w+)" data-x="([^"]+)" data-y="([^"]+)"',
                        CHART)
    assert [(s, float(x), float(y)) for s, x, y in points] == [
        ("TTFT", 1, 0.02), ("TTFT", 8, 0.05), ("TTFT", 64, 0.4),
        ("TPOT", 1, 0.01), ("TPOT", 8, 0.011), ("TPOT", 64, 0.02)]
    assert CHART.count('class="line"') == 2 and CHART.count('class="limit"') == 1
    assert "stroke-dasharray" in CHART  # the dashed series and the limit


def test_linear_ticks_fit_their_labels() -> None:
    """A linear x axis of long labels on a narrow chart: fewer ticks, never touching."""
    fmt = lambda v: f"{v:,.0f} tokens/s"  # noqa: E731
    chart = svg.xy("t", [svg.Series("a", [(0, 1), (123_456, 2)])], svg.Axis("x", log=False, fmt=fmt),
                   svg.Axis("y", log=False), width=360)
    xs = [(float(x), t) for x, t in re.findall(r'<text x="([\d.]+)" y="420" text-anchor="middle">([^<]+)<',
                                               chart)]
    assert len(xs) >= 2
    for (x0, t0), (x1, t1) in zip(xs, xs[1:], strict=False):
        assert x1 - x0 >= (len(t0) + len(t1)) / 2 * svg.CHAR_W, (t0, t1)


def test_svg_written_whole_with_a_white_ground(tmp_path: Path) -> None:
    out = files.save_plot(CHART, tmp_path / "c")  # no suffix: .svg added
    assert out == tmp_path / "c.svg"
    text = out.read_text()
    assert text.startswith("<?xml") and '<rect width="100%" height="100%" fill="white"/>' in text
    assert list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF")])
def test_png_and_pdf_are_the_chart_rasterised(tmp_path: Path, suffix: str, magic: bytes) -> None:
    pytest.importorskip("vl_convert", reason="the plot extra (pip install -e '.[plot]'), installed by CI")
    out = files.save_plot(CHART, tmp_path / f"c{suffix}")
    data = out.read_bytes()
    assert data.startswith(magic) and len(data) > 5_000
    if suffix == ".png":  # 760 x 480 at scale 2
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert (width, height) == (1520, 960)


@pytest.mark.parametrize("name, message", [("missing/c.svg", "no folder"), ("c.gif", "unknown format '.gif'"),
                                           ("", "give a file name")])
def test_bad_names_are_one_line(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(AnalysisError, match=message) as e:
        files.save_plot(CHART, str(tmp_path / name) if name else "")
    assert "\n" not in str(e.value) and str(e.value).startswith("--plot")
    assert list(tmp_path.iterdir()) == []
