"""A serving framework's own MoE and MLA tables (specs/kernels/<gpu>/moe.trtllm.json,
mla.trtllm.json; costmodel.devices.kernels): they load and validate, a lookup prefers them per
dtype or phase and falls back to the folder's defaults, their op classes name the framework, and
``deploy --engine trtllm`` (deploy.step's shard) reads them where every command without an engine
reads the defaults. The expected times are read from the JSON files, never from the lookup."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.deploy.engine import ENGINES
from costmodel.deploy.step import Shard
from costmodel.devices.hardware import load_hardware
from costmodel.devices.kernels import kernels_root, load_kernels, read_kernels
from costmodel.parallel.cluster import load_cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS
from costmodel.runtime.timing import predict
from costmodel.spec import SpecError

GPUS = ("a100-80gb", "h100-sxm", "h200", "b200")
#: Mixtral 8x7B's experts: d_model 4,096, 8 experts of 14,336, top-2 (Jiang et al. 2024).
MIXTRAL = (4096, 14336, 8, 2)


def raw_moe(gpu: str, file: str, dtype: str, config: tuple[int, int, int, int],
            layout: tuple[int, int] = (1, 1)) -> dict[float, float]:
    """tokens -> seconds of one configuration at (EP, TP) `layout`, read from the JSON file."""
    table = next(t for t in json.loads((kernels_root() / gpu / file).read_text())["tables"]
                 if t["dtype"] == dtype)
    c = next(c for c in table["configs"] if (c["hidden"], c["inter"], c["experts"], c["topk"]) == config
             and (c.get("ep", 1), c.get("tp", 1)) == layout)
    return dict(zip(c["axes"]["tokens"], c["time_s"], strict=True))


@pytest.mark.parametrize("gpu", GPUS)
def test_every_folders_trtllm_tables_load_validate_and_name_their_source(gpu) -> None:
    k = load_kernels(gpu, "trtllm")  # the MoE and MLA files validated as read (the rest: test_kernels)
    assert k.frameworks == ("trtllm",)
    own = {op: s for op, s in k.sources.items() if op.endswith("@trtllm")}
    assert "moe/bf16@trtllm" in own
    assert ("mla/decode@trtllm" in own) is (gpu != "a100-80gb")  # A100's mla.json is TRT-LLM's already
    for s in own.values():
        assert s["framework"] == "trtllm" and s["path"].startswith("aiconfigurator_core/systems/data/")
        assert "/trtllm/" in s["path"] and s["version"] in s["path"] and s["device"] and s["kernel"]
    for dtype, tables in k.moe_tables.items():
        assert {t.op for t in tables} == {f"moe/{dtype}@trtllm"}


def test_a_framework_table_replaces_the_default_per_dtype_and_falls_back_elsewhere(tmp_path: Path) -> None:
    """moe.trtllm.json with fp8 alone: fp8 reads it (its op named so), bf16 the default's."""
    def table(dtype: str, t: float) -> dict:
        config = {"hidden": 64, "inter": 128, "experts": 8, "topk": 2, "axes": {"tokens": [1, 2]},
                  "time_s": [t, 2 * t]}
        return {"dtype": dtype, "source": {"framework": "x"}, "configs": [config]}

    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "moe.json").write_text(json.dumps({"tables": [table("bf16", 1e-3), table("fp8", 2e-3)]}))
    (folder / "moe.trtllm.json").write_text(json.dumps({"tables": [table("fp8", 5e-4)]}))
    k = read_kernels(folder, "trtllm")
    fp8, bf16 = k.moe_table("fp8", 64, 128, 8, 2), k.moe_table("bf16", 64, 128, 8, 2)
    assert fp8 is not None and fp8.op == "moe/fp8@trtllm" and fp8.grid.times == [5e-4, 1e-3]
    assert bf16 is not None and bf16.op == "moe/bf16" and bf16.grid.times == [1e-3, 2e-3]
    default = read_kernels(folder).moe_table("fp8", 64, 128, 8, 2)
    assert default is not None and default.op == "moe/fp8" and default.grid.times == [2e-3, 4e-3]


def test_an_engine_at_ep_or_tp_reads_the_row_measured_there_else_the_ep1_tables(tmp_path: Path) -> None:
    """A row measured at EP 4 (its tokens the EP group's, its experts all E) is what one GPU of
    E/4 local experts reads, at 4x its own tokens, inside; a layout no row has (EP 2) reads the
    local configuration off the EP = 1 tables as before: the nearest, scaled, extrapolated."""
    def config(experts: int, t: float, **layout: int) -> dict:
        return {"hidden": 64, "inter": 128, "experts": experts, "topk": 2, **layout,
                "axes": {"tokens": [4, 8, 16]}, "time_s": [t, 2 * t, 4 * t]}

    folder = tmp_path / "gpu"
    folder.mkdir()
    configs = [config(8, 1e-3), config(8, 5e-4, ep=4), config(2, 3e-4)]
    (folder / "moe.json").write_text(json.dumps({"tables": []}))
    (folder / "moe.trtllm.json").write_text(json.dumps({"tables": [{"dtype": "fp8", "configs": configs}]}))
    k = read_kernels(folder, "trtllm")
    assert len(k.moe_tables["fp8"]) == 2 and len(k.moe_parallel_tables) == 1  # EP = 1 ones apart
    laid = k.laid_out(4, 1)
    row = laid.moe_table("fp8", 64, 128, 2, 2)  # 8 experts over EP 4: 2 a GPU
    assert row is not None and (row.ep, row.experts) == (4, 8) and row.op == "moe/fp8@trtllm"
    got = laid.moe("fp8", 2, 64, 128, 2, 2)  # 2 tokens a GPU: the EP group's 8
    assert got is not None and got.inside and got.time_s == pytest.approx(1e-3, rel=1e-12)
    single = k.moe_table("fp8", 64, 128, 2, 2)  # EP 1: the 2-expert table of its own
    assert single is not None and (single.ep, single.experts) == (1, 2)
    other = k.laid_out(2, 1).moe("fp8", 4, 64, 128, 4, 2)  # EP 2: 4 local experts, no such row
    assert other is not None and not other.inside


@pytest.mark.parametrize(("field", "value", "message"), [
    ("hidden", 0, "moe.trtllm.json: tables[0] (fp8).configs[0]: hidden: must be a positive integer"),
    ("ep", 3, "moe.trtllm.json: tables[0] (fp8).configs[0]: ep: 3 does not divide experts 8"),
    ("tp", 0, "moe.trtllm.json: tables[0] (fp8).configs[0]: tp: must be a positive integer"),
    ("time_s", [1e-3, float("nan")], "moe.trtllm.json: not JSON"),
])
def test_a_bad_framework_file_is_one_line_naming_file_table_and_field(tmp_path, field, value,
                                                                      message) -> None:
    config = {"hidden": 64, "inter": 128, "experts": 8, "topk": 2, "axes": {"tokens": [1, 2]},
              "time_s": [1e-3, 2e-3], field: value}
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "gemm.json").write_text(json.dumps({"tables": []}))
    (folder / "moe.trtllm.json").write_text(json.dumps({"tables": [{"dtype": "fp8", "configs": [config]}]}))
    read_kernels(folder)  # the default reads no framework file
    with pytest.raises(SpecError) as e:
        read_kernels(folder, "trtllm")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_mla_framework_file_without_its_latent_sizes_is_refused(tmp_path) -> None:
    table = {"kv_dtype": "bf16", "axes": {"heads": [128], "batch": [1], "seq": [2]}, "time_s": [1e-5]}
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "gemm.json").write_text(json.dumps({"tables": []}))
    (folder / "mla.trtllm.json").write_text(json.dumps({"decode": {"source": {}, "tables": [table]}}))
    with pytest.raises(SpecError, match=r"^mla.trtllm.json: decode: source.kv_lora_rank: must be a positive"):
        read_kernels(folder, "trtllm")


def mixtral_decode(framework: str | None):
    """Mixtral 8x7B at fp8 on one H200, a decode step of 64 sequences at 2,048 cached tokens, as
    deploy's shard times it (``Shard.device``: the engine's tables)."""
    cluster = load_cluster("dgx-h200")
    shard = Shard(catalog.load("mixtral-8x7b"), 1, 1, "fp8", Widths(), KERNELS["flash"], "absorbed",
                  kernel_framework=framework)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return predict(shard.analyze("decode", 64, 2048), shard.device(cluster), shard.kernels)


def test_deploy_engine_trtllm_times_a_moe_layer_off_trtllms_table_by_hand() -> None:
    """TensorRT-LLM's preset reads moe.trtllm.json: at 64 tokens (a measured node no larger token
    count was measured faster than: the envelope is the measurement), Mixtral's fp8 experts take
    the stored 367.6 us a layer, a third on each of gate, up and down, over 32 layers
    (``fused_moe``: its own configuration, so no factor on the tokens or the time). Without an
    engine the step reads vLLM's table (moe.json), another kernel and time."""
    assert ENGINES["trtllm"].kernel_framework == "trtllm" and ENGINES["vllm"].kernel_framework is None
    own = raw_moe("h200", "moe.trtllm.json", "fp8", MIXTRAL)
    assert all(own[64] <= t for x, t in own.items() if x >= 64)
    p = mixtral_decode(ENGINES["trtllm"].kernel_framework)
    rows = {r.key.leaf: r for r in p.rows if r.key.part == "experts"}
    for leaf in ("gate", "up", "down"):
        assert rows[leaf].time_s == pytest.approx(32 * own[64] / 3, rel=1e-12)
    assert "moe/fp8@trtllm" in p.errors and "moe/fp8" not in p.errors
    assert "moe/fp8@trtllm" not in p.extrapolated
    q = mixtral_decode(None)  # vLLM's FlashInfer CUTLASS fp8 MoE (its table is uneven: its envelope)
    gate = next(r for r in q.rows if r.key.part == "experts" and r.key.leaf == "gate")
    assert "moe/fp8" in q.errors and "moe/fp8@trtllm" not in q.errors
    assert gate.time_s > 2 * rows["gate"].time_s


def test_an_ep_shard_under_trtllm_reads_the_row_measured_at_its_ep_by_hand() -> None:
    """Qwen3-30B-A3B (2,048 x 768, 128 experts top-8) at EP 4 on H200s, bf16, a decode step of 64
    sequences on one attention replica: each GPU holds 32 experts and runs the rows the EP group's
    256 tokens route to them, TensorRT-LLM's row measured at EP 4 at 256 tokens (a third a
    product, over 48 layers), inside; read at EP 1's layout the same 32 experts were extrapolated
    off the nearest EP = 1 table."""
    own = raw_moe("h200", "moe.trtllm.json", "bf16", (2048, 768, 128, 8), (4, 1))
    assert all(own[256] <= t for x, t in own.items() if x >= 256)  # the envelope is the measurement
    cluster = load_cluster("dgx-h200")
    shard = Shard(catalog.load("qwen3-30b-a3b"), 1, 4, "bf16", Widths(), KERNELS["flash"], "absorbed",
                  kernel_framework="trtllm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = shard.analyze("decode", 64, 2048)
        p = predict(a, shard.device(cluster), shard.kernels)
        q = predict(a, cluster.hardware.with_framework("trtllm"), shard.kernels)
    for leaf in ("gate", "up", "down"):
        row = next(r for r in p.rows if r.key.part == "experts" and r.key.leaf == leaf)
        assert row.time_s == pytest.approx(48 * own[256] / 3, rel=1e-12)
    assert "moe/bf16@trtllm" in p.errors and "moe/bf16@trtllm" not in p.extrapolated
    assert "moe/bf16@trtllm" in q.extrapolated


def test_latent_attention_under_trtllm_reads_trtllms_mla_table() -> None:
    """DeepSeek-V3's absorbed decode core on an H200 (128 heads, 64 sequences of 2,048 tokens, the
    new one included): TensorRT-LLM's MLA table under its engine, SGLang's without."""
    data = json.loads((kernels_root() / "h200" / "mla.trtllm.json").read_text())["decode"]
    assert data["source"]["framework"] == "trtllm" and data["source"]["kv_lora_rank"] == 512
    hw = load_hardware("h200")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = analyze(catalog.load("deepseek-v3"), "decode", batch=64, seq=2047, mla="absorbed")
    assert "mla/decode@trtllm" in predict(a, hw.with_framework("trtllm"), KERNELS["flash"]).errors
    assert "mla/decode" in predict(a, hw, KERNELS["flash"]).errors
    got = load_kernels("h200", "trtllm").mla("decode", 64, 2048, 128, "bf16")
    table = next(t for t in data["tables"] if t["kv_dtype"] == "bf16")
    axes = [table["axes"][x] for x in ("heads", "batch", "seq")]
    flat = (axes[0].index(128) * len(axes[1]) + axes[1].index(64)) * len(axes[2]) + axes[2].index(2048)
    assert got is not None and got.inside
    assert got.time_s == pytest.approx(table["time_s"][flat], rel=1e-12)  # no larger shape was faster


def test_commands_without_an_engine_read_the_default_tables() -> None:
    """inference, serve and analyze --hardware load the profile as it is: no framework's tables."""
    assert load_hardware("h200").kernel_framework is None
    assert load_cluster("dgx-h200").hardware.kernel_tables() is load_kernels("h200")
    assert "kernel_framework" not in load_hardware("h200").model_dump()  # never a profile's field


def test_mxfp4_experts_under_trtllm_read_its_w4a16_mxfp4_table_and_the_rest_stays_calibrated() -> None:
    """gpt-oss-20b with its checkpoint's MXFP4 experts (``--weights-dtype mxfp4``) on one H200, a
    decode step of 64 sequences: TensorRT-LLM's w4a16_mxfp4 table (its own configuration, 2,880 x
    2,880 x 32 top-4) times the experts, a third a product over 24 layers, and the bf16 GEMM tables
    the rest; without an engine (vLLM's moe.json has no MXFP4) the pass is the roofline, and says so."""
    own = raw_moe("h200", "moe.trtllm.json", "mxfp4", (2880, 2880, 32, 4))
    assert all(own[64] <= t for x, t in own.items() if x >= 64)
    cluster = load_cluster("dgx-h200")
    for framework in ("trtllm", None):
        shard = Shard(catalog.load("gpt-oss-20b"), 1, 1, "bf16", Widths("mxfp4"), KERNELS["flash"],
                      "absorbed", kernel_framework=framework)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = predict(shard.analyze("decode", 64, 1000), shard.device(cluster), shard.kernels)
        if framework is None:
            assert p.note is not None and "roofline lower bound" in p.note and "mxfp4" in p.note
            continue
        assert p.note is None and p.calibrated and "moe/mxfp4@trtllm" not in p.extrapolated
        # its band: vLLM's and SGLang's w4a16_mxfp4 rows of the same shapes (holdout.json)
        assert {b.against.split()[1] for b in p.errors["moe/mxfp4@trtllm"]} == {"vllm", "sglang"}
        experts = [r for r in p.rows if r.key.part == "experts" and r.key.leaf in ("gate", "up", "down")]
        assert len(experts) == 6  # local and global layers, 12 of each
        for r in experts:
            assert r.time_s == pytest.approx(12 * own[64] / 3, rel=1e-12)
