"""The measured MoE (grouped GEMM) and MLA core tables (specs/kernels/<gpu>/moe.json, mla.json;
costmodel.devices.kernels) and the time model reading them (costmodel.runtime.fused_moe,
fused_attention.mla_core): a lookup at a grid node is the stored measurement, a MoE spec's
routed experts take the table's time (not the dense products') and stay above their physics
floor, and a bad file is one line naming the file, the table and the field."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.devices.hardware import load_hardware
from costmodel.devices.kernels import KernelTables, kernels_root, load_kernels, read_kernels
from costmodel.runtime.timing import Kernels, predict
from costmodel.spec import SpecError

#: Mixtral 8x7B's experts: d_model 4,096, 8 experts of 14,336, top-2 (Jiang et al. 2024).
MIXTRAL = (4096, 14336, 8, 2)


def raw(gpu: str, file: str) -> dict:
    return json.loads((kernels_root() / gpu / file).read_text())


def mixtral_times() -> tuple[list[float], list[float]]:
    """(tokens, seconds) of h100-sxm's bf16 table for Mixtral's experts, read from the JSON."""
    table = next(t for t in raw("h100-sxm", "moe.json")["tables"] if t["dtype"] == "bf16")
    config = next(c for c in table["configs"]
                  if (c["hidden"], c["inter"], c["experts"], c["topk"]) == MIXTRAL)
    return config["axes"]["tokens"], config["time_s"]


def at_node(axis: list[float], times: list[float], tokens: float) -> float:
    """The stored time at `tokens`, held to be no more than any larger measurement's (then the
    lookup's envelope is the measurement itself)."""
    i = axis.index(tokens)
    assert times[i] <= min(times[i:])
    return times[i]


def test_a_moe_lookup_at_a_grid_node_is_the_stored_measurement() -> None:
    axis, times = mixtral_times()
    k = load_kernels("h100-sxm")
    for tokens in (axis[-1], 64):
        got = k.moe("bf16", tokens, *MIXTRAL)
        assert got is not None and got.inside
        assert got.time_s == pytest.approx(at_node(axis, times, tokens), rel=1e-12)
    # a configuration it did not measure is read off another: extrapolated
    other = k.moe("bf16", 64, 7168, 2048, 256, 8)  # DeepSeek-V3's experts, not in H100's bf16 table
    assert other is not None and not other.inside


def test_an_mla_lookup_at_a_grid_node_is_the_stored_measurement() -> None:
    """DeepSeek-V3's 128 heads, 64 sequences of 2,048 tokens (SGLang's absorbed decode on H100):
    a measured node no larger shape was measured faster than, so the envelope is the measurement."""
    import itertools

    data = raw("h100-sxm", "mla.json")["decode"]
    table = next(t for t in data["tables"] if t["kv_dtype"] == "bf16")
    axes = [table["axes"][a] for a in ("heads", "batch", "seq")]
    shape = (128, 64, 2048)
    idx = [axis.index(x) for axis, x in zip(axes, shape, strict=True)]
    flat = (idx[0] * len(axes[1]) + idx[1]) * len(axes[2]) + idx[2]
    assert flat not in table["filled"]
    larger = [(i * len(axes[1]) + j) * len(axes[2]) + k for i, j, k in itertools.product(
        *(range(n, len(axis)) for n, axis in zip(idx, axes, strict=True)))]
    assert table["time_s"][flat] <= min(table["time_s"][f] for f in larger)
    got = load_kernels("h100-sxm").mla("decode", 64, 2048, 128, "bf16")
    assert got is not None and got.inside and got.time_s == pytest.approx(table["time_s"][flat], rel=1e-12)
    assert data["source"]["kv_lora_rank"] == 512 and data["source"]["framework"] == "sglang"


def test_a_moe_step_reads_the_table_and_stays_above_its_floor(monkeypatch) -> None:
    """Mixtral 8x7B, a decode step at batch 64 on an H100: each expert product (gate, up, down)
    takes a third of the measured layer time at 64 tokens, x 32 layers; without the table the
    dense products give another time. Every expert row holds its physics floor either way."""
    axis, times = mixtral_times()
    hw = load_hardware("h100-sxm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = analyze(catalog.load("mixtral-8x7b"), "decode", batch=64, seq=2048)
    kernels = Kernels(flash_attention=True, fused=True)
    p = predict(a, hw, kernels)
    rows = {r.key.leaf: r for r in p.rows if r.key.part == "experts"}
    layer = at_node(axis, times, 64)
    for leaf in ("gate", "up", "down"):
        assert rows[leaf].time_s == pytest.approx(32 * layer / 3, rel=1e-12)
        assert rows[leaf].time_s >= rows[leaf].roofline_s + 32 * hw.efficiency.floor_s
    assert rows["act"].kind == "fused"
    assert "moe/bf16" in p.errors and "moe/bf16" not in p.extrapolated
    monkeypatch.setattr(KernelTables, "moe_table", lambda *args: None)
    q = predict(a, hw, kernels)
    dense = {r.key.leaf: r for r in q.rows if r.key.part == "experts"}
    assert dense["gate"].time_s != pytest.approx(rows["gate"].time_s, rel=0.01)
    assert dense["act"].kind == "fused" and "moe/bf16" not in q.errors  # `fused` folds it there


def bad_folder(tmp_path: Path, file: str, data: dict) -> Path:
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / file).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(("field", "value", "message"), [
    ("topk", "2", "moe.json: tables[0] (bf16).configs[0]: topk: must be a positive integer"),
    ("topk", 9, "moe.json: tables[0] (bf16).configs[0]: topk: 9 experts a token, but only 8"),
    ("time_s", [1e-3, -1.0], "moe.json: tables[0] (bf16).configs[0]: time_s: every time must be a positive"),
])
def test_a_bad_moe_file_is_one_line_naming_file_table_and_field(tmp_path, field, value, message) -> None:
    config = {"hidden": 4096, "inter": 14336, "experts": 8, "topk": 2, "axes": {"tokens": [1, 2]},
              "time_s": [1e-3, 2e-3], field: value}
    folder = bad_folder(tmp_path, "moe.json", {"tables": [{"dtype": "bf16", "configs": [config]}]})
    with pytest.raises(SpecError) as e:
        read_kernels(folder)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_mla_file_without_its_latent_sizes_is_refused(tmp_path) -> None:
    table = {"kv_dtype": "bf16", "axes": {"heads": [128], "batch": [1], "seq": [2]}, "time_s": [1e-5]}
    data = {"decode": {"source": {"kv_lora_rank": 512}, "tables": [table]}}
    folder = bad_folder(tmp_path, "mla.json", data)
    line = r"^mla.json: decode: source.qk_rope_head_dim: must be a positive integer$"
    with pytest.raises(SpecError, match=line):
        read_kernels(folder)
