"""The report as a person sees it: rendered by headless Chromium (Debian's `chromium`, installed
by .ci/run), no console message, every section drawn (a screenshot with ink in each section's band),
and the DOM Chromium builds holding every chart's data. The screenshots are kept where
``COSTMODEL_ARTIFACTS`` points (CI: ci-artifacts/report/), else in the test's folder.

Without Chromium on PATH the test says so and skips (CI installs it, so it runs there)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from costmodel import catalog
from costmodel.devices.hardware import load_hardware
from costmodel.report import html as report_html
from costmodel.report.cluster import on_cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs it)")
CELL = 900  # px of a section in the screenshot
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=60, check=True)


def inked(png: Path) -> Any:
    """Which pixels of a screenshot are not white (rows x columns of booleans)."""
    import numpy as np
    from PIL import Image  # the test extra's PNG reader

    return np.asarray(Image.open(png).convert("RGB")).min(axis=-1) < 243  # 0.95 of 255


def test_every_section_renders_in_chromium(tmp_path: Path) -> None:
    spec, hw = catalog.load("llama-3-8b"), load_hardware("h100-sxm")
    # The cluster's sections too (dgx-h100's GPU is h100-sxm): the step's waterfall, the layouts.
    parts = report_html.sections(spec, hw) + on_cluster(spec, "dgx-h100", 8, 8).sections()
    assert {"cluster-step", "cluster-layouts"} <= {s.id for s in parts}
    out = Path(os.environ.get("COSTMODEL_ARTIFACTS") or tmp_path) / "report"
    out.mkdir(parents=True, exist_ok=True)
    whole = out / "llama-3-8b.html"
    whole.write_text(report_html.page(spec, parts))

    logged = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", whole.as_uri())
    assert "CONSOLE" not in logged.stderr  # the page runs no script and logs nothing
    dom = logged.stdout
    for s in parts:
        assert f'id="{s.id}"' in dom, s.id
    # every chart's marks made it into the rendered DOM: bars, segments and points with their data
    marks = sum(dom.count(f'class="{c}"') for c in ("bar", "seg", "point"))
    assert marks >= sum(len(s.rows) for s in parts if s.chart)

    # One screenshot, each section the top 900 px of a cell of its own (a Chromium launch is 2-3 s
    # on CI's 2 cores: one a section was a minute), each cell with something drawn on it.
    cells = "".join(f"#{s.id}{{top:{i * CELL}px}}" for i, s in enumerate(parts))
    style = (f"<style>h1,nav{{display:none}}body{{margin:0;max-width:none}}section{{position:absolute;left:0;"
             f"width:1000px;height:{CELL}px;overflow:hidden;margin:0;padding:0 1em;box-sizing:border-box}}"
             f"{cells}</style></head>")
    grid = out / "sections.html"
    grid.write_text(report_html.page(spec, parts).replace("</head>", style, 1))
    png = out / "sections.png"
    chromium(f"--window-size=1000,{CELL * len(parts)}", f"--screenshot={png}", grid.as_uri())
    ink = inked(png)
    assert ink.shape[0] == CELL * len(parts)
    for i, s in enumerate(parts):
        share = float(ink[i * CELL : (i + 1) * CELL].mean())
        assert share > 0.01, (s.id, share)
