"""`costmodel train`, `plan`, `serve` and `clusters` through typer's CliRunner; bad input is one
line naming the option, exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel.cli import app
from costmodel.parallel.cluster import cluster_paths, load_cluster
from costmodel.spec import SpecError

runner = CliRunner()
CLUSTERS = Path(__file__).parent.parent / "specs" / "clusters"
KERNELS = Path(__file__).parent.parent / "specs" / "kernels"

TRAIN_175B = ["train", "megatron-175b", "--cluster", "dgx-a100-80gb", "--gpus", "64", "--tp", "8", "--pp",
              "8",
              "--interleave", "3", "--micro-batch", "1", "--global-batch", "64", "--recompute", "selective",
              "--sequence-parallel", "--dtype", "fp16", "--tokens", "3e11", "--kernels", "megatron-2022"]


def run(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def finite(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(finite(v) for v in obj)
    return True


def test_train_table_shows_where_the_step_goes():
    out = run(*TRAIN_175B).stdout
    for text in ("Training step", "pipeline bubble", "tensor-parallel comm", "tp/reduce_scatter", "ffn",
                 "Memory per GPU", "MFU", "GPU-hours", "fits"):
        assert text in out, text


def test_train_json_keys():
    data = json.loads(run(*TRAIN_175B, "--format", "json").stdout)
    for key in ("step_time_s", "mfu", "hfu", "tokens_per_s", "fits"):
        assert key in data
    per_gpu = data["memory"]["per_gpu"]
    parts = ("weights", "gradients", "optimizer", "activations", "recompute_working_set")
    assert per_gpu["total"] == sum(per_gpu[k] for k in parts)
    assert all(isinstance(per_gpu[k], int) for k in per_gpu if k != "stage")
    by = data["comm"]["by_collective"]
    assert {"tp/all_gather", "tp/reduce_scatter", "pp/p2p"} <= set(by)
    # Where each time came from: SP's 48 MiB gathers inside a node between the measured 32 and
    # 64 MiB; the pipeline's sends cross nodes, where only the model speaks.
    assert (by["tp/all_gather"]["basis"], by["tp/all_gather"]["link"]) == ("interpolated", "intra_node")
    assert (by["pp/p2p"]["basis"], by["pp/p2p"]["link"]) == ("modelled", "inter_node")
    assert data["train"]["gpu_hours"] == pytest.approx(data["train"]["time_s"] * 64 / 3600)
    assert 0 < data["mfu"] < data["hfu"] < 1
    assert data["tokens_per_s"] == pytest.approx(64 * 2048 / data["step_time_s"])
    assert finite(data)


def test_train_splits_a_pipeline_the_layers_do_not_divide():
    """48 layers on PP 5: stages of 9/10/10/10/9, said in a note; the fullest middle stage in the JSON."""
    data = json.loads(run("train", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "40", "--tp", "8",
                          "--pp", "5",
                          "--micro-batch", "1", "--global-batch", "20", "--dtype", "fp16", "--format",
                          "json").stdout)
    assert "pipeline stages of 9/10/10/10/9 layers; stage 1 sets the pace" in data["notes"]
    assert data["memory"]["middle_stage"]["stage"] == "stage 1"
    assert data["memory"]["per_gpu"]["total"] == max(data["memory"][k]["total"]
                                                     for k in ("first_stage", "middle_stage", "last_stage"))


@pytest.mark.parametrize("args, message", [
    (["--gpus", "64", "--tp", "7", "--pp", "8"],
     "--tp: 7 does not divide the 96 attention heads of megatron-175b"),
    (["--gpus", "1024", "--tp", "8", "--pp", "128"], "--pp: 128 stages for the 96 layers of megatron-175b"),
    (["--gpus", "40", "--tp", "8", "--pp", "5", "--interleave", "2"],
     "--interleave: 2 chunks x PP 5 does not divide the 96 layers"),
    (["--gpus", "64", "--tp", "8", "--pp", "8", "--dp", "2"],
     "--gpus: 64 GPUs but TP 8 x PP 8 x DP 2 x CP 1 = 128"),
    (["--gpus", "64", "--tp", "8", "--pp", "4", "--micro-batch", "5"],
     "--micro-batch: 5 does not divide the 32 sequences per DP rank (global batch 64 / DP 2)"),
    (["--gpus", "64", "--tp", "8", "--pp", "8", "--ep", "2"], "--ep: megatron-175b has no experts to split"),
    (["--gpus", "64", "--tp", "8", "--pp", "8", "--interleave", "5"],
     "--interleave: 5 chunks x PP 8 does not divide"),
    (["--gpus", "64", "--tp", "1", "--pp", "8", "--sequence-parallel"],
     "--sequence-parallel: splits activations"),
    (["--gpus", "64", "--tp", "8", "--pp", "8", "--zero", "4"], "--zero: stage 4"),
])
def test_bad_layouts_are_one_line_and_exit_2(args, message):
    result = runner.invoke(app, ["train", "megatron-175b", "--cluster", "dgx-a100-80gb", "--global-batch",
                                 "64", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_plan_ranks_fitting_layouts_fastest_first():
    data = json.loads(run("plan", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "8",
                          "--global-batch", "4",
                          "--format", "json", "--top", "5").stdout)
    times = [d["step_time_s"] for d in data["layouts"]]
    assert times == sorted(times) and len(times) == 5
    assert all(d["fits"] for d in data["layouts"])
    assert data["considered"] > data["dropped"] > 0
    assert "Best layouts" in run("plan", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "8",
                                 "--global-batch", "4").stdout


def test_plan_with_no_fitting_layout_says_so():
    result = runner.invoke(app, ["plan", "megatron-1t", "--cluster", "dgx-a100-80gb", "--gpus", "8",
                                 "--global-batch", "8"])
    assert result.exit_code == 1 and "no layout of megatron-1t fits" in result.stdout


def test_serve_llama_405b_tp8_on_h200():
    """LLaMA-3.1-405B on 8 x H200: 2 all-reduces of B*d bf16 per layer per token (252 at bs 1)."""
    data = json.loads(run("serve", "llama-3.1-405b", "--cluster", "dgx-h200", "--tp", "8", "--batch", "1,64",
                          "--format", "json").stdout)
    one, many = data["results"]
    ar = one["comm"]["by_collective"]["tp/all_reduce"]
    assert ar["calls"] == 2 * 126
    assert ar["bytes_sent"] == pytest.approx(252 * 2 * 7 / 8 * 16384 * 2)
    # 16384 bf16 values, 32 KiB: a size NCCL was measured at on 8 H200s, its time the file's.
    table = next(t for t in json.loads((KERNELS / "h200" / "collectives.json").read_text())["tables"]
                 if t["kind"] == "all_reduce")
    sizes = table["axes"]["bytes"]
    measured = table["time_s"][table["axes"]["gpus"].index(8) * len(sizes) + sizes.index(32768)]
    assert ar["basis"] == "measured" and ar["time_s"] == pytest.approx(252 * measured)
    assert one["tpot_s"] == pytest.approx(one["compute_s"] + one["comm_s"])
    assert one["fits"] and many["tokens_per_s"] > one["tokens_per_s"]
    assert "TPOT" in run("serve", "llama-3.1-405b", "--cluster", "dgx-h200").stdout


def test_serve_deepseek_v3_with_expert_parallelism():
    """DeepSeek-V3 on 8 x H200, EP 8, absorbed MLA, fp8:
    the all-to-alls in the JSON; a batch that does not split over the replicas: one line, exit 2."""
    data = json.loads(run("serve", "deepseek-v3", "--cluster", "dgx-h200", "--tp", "1", "--ep", "8",
                          "--batch", "64", "--mla", "absorbed", "--dtype", "fp8", "--format", "json").stdout)
    (one,) = data["results"]
    assert (one["gpus"], one["ep"]) == (8, 8) and one["fits"]
    assert one["comm"]["by_collective"]["ep/all_to_all"]["calls"] == 116
    bad = runner.invoke(app, ["serve", "deepseek-v3", "--cluster", "dgx-h200", "--tp", "1",
                              "--ep", "8", "--batch", "4"])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--batch" in bad.stderr


def test_serve_bad_batch():
    result = runner.invoke(app, ["serve", "llama-3.1-405b", "--cluster", "dgx-h200", "--batch", "1,x"])
    assert result.exit_code == 2 and "--batch" in result.stderr


@pytest.mark.parametrize("name", ["dgx-a100-80gb", "dgx-h100", "dgx-h200", "gb200-nvl72", "mi300x-platform"])
def test_bundled_clusters_load_with_sources(name):
    c = load_cluster(name)
    assert c.intra_node.source and c.inter_node.source and c.source
    assert c.intra_node.bus_bandwidth > c.inter_node.bus_bandwidth
    assert c.hardware.name == c.device
    assert name in cluster_paths()
    assert name in run("clusters").stdout
    assert (c.gpus_per_node == 72) == (name == "gb200-nvl72")


def test_a_user_cluster_profile(tmp_path, monkeypatch):
    text = (load_cluster_text("dgx-h100").replace("name: dgx-h100", "name: my-h100")
            .replace("gpus_per_node: 8", "gpus_per_node: 4"))
    monkeypatch.setenv("COSTMODEL_CLUSTER_DIR", str(tmp_path))
    (tmp_path / "my-h100.yaml").write_text(text)
    assert load_cluster("my-h100").gpus_per_node == 4
    (tmp_path / "broken.yaml").write_text(text.replace("gpus_per_node: 4", "gpus_per_node: 0"))
    with pytest.raises(SpecError, match="gpus_per_node"):
        load_cluster("broken")
    result = runner.invoke(app, ["train", "megatron-22b", "--cluster", "broken", "--gpus", "8",
                                 "--global-batch", "8"])
    assert result.exit_code == 2 and "gpus_per_node" in result.stderr


def load_cluster_text(name: str) -> str:
    return cluster_paths()[name].read_text()


@pytest.mark.parametrize("args, expect", [
    (["train", "megatron-175b", "--cluster", "dgx-a100-80gb", "--gpus", "64", "--tp", "8", "--pp", "8",
      "--global-batch", "64", "--recompute", "full"], "recompute"),
    (["plan", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "8", "--global-batch", "4"],
     "Best layouts"),
    (["serve", "llama-3.1-405b", "--cluster", "dgx-h200", "--tp", "8", "--batch", "1,8,64"], "TPOT"),
])
def test_readme_tour(args, expect):
    """The parallel examples (README tour, docs/cli.md) run and say what they promise."""
    assert expect in run(*args).stdout


@pytest.mark.parametrize("text, message", [
    (None, "is a directory, not a cluster profile"),
    ("name: a\nname: b\n", ":2: name: duplicate key"),
    ("- 1\n", "a cluster profile is a YAML mapping, got list"),
    ((CLUSTERS / "dgx-h100.yaml").read_text().replace("bandwidth: 450.0e9", "bandwidth: .inf"),
     "intra_node.bandwidth: Input should be a finite number"),
])
def test_a_bad_cluster_profile_is_one_line_and_exit_2(tmp_path, text, message):
    """A cluster profile is read as every input is (regular file, duplicate keys, a mapping,
    finite numbers): one line naming the file and the field, exit 2."""
    path = tmp_path
    if text is not None:
        path = tmp_path / "c.yaml"
        path.write_text(text)
    result = runner.invoke(app, ["train", "megatron-22b", "--cluster", str(path), "--gpus", "8", "--tp", "8",
                                 "--global-batch", "4", "--micro-batch", "1"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_serve_and_inference_defaults_are_contexts_the_spec_takes():
    """gpt2-small has 1,024 learned positions (issue 23: the defaults were refused, "decode attends
    to 2049 positions"): serve caches 1,023 tokens by default, one less than the context, and
    inference prompts 1024 - 256 = 768 tokens before its 256 generated ones. A spec with a longer
    context keeps 2,048."""
    serve = ("--cluster", "dgx-h100", "--tp", "1", "--format", "json")
    served = json.loads(run("serve", "gpt2-small", *serve).stdout)
    assert served["results"][0]["context"] == 1023
    long = json.loads(run("serve", "llama-2-7b", *serve).stdout)
    assert long["results"][0]["context"] == 2048
    inferred = json.loads(run("inference", "gpt2-small", "--hardware", "h100-sxm", "--format", "json").stdout)
    assert (inferred["prompt"], inferred["output"]) == (768, 256)
