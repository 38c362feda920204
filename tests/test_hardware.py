"""Hardware profiles, the user folder `costmodel calibrate` writes to, and `analyze --hardware`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.catalog import specs_dir
from costmodel.cli import app
from costmodel.devices.hardware import Hardware, load_hardware, profile_paths, read_profile, save_hardware
from costmodel.devices.kernels import load_kernels
from costmodel.spec import SpecError

runner = CliRunner()

# Dense peaks: the datasheets print sparse figures (2:4 structured sparsity), twice these.
# name -> (bf16 FLOP/s, fp8 FLOP/s or None, bytes/s, bytes), typed from the vendor documents
# (the V100's first figure is fp16's: Volta has no bf16).
DATASHEETS = {
    "a100-80gb": (624e12 / 2, None, 2039e9, 80e9),  # A100 datasheet: BF16 312/624 TFLOPS, 2,039 GB/s
    "h100-sxm": (1979e12 / 2, 3958e12 / 2, 3.35e12, 80e9),  # H100 SXM: BF16 1,979*, FP8 3,958* (*sparse)
    "h200": (1979e12 / 2, 3958e12 / 2, 4.8e12, 141e9),  # H200 SXM: same tensor cores, HBM3e 4.8 TB/s
    "b200": (4.5e15 / 2, 9e15 / 2, 7.7e12, 180e9),  # HGX B200 per GPU: BF16 4.5 PF*, FP8 9 PF*
    "l4": (242e12 / 2, 485e12 / 2, 300e9, 24e9),  # L4: BF16 242*, FP8 485*, 300 GB/s
    "rtx-4090": (330.4e12 / 2, 660.6e12 / 2, 1008e9, 24e9),  # Ada whitepaper, FP32 accumulate
    # GB200 NVL72 per rack of 72 GPUs: FP16/BF16 360 PF*, FP8 720 PF*, 576 TB/s; 372 GB per 2-GPU superchip
    "gb200": (360e15 / 72 / 2, 720e15 / 72 / 2, 576e12 / 72, 372e9 / 2),
    "mi300x": (2614.9e12 / 2, 5229.8e12 / 2, 5.3e12, 192e9),  # MI300X data sheet: BF16 2614.9*, FP8 5229.8*
    "mi325x": (2614.9e12 / 2, 5229.8e12 / 2, 6.0e12, 256e9),  # MI325X: the same compute, HBM3E 6 TB/s
    "v100-sxm2": (125e12, None, 900e9, 16e9),  # Tesla V100 datasheet, SXM2: tensor 125 TFLOPS, 900 GB/s
}
NO_BF16 = {"v100-sxm2"}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_bundled_profile_matches_its_datasheet(name):
    """Every bundled profile holds the datasheet's dense peaks, bandwidth and memory, and a source."""
    hw = load_hardware(name)
    bf16, fp8, bandwidth, memory = DATASHEETS[name]
    assert hw.peak("fp16") == pytest.approx(bf16, rel=2e-3)
    if name in NO_BF16:
        assert "bf16" not in hw.peak_flops
    else:
        assert hw.peak("fp16") == hw.peak("bf16")
    if fp8 is None:
        assert "fp8" not in hw.peak_flops
    else:
        assert hw.peak("fp8") == pytest.approx(fp8, rel=2e-3)
    assert hw.memory_bandwidth == pytest.approx(bandwidth, rel=1e-3)
    assert hw.memory_bytes == pytest.approx(memory)
    assert hw.source and not hw.measured


def test_readme_hardware_example(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path))  # no user profiles
    result = runner.invoke(app, ["hardware"])
    assert result.exit_code == 0, result.output
    rows = [line.split()[0] for line in result.output.splitlines() if line.split()[1:2] == ["bundled"]]
    assert rows == sorted(DATASHEETS)


def test_ridge_point_is_peak_over_bandwidth():
    """H100 SXM: 989.4 TFLOP/s / 3.35 TB/s = 295.3 FLOP/B."""
    assert load_hardware("h100-sxm").ridge("bf16") == pytest.approx(295.34, abs=0.01)


def test_missing_dtype_is_one_line():
    with pytest.raises(SpecError,
                       match=r"^hardware a100-80gb: no peak FLOP/s for fp8 \(has fp32, bf16, fp16\)$"):
        load_hardware("a100-80gb").peak("fp8")


LOCAL = Hardware(name="local", description="this machine", peak_flops={"bf16": 100e12, "fp32": 20e12},
                 memory_bandwidth=1e12, memory_bytes=16e9, source="costmodel calibrate", measured=True,
                 date="2025-01-01")


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A user folder holding the `local` profile, as `costmodel calibrate` writes it."""
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path))
    save_hardware(LOCAL, tmp_path / "local.yaml")
    return tmp_path


def test_local_profile_is_found_and_listed(user_dir):
    """The calibrated profile is accepted by name and listed beside the bundled ones."""
    assert profile_paths()["local"] == user_dir / "local.yaml"
    assert load_hardware("local") == LOCAL
    result = runner.invoke(app, ["hardware"])
    assert result.exit_code == 0, result.output
    assert "local" in result.output and "measured" in result.output and "h100-sxm" in result.output
    data = json.loads(runner.invoke(app, ["hardware", "-f", "json"]).output)
    local = next(d for d in data if d["name"] == "local")
    assert local["from"] == "user" and local["path"] == str(user_dir / "local.yaml")
    assert local["ridge"]["bf16"] == pytest.approx(100.0)


def test_analyze_accepts_the_local_profile(user_dir):
    result = runner.invoke(app, ["analyze", "llama-2-7b", "-p", "decode", "--hardware", "local", "-f",
                                 "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["phases"]["decode"]["roofline"]["hardware"]["name"] == "local"


def test_a_user_profile_overrides_a_bundled_one(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path))
    save_hardware(LOCAL.model_copy(update={"name": "h100-sxm"}), tmp_path / "h100-sxm.yaml")
    assert load_hardware("h100-sxm").measured


def test_unknown_hardware_is_one_line():
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--hardware", "tpu-v9"])
    assert result.exit_code == 2
    assert result.output.startswith("error: hardware tpu-v9: no such file or profile (known: a100-80gb,")
    assert len(result.output.strip().splitlines()) == 1


def test_analyze_roofline_decode_by_hand():
    """llama-2-7b decode, batch 1, 2047 cached tokens, bf16, on an H100 SXM.

    Fused bytes by hand: every weight once except the embedding table, of which one row is
    gathered: (6,738,415,616 - 32000 x 4096) x 2 = 13,214,687,232; the embedding row 4096 x 2
    and the token id 8; the KV cache, 2 x 32 layers x 4096 x 2 bytes = 524,288 per token, read
    for 2047 tokens and written for 1: 2048 x 524,288 = 1,073,741,824; the logits 32000 x 2.
    Total 14,288,501,256 bytes, 4.27 ms at 3.35 TB/s; the FLOPs take far less: memory-bound.
    """
    result = runner.invoke(app, ["analyze", "llama-2-7b", "-p", "decode", "--hardware", "h100-sxm", "-f",
                                 "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)["phases"]["decode"]
    roof = data["roofline"]
    nbytes = 13_214_687_232 + 8192 + 8 + 1_073_741_824 + 64_000
    assert data["bytes"]["fused_min"] == nbytes
    assert roof["memory_s"] == pytest.approx(nbytes / 3.35e12)
    assert roof["compute_s"] == pytest.approx(data["flops"]["total"] / 989.4e12)
    assert roof["bound"] == "memory" and roof["time_s"] == roof["memory_s"]
    assert roof["ridge"] == pytest.approx(989.4e12 / 3.35e12)
    assert roof["hardware"]["name"] == "h100-sxm"


def test_analyze_table_has_the_roofline_rows():
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--hardware", "h100-sxm"])
    assert result.exit_code == 0, result.output
    for row in ("compute time", "memory time", "roofline time", "ridge point", "bound"):
        assert row in result.output
    # train and prefill at 2048 tokens are compute-bound on an H100, decode at batch 1 memory-bound
    bound = next(line for line in result.output.splitlines() if line.lstrip().startswith("bound"))
    assert bound.split()[-3:] == ["compute", "compute", "memory"]
    assert "4.27 ms" in result.output


def test_analyze_json_for_all_phases_carries_a_roofline_each():
    data = json.loads(runner.invoke(app, ["analyze", "gpt2-small", "--hardware", "l4", "-f", "json"]).output)
    assert {p: d["roofline"]["hardware"]["name"] for p, d in data["phases"].items()} == {
        "train": "l4", "prefill": "l4", "decode": "l4"}


@pytest.mark.parametrize("args", [["analyze", "llama-2-7b", "--hardware", "h100-sxm"], ["attention",
                                                                                        "gemma-2-9b"]])
def test_roofline_commands_stay_off_sympy_and_numpy(args):
    """The roofline and the attention comparison are arithmetic on integer analyses: like
    analyze, they never pay for importing sympy or numpy."""
    import subprocess
    import sys

    code = ("import sys; from typer.testing import CliRunner; from costmodel.cli import app; "
            f"r = CliRunner().invoke(app, {args!r}); "
            "print(r.exit_code, 'sympy' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "False", "False"]


def test_analyze_without_hardware_is_unchanged():
    data = json.loads(runner.invoke(app, ["analyze", "gpt2-small", "-p", "decode", "-f", "json"]).output)
    assert "roofline" not in data


@pytest.mark.parametrize("name", ["mi300x", "mi325x"])
def test_profiles_without_tables_of_their_own_say_so(name):
    """No kernel table was measured on the AMD GPUs: each profile says so and reads none (their
    matmuls on Calculon's borrowed tables)."""
    hw = read_profile(name)
    assert "kernel table" in str(hw.source)
    assert hw.kernels is None
    assert not (specs_dir() / "kernels" / name).exists()
    assert "not measured" in hw.efficiency.source


def test_the_gb200_reads_the_tables_measured_on_a_gb200():
    """aiconfigurator's gb200 collections, not the B200's: every table in its folder names a
    file of the gb200 system and the device the file records."""
    hw = read_profile("gb200")
    assert hw.kernels == "gb200" and "gb200" in str(hw.source)
    tables = load_kernels("gb200")
    assert tables is not None and tables.sources
    for op, src in tables.sources.items():
        assert "/systems/data/gb200/" in src["path"] and "GB200" in src["device"], op


def test_a_profile_is_read_once_until_its_file_changes(tmp_path):
    """``load_hardware`` keeps a profile per file as it stands: asked again, the same (frozen)
    object, by name or by path; the file rewritten with another bandwidth, the new figure."""
    h100 = load_hardware("h100-sxm")
    assert load_hardware("H100_SXM") is h100
    assert load_hardware(str(specs_dir() / "hardware" / "h100-sxm.yaml")) is h100
    path = tmp_path / "dev.yaml"
    first = Hardware(name="dev", peak_flops={"bf16": 1e15}, memory_bandwidth=1e12, memory_bytes=8e10,
                     source="test")
    save_hardware(first, path)
    assert load_hardware(str(path)).memory_bandwidth == 1e12
    save_hardware(first.model_copy(update={"memory_bandwidth": 2e12, "name": "dev2"}), path)
    assert load_hardware(str(path)).memory_bandwidth == 2e12  # rewritten: a new size, read anew
