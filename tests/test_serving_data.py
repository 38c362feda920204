"""The published serving measurements in bench/data/serving/ (docs/serving-data.md): each file loads,
every cell names its source (a commit or a URL), a bundled spec or none, a bundled GPU profile, and
positive finite numbers; a per-GPU figure derived from a total is the total over the cell's GPUs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from costmodel import catalog
from costmodel.devices import hardware

DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "serving"
FILES = ["trtllm_perf_overview.json", "measured_serving.json"]
NUMBERS = ("output_tokens_per_s_per_gpu", "total_output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
           "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_mean", "tpot_ms_mean", "tpot_ms_p50",
           "tpot_ms_p99", "request_rate", "mean_output_tokens")
SIZES = ("gpus", "tp", "pp", "ep", "isl", "osl", "max_batch", "max_num_tokens", "concurrency", "num_requests")


def cells(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text())["cells"]


@pytest.mark.parametrize("name", FILES)
def test_every_cell_is_sourced_and_well_formed(name: str) -> None:
    doc = json.loads((DATA / name).read_text())
    assert doc["source"] and doc["how_measured"]
    specs = set(catalog.bundled_names())
    gpus = {p.stem for p in hardware.bundled_dir().glob("*.yaml")}
    for i, c in enumerate(doc["cells"]):
        where = f"{name} cell {i} ({c['model']}, {c['gpu']})"
        src = c["source"]
        assert src.get("commit") or src.get("url"), where
        if src.get("commit"):
            assert len(src["commit"]) == 40 and src.get("repo") and src.get("path"), where
        assert c["spec"] is None or c["spec"] in specs, where
        assert c["gpu"] in gpus, where
        assert c["weights"] in ("fp4", "fp8", "fp16", "bf16"), where
        for key in NUMBERS:
            v = c.get(key)
            assert v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                 and math.isfinite(v) and v > 0), (where, key, v)
        for key in SIZES:
            v = c.get(key)
            assert v is None or (type(v) is int and v > 0), (where, key, v)
        assert c["output_tokens_per_s_per_gpu"] is not None, where
        if c["per_gpu_derived"]:
            assert c["output_tokens_per_s_per_gpu"] == c["total_output_tokens_per_s"] / c["gpus"], where
        if c["tp"] is not None and c["pp"] is not None:
            assert c["gpus"] == c["tp"] * c["pp"], where
        if c["gpu"] in ("gb200", "mi300x", "mi325x"):
            assert c["validation_skip"], where  # no kernel tables of their own
        if c["weights"] == "fp4":
            assert c["gpu"] in ("b200", "gb200"), where  # FP4 tensor cores are Blackwell's


def test_the_perf_overview_cells_cover_the_check() -> None:
    """Issue 24's check needs >= 20 cells over >= 3 models and >= 2 GPUs with measured kernel tables;
    the file holds more than that among the cells it does not mark to skip."""
    usable = [c for c in cells("trtllm_perf_overview.json") if c["spec"] and not c["validation_skip"]]
    assert len(usable) >= 40
    assert len({c["spec"] for c in usable}) >= 3
    assert {c["gpu"] for c in usable} >= {"h100-sxm", "h200"}
    assert all((hardware.bundled_dir().parent / "kernels" / c["gpu"]).is_dir() for c in usable)


def test_a_published_cell_by_hand() -> None:
    """TensorRT-LLM v1.0's perf-overview, Llama 3.1 405B FP8 on 8 H100s, 20000/2000: 345 output
    tokens/s in all, 43.125 per GPU."""
    (cell,) = [c for c in cells("trtllm_perf_overview.json")
               if c["release"] == "v1.0" and c["spec"] == "llama-3.1-405b" and c["gpu"] == "h100-sxm"
               and (c["isl"], c["osl"]) == (20000, 2000)]
    assert cell["total_output_tokens_per_s"] == 345 and cell["output_tokens_per_s_per_gpu"] == 43.125
    assert (cell["tp"], cell["weights"]) == (8, "fp8")
