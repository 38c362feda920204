"""Issue 23: nothing silently wrong, nothing unrunnable at exit 0, no crash or hang still
reachable. Each case of the issue is a test here, run through the CLI as a user runs it: exit 0
ok, 1 ran but does not fit (or a check failed), 2 bad input, with one `error:` line saying why."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
HARDWARE = ROOT / "specs" / "hardware"
CLUSTERS = ROOT / "specs" / "clusters"
ERROR_LINE = re.compile(r"^(error|warning): \S.*$")


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), \
        result.exception
    return result


def fails(*args: str, code: int = 2) -> str:
    """The command exits `code`, its stderr only `error:`/`warning:` lines, one of them an error;
    returns the error line."""
    result = invoke(*args)
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert lines and all(ERROR_LINE.match(line) for line in lines), result.stderr
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def bounded(*args: str, seconds: float = 60) -> subprocess.CompletedProcess[str]:
    """The command in a child process that must end within `seconds`: a hang that comes back
    fails the test instead of stalling the suite."""
    return subprocess.run([sys.executable, "-c", "from costmodel.cli import main; main()", *args],
                          capture_output=True, text=True,
                          timeout=seconds, check=False)


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def profile(tmp_path: Path, kind: str, name: str, change: dict[str, object], under: str | None = None) -> str:
    """A bundled profile with `change` applied (at `under`: intra_node, efficiency, ...), as a file."""
    data = yaml.safe_load(((HARDWARE if kind == "hardware" else CLUSTERS) / f"{name}.yaml").read_text())
    (data[under] if under else data).update(change)
    path = tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# --- profiles: strict, finite and bounded numbers ----------------------------------------------


@pytest.mark.parametrize(("change", "under"), [
    ({"memory_bandwidth": 1e-300}, None),
    ({"peak_flops": {"bf16": 1e-300, "fp32": 66.9e12}}, None),
    ({"memory_bytes": 1e-300}, None),
    ({"floor_s": float("inf")}, "efficiency"),
    ({"memory": {"bytes": [1.0, 1e6], "efficiency": [0.5, 5.0]}}, "efficiency"),
])
def test_hardware_profile_out_of_range_is_bad_input(tmp_path: Path, change: dict[str, object],
                                                   under: str | None) -> None:
    path = profile(tmp_path, "hardware", "h100-sxm", change, under)
    assert path in fails("inference", "llama-3-8b", "--hardware", path, "-f", "json")
    assert path in fails("analyze", "llama-3-8b", "--hardware", path)


@pytest.mark.parametrize("change", [{"efficiency": True}, {"efficiency": "0.5"}, {"bandwidth": 1e-300},
                                    {"latency": float("inf")}])
def test_cluster_profile_out_of_range_is_bad_input(tmp_path: Path, change: dict[str, object]) -> None:
    path = profile(tmp_path, "cluster", "dgx-h100", change, "intra_node")
    assert "intra_node" in fails("serve", "llama-3-8b", "--cluster", path)


def test_cluster_on_a_tiny_device_is_bad_input(tmp_path: Path) -> None:
    device = profile(tmp_path, "hardware", "h100-sxm", {"memory_bandwidth": 1e-300})
    cluster = profile(tmp_path, "cluster", "dgx-h100", {"device": device})
    fails("train", "llama-3-8b", "--cluster", cluster, "-n", "8", "-G", "8", "--tp", "4")
    fails("plan", "llama-3-8b", "--cluster", cluster, "-n", "8", "-G", "8")


def test_calibrate_keeps_efficiencies_at_most_one() -> None:
    from costmodel.measure.calibrate import fractions

    # A small op in cache beats the large copy's bandwidth: the peak becomes the best rate.
    assert fractions([5.0, 20.0, 10.0], 10.0) == ([0.25, 1.0, 0.5], 20.0)
    assert fractions([5.0, 10.0], 20.0) == ([0.25, 0.5], 20.0)


# --- names resolve exactly, case and separators aside ------------------------------------------


@pytest.mark.parametrize(("option", "name", "closest"), [
    (("inference", "llama-3-8b", "--hardware"), "h1", "h100-sxm"),
    (("inference", "llama-3-8b", "--hardware"), "h100", "h100-sxm"),
    (("serve", "llama-3-8b", "--cluster"), "dgx", "dgx-a100-80gb or dgx-h100"),
    (("analyze",), "llama-3-8", "llama-3-8b"),
])
def test_a_prefix_is_refused_naming_the_closest(option: tuple[str, ...], name: str, closest: str) -> None:
    line = fails(*option, name)
    assert name in line and f"did you mean {closest}" in line


@pytest.mark.parametrize(("args", "name"), [
    (("inference", "llama-3-8b", "--prompt", "128", "--output", "8", "--batch", "1",
      "--hardware", "H100_SXM"), "h100-sxm"),
    (("analyze", "Llama-3-8B"), "llama-3-8b"),
    (("serve", "llama-3-8b", "--cluster", "DGX H100"), "dgx-h100"),
])
def test_names_resolve_up_to_case_and_separators(args: tuple[str, ...], name: str) -> None:
    assert name in ok(*args, "-f", "json")


def test_ablate_set_is_read_as_a_spec_file_is() -> None:
    assert "refers to itself" in fails("ablate", "llama-3-8b", "--set", "n_layers=&a [*a]")
    assert "5000 digits" in fails("ablate", "llama-3-8b", "--set", "n_layers=" + "9" * 5000)


# --- memory: the widths asked for, nothing negative --------------------------------------------


def test_memory_dtype_sets_the_inference_weights() -> None:
    data = json.loads(ok("memory", "llama-3-8b", "-p", "decode", "--dtype", "fp32", "-f", "json"))
    bf16 = json.loads(ok("memory", "llama-3-8b", "-p", "decode", "-f", "json"))
    assert data["run"]["weights_dtype"] == "fp32"
    assert data["memory"]["weights"] == 2 * bf16["memory"]["weights"]
    quantised = json.loads(ok("memory", "llama-3-8b", "-p", "decode", "--dtype", "fp32", "--weights-dtype",
                              "bf16", "-f", "json"))
    assert quantised["memory"]["weights"] == bf16["memory"]["weights"]


def test_memory_dtype_in_training_names_precision() -> None:
    # Training's widths are the recipe's: --dtype fp32 printed bf16 weights at exit 0.
    assert "--precision" in fails("memory", "llama-3-8b", "--dtype", "fp32")
    assert "--precision" in fails("memory", "llama-3-8b", "--weights-dtype", "int8")


def test_memory_negative_mask_bytes_is_bad_input() -> None:
    assert "mask_bytes" in fails("memory", "llama-3-8b", "--mask-bytes", "-1")


@pytest.mark.parametrize("tokens", ["-5", "0", "nan", "inf", "1e400"])
def test_train_tokens_finite_and_positive(tokens: str) -> None:
    line = fails("train", "llama-3-8b", "--cluster", "dgx-h100", "-n", "8", "-G", "8", "--tp", "4",
                 "--tokens", tokens)
    assert line.startswith("error: --tokens: ")


# --- unrunnable: exit 1 in every format, with one line saying why ------------------------------


def test_inference_that_cannot_hold_its_weights_exits_1() -> None:
    # 140 GB of bf16 weights on one 80 GB GPU printed a table at exit 0.
    for fmt in ("table", "json"):
        line = fails("inference", "llama-3-70b", "--hardware", "h100-sxm", "-f", fmt, code=1)
        assert "does not fit on one h100-sxm" in line and "80 GB" in line
    result = invoke("inference", "llama-3-70b", "--hardware", "h100-sxm", "-f", "json")
    assert all(not p["fits"] for p in json.loads(result.stdout)["batches"])  # the result is printed
    ok("inference", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1,512")  # one that fits: exit 0


def test_plan_with_no_layout_exits_1_in_json_too() -> None:
    line = fails("plan", "llama-3-8b", "--cluster", "dgx-h100", "-n", "7", "-G", "8", "-f", "json", code=1)
    assert "no valid layout" in line
    result = invoke("plan", "megatron-1t", "--cluster", "dgx-h100", "-n", "8", "-G", "8", "-f", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["fitting"] == 0
    assert "no layout of megatron-1t fits" in result.stderr


@pytest.mark.parametrize("cp", ["0", "-1"])
def test_plan_cp_below_one_is_bad_input(cp: str) -> None:
    # --cp 0 was a ZeroDivisionError, --cp -1 an empty plan at exit 0.
    assert "--cp" in fails("plan", "llama-3-8b", "--cluster", "dgx-h100", "-n", "8", "-G", "8", "--cp", cp,
                           "-f", "json")


def test_encoder_decoder_on_train_and_plan_is_bad_input() -> None:
    for command in ("train", "plan"):
        assert "decoder-only" in fails(command, "t5-11b", "--cluster", "dgx-h100", "-n", "8", "-G", "8",
                                       "-f", "json")


# --- crashes and hangs -------------------------------------------------------------------------


def test_plan_of_a_huge_global_batch_is_quick() -> None:
    from costmodel.parallel.plan import divisors

    start = time.perf_counter()
    assert divisors(10**11, 16) == [1, 2, 4, 5, 8, 10, 16]
    assert divisors(10**12)[-2:] == [5 * 10**11, 10**12]
    assert bounded("plan", "llama-3-8b", "--cluster", "dgx-h100", "-n", "8", "-G", "100000000000", "-f",
                   "json").returncode == 0
    assert time.perf_counter() - start < 30
    assert "--max-micro-batch" in fails("plan", "llama-3-8b", "--cluster", "dgx-h100", "-n", "8", "-G", "8",
                                        "--max-micro-batch", "1000000000000")


def test_inference_of_a_huge_output_is_not_an_internal_error() -> None:
    # The sampled decode steps were float quotients: past 2^53 the last one was missed (KeyError).
    line = fails("inference", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1", "--output",
                 "10000000000000000000", "-f", "json", code=1)
    assert "does not fit" in line


@pytest.mark.parametrize("command", [("inference", "llama-3-8b", "--hardware", "h100-sxm"),
                                     ("serve", "llama-3-8b", "--cluster", "dgx-h100")])
def test_batch_lists_are_bounded(command: tuple[str, ...]) -> None:
    done = bounded(*command, "--batch", ",".join(["1"] * 20_000), seconds=30)
    assert done.returncode == 2 and "at most 64" in done.stderr
    assert "at most" in fails(*command, "--batch", "100000000000000000000")


def test_serve_ep_zero_names_ep() -> None:
    assert fails("serve", "llama-3-8b", "--cluster", "dgx-h100", "--ep", "0").startswith("error: --ep:")


@pytest.mark.parametrize("option", ["--batch", "--seq"])
def test_sweep_fixed_values_past_2_53_are_bad_input(option: str) -> None:
    assert option in fails("sweep", "llama-3-8b", option, "100000000000000000000")


@pytest.mark.parametrize("seq", ["3037000499", "1000000000000"])
def test_measure_seq_past_what_torch_indexes_is_bad_input(seq: str) -> None:
    pytest.importorskip("torch")
    assert "2^63" in fails("measure", "llama-3-8b", "--seq", seq, "-p", "prefill")


@pytest.mark.parametrize(("args", "field"), [
    (("--name", "a" * 300), "name"),
    (("--matmul-size", "10000000000000"), "matmul_size"),
    (("--copy-mib", "100000000000"), "copy_mib"),
    (("--repeats", "1000000000000"), "repeats"),
])
def test_calibrate_bounds_its_options_before_measuring(args: tuple[str, ...], field: str) -> None:
    pytest.importorskip("torch")
    start = time.perf_counter()
    assert fails("calibrate", *args).startswith(f"error: {field}: ")
    assert time.perf_counter() - start < 5


def test_calibrate_into_a_file_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path / "f"))
    assert "is not a folder" in fails("calibrate")


CLUSTER = ("--cluster", "dgx-h100", "-n", "2", "-G", "2", "--seq", "256")


@pytest.mark.parametrize("command", [
    ("inference", "gpt2-small", "--hardware", "h100-sxm", "--prompt", "128", "--output", "4", "--batch", "1"),
    ("sweep", "gpt2-small"),
    ("train", "gpt2-small", *CLUSTER),
    ("plan", "gpt2-small", *CLUSTER),
    ("analyze", "gpt2-small", "--hardware", "h100-sxm", "--seq", "64"),
    ("memory", "gpt2-small", "--hardware", "h100-sxm", "--seq", "64"),
])
def test_plot_paths_checked_before_the_work(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Every chart is drawn by report.svg: .svg added to a bare name."""
    assert "no folder" in fails(*command, "--plot", str(tmp_path / "missing" / "x.png"))
    assert "unknown format" in fails(*command, "--plot", str(tmp_path / "x.xyz"))
    assert "give a file name" in fails(*command, "--plot", "")
    # A folder wrote out.png beside it at exit 0.
    assert "is a folder" in fails(*command, "--plot", str(tmp_path))
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.*"))
    invoke(*command, "--plot", str(tmp_path / "chart"))
    assert (tmp_path / "chart.svg").is_file()


# --- labels say what was computed --------------------------------------------------------------

TRAIN = ("train", "llama-3-8b", "--cluster", "dgx-h100", "-n", "8", "-G", "8")


def test_train_labels_the_recipe_with_the_run_dtype() -> None:
    out = ok(*TRAIN, "--tp", "4")
    assert "bf16-mixed (Megatron)" in out and "fp16-mixed" not in out
    assert "fp16-mixed (Megatron)" in ok(*TRAIN, "--tp", "4", "--dtype", "fp16")
    assert json.loads(ok(*TRAIN, "--tp", "4", "-f", "json"))["recipe"] == "bf16-mixed (Megatron)"


def test_train_names_only_the_overlaps_the_layout_has() -> None:
    out = ok(*TRAIN, "--tp", "4")  # CP 1: no ring attention whose transfers could hide
    assert out.split("overlapped:")[1].splitlines()[0].strip() == "tp_backward"
    one = ok("train", "gpt2-small", "--cluster", "dgx-h100", "-n", "1", "-G", "1", "--seq", "1024")
    assert "overlapped: nothing" in one


def test_train_one_micro_batch_is_singular() -> None:
    out = ok("train", "gpt2-small", "--cluster", "dgx-h100", "-n", "1", "-G", "1", "--seq", "1024")
    assert "1 micro-batch of 1 per DP rank" in out and "1 micro-batches" not in out


@pytest.mark.parametrize(("recompute", "formula"), [("none", "sbh(34 + 5as/h)"), ("selective", "34 sbh"),
                                                     ("full", "2 sbh")])
def test_memory_names_the_korthikanti_row_it_compares(recompute: str, formula: str) -> None:
    out = " ".join(ok("memory", "llama-3-8b", "--recompute", recompute).split())
    assert f"Korthikanti et al. 2022, L x {formula}" in out


def test_header_names_the_spec_context_as_its_maximum() -> None:
    out = ok("memory", "llama-3-8b")  # rows at seq 2048 under the spec's 8192
    assert "max context 8192" in out and "seq=2048" in out


def test_serve_tokens_per_second_names_its_group() -> None:
    out = " ".join(ok("serve", "llama-3-8b", "--cluster", "dgx-h100", "--tp", "8").split())
    assert "tokens/s: output tokens per second of the whole batch on the 8 GPUs of the group (TP8)" in out


# --- Hugging Face configs ----------------------------------------------------------------------


@pytest.mark.slow  # 100,000 layers through PyYAML twice: about 10 s
def test_import_hf_of_a_long_aperiodic_pattern_loads_back(tmp_path: Path) -> None:
    # 100k aperiodic layer_types: analyze took the config, import-hf refused it "aliases nested too deep".
    import random

    rng = random.Random(1)
    config = {"model_type": "gemma2", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "intermediate_size": 512, "num_hidden_layers": 100_000, "vocab_size": 1000,
              "max_position_embeddings": 4096, "sliding_window": 128,
              "layer_types": [rng.choice(["sliding_attention", "full_attention"]) for _ in range(100_000)]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "spec.yaml"
    invoke("import-hf", str(path), "-o", str(out))
    assert out.is_file()
    from costmodel import catalog

    written, read = catalog.load(str(out)), catalog.load(str(path))  # analyze reads the config directly
    assert written.layer_pattern == read.layer_pattern and len(written.layer_pattern or ()) == 100_000


def test_import_hf_rejects_a_dropout_that_is_no_rate(tmp_path: Path) -> None:
    from tests.hf_configs import CONFIGS

    config = {**CONFIGS["phi3"][1], "model_type": "phi3", "embd_pdrop": []}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert "embd_pdrop" in fails("import-hf", str(path))


def test_yaml_aliases_are_still_bounded() -> None:
    from costmodel.loading import LoadError, load_yaml

    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
    with pytest.raises(LoadError, match="aliases"):
        load_yaml(laughs)
