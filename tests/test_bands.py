"""Every command that prints a GPU time says which measured kernel tables it read, with their error
bands as the cross-validation wrote them (specs/kernels/<gpu>/errors.json, read here as a file,
never through the code under test), and which op classes it read past those tables; a profile
without measured tables (a calibrated CPU) says neither (issue 21, items 5 and 6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from costmodel.cli import app
from costmodel.devices.kernels import kernels_root
from tests.helpers import calibrated_profile

BANDS = "measured kernel tables, error against other frameworks' measurements: "
PAST = "extrapolated past the measured tables (the kernel model's rule, docs/gpu-time.md): "


def file_bands(gpu: str) -> dict[str, list[tuple[float, float, str]]]:
    """errors.json's bands of `gpu`, as (median, worst, against) per op class."""
    data = json.loads((kernels_root() / gpu / "errors.json").read_text())
    return said(data["bands"])


def said(errors: dict[str, Any]) -> dict[str, list[tuple[float, float, str]]]:
    return {op: [(b["median"], b["worst"], b["against"]) for b in listed] for op, listed in errors.items()}


def run(*args: str) -> Any:
    out = CliRunner().invoke(app, [*args, "-f", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


# llama-3-8b's LM head is a GEMM of N = 128,256 where h100-sxm's table stops at 65,536: read past
# it, and said so, wherever the head is whole on a GPU (TP 1).
COMMANDS = {
    "analyze": (["analyze", "llama-3-8b", "--hardware", "h100-sxm", "--phase", "decode"],
                lambda d: [d["phases"]["decode"]["time"]], {"gemm/bf16", "attention/decode"}),
    "inference": (["inference", "llama-3-8b", "--hardware", "h100-sxm", "-b", "1", "--output-tokens", "4"],
                  lambda d: [d], {"gemm/bf16", "attention/prefill", "attention/decode"}),
    "serve": (["serve", "llama-3-8b", "--cluster", "dgx-h100", "--tp", "1"],
              lambda d: [d, d["results"][0]], {"gemm/bf16", "attention/decode"}),  # TP 1: no collective
    "train": (["train", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8", "-G", "8", "--zero", "3"],
              lambda d: [d], {"gemm/bf16", "collectives"}),
    # TP 1 only (-b: few engines): the body and head as a prefill, the cores of a decode and a prompt
    "deploy": (["deploy", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "1", "-b", "8,16",
                "--seq", "512", "--output-tokens", "64"],
               lambda d: [d], {"gemm/bf16", "attention/prefill", "attention/decode"}),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_s_json_carries_the_bands_of_errors_json_and_the_extrapolated_gemm(command: str) -> None:
    args, where, ops = COMMANDS[command]
    expected = file_bands("h100-sxm")
    for d in where(run(*args)):
        assert said(d["errors"]) == {op: expected[op] for op in ops}
        assert "gemm" in d["extrapolated"]


def test_plan_carries_the_bands_once_and_per_layout() -> None:
    """qwen2-7b's head is N = 152,064: past h100-sxm's 65,536 on TP 1 and TP 2 alike."""
    d = run("plan", "qwen2-7b", "--cluster", "dgx-h100", "--gpus", "2", "-G", "2", "--max-micro-batch", "1",
            "--top", "3")
    expected = file_bands("h100-sxm")
    assert said(d["errors"]) == {op: expected[op] for op in ("gemm/bf16", "collectives")}
    assert d["extrapolated"] == ["gemm"]
    assert len(d["layouts"]) == 3
    for layout in d["layouts"]:
        # each layout its own reads, within the union said once: a TP layout's all-reduces read the
        # in-node NCCL table; a pipeline's sends are point-to-point (the alpha-beta model, no band)
        own = said(layout["errors"])
        assert own.items() <= said(d["errors"]).items() and layout["extrapolated"] == ["gemm"]
        assert ("collectives" in own) == (layout["layout"]["tp"] > 1)


def test_a_layout_that_splits_the_head_below_the_grid_s_edge_reads_no_gemm_past_it() -> None:
    """llama-3-8b on 8 H100s, one sequence a micro-batch: TP 1 holds the whole head (N 128,256,
    past the table), extrapolated; TP 2 holds 64,128 of it, inside. (Two sequences a
    micro-batch stack the attention core's products to M = 65,536, past the table's 32,768.)"""
    from costmodel import catalog
    from costmodel.parallel.cluster import load_cluster
    from costmodel.parallel.layout import Layout
    from costmodel.parallel.step import StepModel

    model = StepModel(catalog.load("llama-3-8b"), load_cluster("dgx-h100"))
    assert "gemm" in model.step(Layout(global_batch=8, tp=1, dp=8, zero=3)).extrapolated
    assert "gemm" not in model.step(Layout(global_batch=8, tp=2, dp=4, zero=1)).extrapolated


def test_collectives_past_the_gpus_measured_in_a_node_are_flagged() -> None:
    """A GB200 NVL72 rack is one NVLink domain of 72; b200's NCCL tables stop at 8 GPUs. TP 16's
    all-reduces are scaled past them by the ring model: "collectives" extrapolated, with b200's
    band; TP 8's are read inside the table (each message within its sizes)."""
    from costmodel import catalog
    from costmodel.parallel.cluster import load_cluster
    from costmodel.parallel.layout import Layout
    from costmodel.parallel.step import StepModel
    from costmodel.report.parallel import summary_table

    model = StepModel(catalog.load("llama-3-8b"), load_cluster("gb200-nvl72"))
    wide = model.step(Layout(global_batch=1, tp=16))
    assert "collectives" in wide.extrapolated
    assert said(wide.reads.to_dict()["errors"])["collectives"] == file_bands("b200")["collectives"]
    assert {c.basis for c, _, _ in wide.collectives} == {"extrapolated"}
    notes = " ".join(summary_table(wide).notes)
    assert BANDS + "gemm/bf16 median" in notes and PAST in notes and "collectives" in notes.split(PAST)[1]
    narrow = model.step(Layout(global_batch=1, tp=8))
    assert "collectives" not in narrow.extrapolated and "collectives" in narrow.errors


def test_a_calibrated_cpu_profile_has_no_bands(tmp_path: Any) -> None:
    """A profile as `costmodel calibrate` writes one names no measured kernel tables: no band in
    the JSON, no band line under any table; for a step and a decode on a cluster of them too.
    (A shape past its own efficiency table is still said to be extrapolated: the edge is held.)"""
    import yaml

    from costmodel.parallel.cluster import load_cluster
    from costmodel.parallel.layout import Layout
    from costmodel.parallel.plan import Plan
    from costmodel.parallel.serve import decode
    from costmodel.parallel.step import StepModel
    from costmodel.report.parallel import decode_table, plan_table, summary_table
    from tests.helpers import tiny

    hw = calibrated_profile(realistic=True)
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(hw.model_dump(mode="json", exclude_none=True)))
    node = yaml.safe_load((kernels_root().parent / "clusters" / "dgx-h100.yaml").read_text())
    node.update(name="cpus", device=str(tmp_path / "cpu.yaml"))
    (tmp_path / "cpus.yaml").write_text(yaml.safe_dump(node))
    cl = load_cluster(str(tmp_path / "cpus.yaml"))
    assert cl.hardware.kernel_tables() is None and cl.hardware.tables_for("bf16")
    step = StepModel(tiny(), cl, seq=16).step(Layout(global_batch=2, tp=2, dp=2))
    d = decode(tiny(), cl, 2, 4, 16)
    for item in (step, d):
        assert item.to_dict()["errors"] == {}
    notes = [*summary_table(step).notes, *decode_table([d]).notes,
             *plan_table(Plan((step,), 1, 0), 1, 0.1).notes]
    assert not any(n.startswith(BANDS) for n in notes)
    out = CliRunner().invoke(app, ["inference", "llama-3-8b", "--hardware", str(tmp_path / "cpu.yaml"),
                                   "--batch", "1", "--output-tokens", "2", "--seq", "16", "-f", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["errors"] == {}
