"""The measured kernel tables (specs/kernels/, costmodel.devices.kernels): the lookup, its
interpolation and extrapolation, the bundled folders, and bad files."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from costmodel.catalog import specs_dir
from costmodel.devices.hardware import load_hardware
from costmodel.devices.kernels import Grid, kernels_root, load_kernels, read_kernels
from costmodel.spec import SpecError

GPUS = ["a100-80gb", "h100-sxm", "h200", "b200"]


def raw(name: str, file: str) -> dict:
    return json.loads((specs_dir() / "kernels" / name / file).read_text())


# --- the grid lookup --------------------------------------------------------------------------


def grid() -> Grid:
    # t = M x N (seconds), a product: exact under log-log interpolation
    M, N = [1.0, 4.0, 16.0], [2.0, 8.0]
    return Grid([M, N], [m * n for m in M for n in N], [5], (1, 1), "test")


def test_a_grid_point_is_the_measurement_and_between_points_log_log() -> None:
    g = grid()
    assert g(4, 2).time_s == pytest.approx(8) and g(4, 2).inside
    assert g(2, 4).time_s == pytest.approx(8)  # sqrt(1*4) x sqrt(2*8): exact for a power law
    # a linear interpolation would give (1 + 4) / 2 x (2 + 8) / 2 = 12.5
    assert g(2.5, 2).time_s == pytest.approx(2.5 * 2)


def test_outside_the_grid_the_time_is_held_below_and_grows_with_the_work_above() -> None:
    g = grid()
    below = g(0.5, 2)
    assert below.time_s == pytest.approx(2) and not below.inside  # held: less work is no faster
    above = g(64, 2)
    assert above.time_s == pytest.approx(64 * 2) and not above.inside  # linear beyond the last point


def test_a_filled_point_makes_the_lookup_extrapolated() -> None:
    g = grid()  # flat index 5: (16, 8)
    assert not g(16, 8).inside and g(16, 2).inside
    assert not g(10, 5).inside  # a corner of its cell is the filled point


# --- the bundled folders ----------------------------------------------------------------------


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_has_gemm_attention_and_collective_tables_with_sources(name) -> None:
    k = load_kernels(name)
    assert "bf16" in k.gemms
    assert k.attention_tables["prefill"] and k.attention_tables["decode"]
    assert set(k.collectives) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    for key in ("gemm/bf16", "attention/prefill", "attention/decode", "collectives"):
        s = k.sources[key]
        assert s["package"] == "aiconfigurator-core 0.12.0" and s["path"].startswith("aiconfigurator_core/")
        assert s["framework"] in ("vllm", "nccl") and s["version"] and s["kernel"] and s["wheel_sha256"]
    assert load_hardware(name).kernel_tables() is k  # the profile names its folder; read once


def test_each_table_records_the_gpu_it_was_measured_on() -> None:
    devices = {n: raw(n, "gemm.json")["tables"][0]["source"]["device"] for n in GPUS}
    assert devices == {
        "a100-80gb": "NVIDIA A100-SXM4-80GB",
        "h100-sxm": "NVIDIA H100 80GB HBM3",
        "h200": "NVIDIA H200",
        "b200": "NVIDIA B200",
    }


def test_measured_times_never_beat_the_datasheet() -> None:
    """No measured GEMM runs above its profile's peak, no decode attention reads its cache faster
    than the datasheet bandwidth: the tables and the profiles agree on what the GPU is."""
    for name in GPUS:
        hw, k = load_hardware(name), load_kernels(name)
        for dtype, g in k.gemms.items():
            peak = hw.peak(dtype)
            M, N, K = g.axes
            nk = len(N) * len(K)
            best = max(
                2 * m * n * kk / (peak * g.times[i * nk + j * len(K) + l])
                for i, m in enumerate(M)
                for j, n in enumerate(N)
                for l, kk in enumerate(K)
            )
            assert best < 0.99, (name, dtype, best)
        for t in k.attention_tables["decode"]:
            width = 1 if t.kv_dtype == "fp8" else 2
            B, S = t.grid.axes
            for i, b in enumerate(B):
                for j, s in enumerate(S):
                    if i * len(S) + j in t.grid.filled:
                        continue
                    cache = b * s * t.kv_heads * t.head_dim * 2 * width
                    assert cache / t.grid.times[i * len(S) + j] < 1.02 * hw.memory_bandwidth, (name, t, b, s)


def test_h100_decode_attention_as_measured_and_its_cache_bandwidth() -> None:
    """vLLM FA3 on an H100 SXM: 64 sequences attending 8,191 tokens (vLLM's row step 8191: its
    collector's sequence length, the new token included), 32 heads on 8 KV heads of 128: 0.688 ms,
    reading 64 x 8191 x 8 x 128 x 2 x 2 B = 2.15 GB at 3.12 TB/s (93% of 3.35)."""
    k = load_kernels("h100-sxm")
    got = k.attention("decode", 64, 8191, 32, 8, 128, "bf16")
    assert got.inside and got.time_s == pytest.approx(0.688e-3, rel=2e-3)
    assert 64 * 8191 * 8 * 128 * 4 / got.time_s == pytest.approx(3.12e12, rel=0.01)
    fp8 = k.attention("decode", 64, 8191, 32, 8, 128, "fp8")
    assert fp8.inside and fp8.time_s < 0.7 * got.time_s  # half the cache bytes


def test_an_unmeasured_head_configuration_reads_the_nearest_scaled_by_its_work() -> None:
    """Decode's work is the cache it reads: 4 KV heads read half of 8's."""
    k = load_kernels("h100-sxm")
    eight = k.attention("decode", 64, 8192, 32, 8, 128, "bf16").time_s
    got = k.attention("decode", 64, 8192, 28, 4, 128, "bf16")
    assert not got.inside
    assert got.time_s == pytest.approx(eight / 2, rel=0.25)


def test_an_unmeasured_configuration_reads_the_table_at_the_batch_doing_its_work() -> None:
    """vLLM measured decode on 1, 2, 4 and 8 KV heads; Llama-2-7B's 32 heads on 32 KV heads of 128
    read the 8-on-8 table (same group, same head size) at four times the batch: 16 sequences of
    32 KV heads read the cache 64 sequences of 8 read. TRT-LLM measured that very shape, 16
    sequences of 4,096 tokens: 355.4 us (holdout.json), and the lookup lands within 1%."""
    k = load_kernels("h100-sxm")
    got = k.attention("decode", 16, 4096, 32, 32, 128, "bf16")
    same_work = k.attention("decode", 64, 4096, 8, 8, 128, "bf16")
    assert not got.inside and got.time_s == same_work.time_s
    assert got.time_s == pytest.approx(355.4e-6, rel=0.01)


def test_a_launch_bound_shape_of_an_unmeasured_configuration_stays_launch_bound() -> None:
    """One sequence of two tokens on 64 heads of 256 (64 KV heads): a few KiB of cache, the
    launch floor's work. Read at the batch doing that work it stays within 1.5x of the GPU's
    fastest measured decode; scaling the nearest table's time by the work (64 KV heads against
    its one) made it 64 times that table's 12 us."""
    k = load_kernels("h100-sxm")
    floor = min(min(t.grid.times) for t in k.attention_tables["decode"])
    got = k.attention("decode", 1, 2, 64, 64, 256, "bf16")
    assert not got.inside and floor <= got.time_s < 1.5 * floor


def test_prefill_attention_grows_quadratically_past_the_grid() -> None:
    k = load_kernels("h100-sxm")
    top = max(k.attention_tables["prefill"][0].grid.axes[1])
    at, past = k.attention("prefill", 1, top, 32, 8, 128), k.attention("prefill", 1, 2 * top, 32, 8, 128)
    assert not past.inside and past.time_s == pytest.approx(4 * at.time_s)


def test_h100_all_reduce_inside_one_node() -> None:
    """NCCL all-reduce of 512 MiB of bf16 on 8 H100s: 2.11 ms, a bus bandwidth of 2 x 7/8 x 512 MiB /
    2.11 ms = 445 GB/s (the NVLink 4 figure nccl-tests report is about 450-480)."""
    k = load_kernels("h100-sxm")
    t = k.collective("all_reduce", 8, 2**29).time_s
    assert 2 * 7 / 8 * 2**29 / t == pytest.approx(445e9, rel=0.01)
    assert k.collective("all_reduce", 1, 2**29) is None  # one GPU communicates nothing


# --- bad files --------------------------------------------------------------------------------


def broken(tmp_path: Path, file: str, edit) -> Path:
    folder = tmp_path / "gpu"
    folder.mkdir()
    data = raw("a100-80gb", file)
    edit(data)
    (folder / file).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("file", "edit", "message"),
    [
        (
            "gemm.json",
            lambda d: d["tables"][0]["axes"]["M"].reverse(),
            "gemm.json: tables[0] (bf16): axes.M: must be positive, finite and strictly increasing",
        ),
        (
            "gemm.json",
            lambda d: d["tables"][0]["time_s"].__setitem__(3, -1.0),
            "gemm.json: tables[0] (bf16): time_s: every time must be a positive",
        ),
        ("gemm.json", lambda d: d["tables"][0].pop("time_s"), "gemm.json: tables[0] (bf16): time_s: missing"),
        ("gemm.json", lambda d: d["tables"][0]["time_s"].pop(), "must hold 9261 values"),
        (
            "attention.json",
            lambda d: d["decode"]["tables"][2].pop("kv_heads"),
            "attention.json: decode.tables[2]: kv_heads: must be a positive integer",
        ),
        (
            "collectives.json",
            lambda d: d["tables"][0].__setitem__("kind", "broadcast"),
            "kind: must be one of",
        ),
    ],
)
def test_a_bad_table_is_one_line_naming_file_table_and_field(tmp_path, file, edit, message) -> None:
    with pytest.raises(SpecError) as e:
        read_kernels(broken(tmp_path, file, edit))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_nan_in_a_table_is_refused(tmp_path) -> None:
    folder = tmp_path / "gpu"
    folder.mkdir()
    text = (kernels_root() / "a100-80gb" / "collectives.json").read_text()
    data = json.loads(text)
    data["tables"][0]["time_s"][0] = "NaN-marker"
    (folder / "collectives.json").write_text(json.dumps(data).replace('"NaN-marker"', "NaN"))
    with pytest.raises(SpecError, match="NaN is not a number"):
        read_kernels(folder)


def test_a_profile_naming_missing_tables_is_one_line_and_exit_2(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from costmodel.cli import app

    profile = (
        (specs_dir() / "hardware" / "h100-sxm.yaml").read_text().replace("kernels: h100-sxm", "kernels: h900")
    )
    (tmp_path / "h900.yaml").write_text(profile.replace("name: h100-sxm", "name: h900"))
    out = CliRunner().invoke(app, ["inference", "gpt2-small", "--hardware", str(tmp_path / "h900.yaml")])
    assert out.exit_code == 2, out.output
    assert "kernels: no measured tables named 'h900'" in out.output


def test_the_folders_are_what_the_scripts_write() -> None:
    """Every bundled folder holds the files the build script writes (TensorRT-LLM's own MoE table
    and absorbed-MLA products everywhere, its MLA table where the default is another framework's)
    and the error bands the validation writes, and nothing else: a hand-edited table would not
    survive a refresh."""
    for name in GPUS:
        own = ["mla.trtllm.json"] if name != "a100-80gb" else []  # A100's mla.json is TRT-LLM's
        assert sorted(p.name for p in (kernels_root() / name).iterdir()) == sorted([
            "attention.json", "collectives.json", "errors.json", "gemm.json", "holdout.json", "mla.json",
            "moe.json", "moe.trtllm.json", "mla_bmm.trtllm.json", *own])
        built = ("gemm.json", "attention.json", "collectives.json", "holdout.json", "moe.trtllm.json",
                 "mla_bmm.trtllm.json", *own)
        for file in built:
            assert raw(name, file)["built_by"] == "bench/build_kernel_tables.py"
        assert raw(name, "errors.json")["built_by"] == "bench/kernel_validation.py"


def test_error_bands_name_what_they_were_measured_against() -> None:
    k = load_kernels("h100-sxm")
    assert {"gemm/bf16", "attention/prefill", "attention/decode", "collectives"} <= set(k.errors)
    label = k.error_label("gemm/bf16")
    assert label.startswith("gemm/bf16: median ") and "vs sglang" in label and "vs trtllm" in label
    assert k.error_label("gemm/int4") is None


def test_a_bad_error_band_is_one_line(tmp_path) -> None:
    shutil.copytree(kernels_root() / "a100-80gb", tmp_path / "copy")
    data = raw("a100-80gb", "errors.json")
    data["bands"]["gemm/bf16"][0]["median"] = "about 5%"
    (tmp_path / "copy" / "errors.json").write_text(json.dumps(data))
    with pytest.raises(SpecError, match="errors.json: gemm/bf16: median, worst, against: missing or not"):
        read_kernels(tmp_path / "copy")


def test_a_copied_folder_reads_the_same(tmp_path) -> None:
    shutil.copytree(kernels_root() / "a100-80gb", tmp_path / "copy")
    k, ref = read_kernels(tmp_path / "copy"), load_kernels("a100-80gb")
    assert k.gemm("bf16", 300, 5000, 7000) == ref.gemm("bf16", 300, 5000, 7000)
    assert math.isfinite(k.gemm("bf16", 300, 5000, 7000).time_s)


# --- what a prediction says of the tables it read ---------------------------------------------


def test_a_prediction_carries_the_bands_of_the_tables_it_read_and_what_it_extrapolated() -> None:
    """llama-3-8b decode on an H100 under flash: the bf16 GEMMs and the decode attention tables
    were read, with errors.json's bands; the LM head's N = 128,256 lies past the GEMM grid's
    65,536, extrapolated. Without flash no attention table is read."""
    from costmodel import catalog
    from costmodel.analysis import analyze
    from costmodel.runtime.timing import Kernels, predict

    hw = load_hardware("h100-sxm")
    a = analyze(catalog.load("llama-3-8b"), "decode", batch=8, seq=2048)
    flash = predict(a, hw, Kernels(flash_attention=True))
    bands = raw("h100-sxm", "errors.json")["bands"]
    assert set(flash.errors) == {"gemm/bf16", "attention/decode"}
    medians = [b["median"] for b in bands["attention/decode"]]
    assert [b.median for b in flash.errors["attention/decode"]] == medians
    assert flash.extrapolated == ("gemm",)
    js = flash.to_dict()
    assert js["errors"]["gemm/bf16"][0]["against"].startswith("vs ") and js["extrapolated"] == ["gemm"]
    assert set(predict(a, hw, Kernels()).errors) == {"gemm/bf16"}
    assert predict(a, load_hardware("l4")).errors == {}  # no measured tables there


def test_inference_says_the_bands_and_the_extrapolation_under_its_table() -> None:
    from typer.testing import CliRunner

    from costmodel.cli import app

    out = CliRunner().invoke(app, ["inference", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "measured kernel tables, error against other frameworks' measurements: gemm/bf16 median" in text
    assert "extrapolated past the measured tables (the kernel model's rule, docs/gpu-time.md): gemm" in text


def test_a_training_step_carries_the_bands_of_its_gemms_and_collectives() -> None:
    import json as _json

    from typer.testing import CliRunner

    from costmodel.cli import app

    args = ["train", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "8", "--tp", "8", "-G", "4"]
    out = CliRunner().invoke(app, [*args, "-f", "json"])
    assert out.exit_code == 0, out.output
    errors = _json.loads(out.stdout)["errors"]
    bands = raw("a100-80gb", "errors.json")["bands"]
    assert set(errors) == {"gemm/bf16", "collectives"}  # fp16 reads bf16's GEMM table
    assert [b["median"] for b in errors["collectives"]] == [b["median"] for b in bands["collectives"]]
