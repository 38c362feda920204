"""Absorbed latent attention's two per-head products (``kv_b``: pre, q_nope @ W_UK; post, the
latent output @ W_UV) off TensorRT-LLM's measured mla_bmm tables (specs/kernels/<gpu>/
mla_bmm.trtllm.json; costmodel.runtime.fused_attention.mla_bmm_read): the lookup returns the
file's rows, the time is held at the physics floor, the dtype is the kv projection's weights',
and an engine without the tables (every command without ``--engine trtllm``) is unchanged. The
expected times are read from the JSON file, never from the lookup."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.devices.hardware import load_hardware
from costmodel.devices.kernels import Grid, KernelTables, MLABmmTable, kernels_root, load_kernels
from costmodel.runtime.kernels import KERNELS
from costmodel.runtime.timing import predict
from costmodel.runtime.timing_grid import predict_grid

FLASH = KERNELS["flash"]


def raw(gpu: str, op: str, dtype: str) -> dict[tuple[float, float], float]:
    """(heads, tokens) -> seconds of one product, read from the JSON file."""
    data = json.loads((kernels_root() / gpu / "mla_bmm.trtllm.json").read_text())
    t = next(t for t in data["tables"] if (t["op"], t["dtype"]) == (op, dtype))
    heads, tokens = t["axes"]["heads"], t["axes"]["tokens"]
    return {(h, n): t["time_s"][i * len(tokens) + j]
            for i, h in enumerate(heads) for j, n in enumerate(tokens)}


def kv_b(gpu: str, framework: str | None, batch: int, dtype: str = "bf16", weights: str | None = None,
         mla: str = "absorbed", phase: str = "decode"):
    spec = catalog.load_spec("deepseek-v3")
    a = analyze(spec, phase, batch=batch, seq=2048 if phase == "decode" else 1, dtype=dtype, mla=mla,
                weights_dtype=weights)
    p = predict(a, load_hardware(gpu).with_framework(framework), FLASH)
    return p, [r for r in p.rows if r.key.leaf == "kv_b"]


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "b200"])
def test_the_lookup_returns_the_files_rows_at_measured_shapes(gpu) -> None:
    k = load_kernels(gpu, "trtllm")
    for op in ("pre", "post"):
        for dtype in ("bf16", "fp8"):
            rows = raw(gpu, op, dtype)
            for heads, tokens in [(128, 128), (16, 1), (64, 8192)]:
                # the file's row, on the time envelope every table is read on (the least time measured
                # at this shape or any larger: a few launch-bound rows lie lower)
                want = min(t for (h, n), t in rows.items() if h >= heads and n >= tokens)
                got = k.mla_bmm(op, dtype, heads, tokens)
                assert got is not None and got.inside and got.time_s == pytest.approx(want, rel=1e-12)
            assert want == rows[(64, 8192)]  # at 8,192 tokens the row itself
    # the brief's H200 figures (aiconfigurator's parquet): 128 heads x 128 tokens
    h200 = load_kernels("h200", "trtllm")
    assert [round(h200.mla_bmm(op, d, 128, 128).time_s * 1e6, 1)  # type: ignore[union-attr]
            for d in ("bf16", "fp8") for op in ("pre", "post")] == [10.3, 8.5, 27.8, 35.0]
    assert load_kernels(gpu).mla_bmm_tables == {}  # no framework: none
    assert load_kernels(gpu, "trtllm").mla_bmm("pre", "fp8", 128, 20480).inside is False  # past 8,192


def test_an_fp8_checkpoint_reads_the_fp8_rows_and_bf16_the_bf16_rows() -> None:
    """DeepSeek-V3 decode at 1,024 sequences on an H200 (measured above the floor at both widths):
    each layer's kv_b is the file's pre + post at 128 heads and 1,024 tokens."""
    for dtype, weights, rows in (("bf16", None, "bf16"), ("fp8", "fp8", "fp8"), ("fp8", "fp8-block", "fp8")):
        p, got = kv_b("h200", "trtllm", 1024, dtype, weights)
        per_layer = raw("h200", "pre", rows)[(128, 1024)] + raw("h200", "post", rows)[(128, 1024)]
        for r in got:
            assert r.time_s == pytest.approx(per_layer * r.ops, rel=1e-12) and r.time_s > r.roofline_s
        assert f"mla_bmm/{rows}@trtllm" in p.errors
        assert not any(op.startswith("mla_bmm") for op in p.extrapolated)


def test_the_measured_time_is_held_at_the_physics_floor(monkeypatch) -> None:
    tiny = MLABmmTable("pre", "bf16", Grid([[1, 128], [1, 20480]], [1e-12] * 4, [], (1, 1), "test"),
                       "trtllm", (512, 128, 128))
    monkeypatch.setattr(KernelTables, "mla_bmm_table", lambda self, op, dtype: tiny)
    p, got = kv_b("h200", "trtllm", 64)
    for r in got:
        assert r.time_s == pytest.approx(r.roofline_s + r.ops * p.floor_s, rel=1e-12)


def test_without_the_tables_nothing_changes(monkeypatch) -> None:
    """No framework (vLLM's defaults), or the naive convention (kv_b one linear): the products are
    timed off the GEMM table, as with the framework's mla_bmm tables hidden."""
    before = {(f, mla): [r.time_s for r in kv_b("h200", f, 64, mla=mla)[1]]
              for f in (None, "trtllm") for mla in ("absorbed", "naive")}
    assert before[("trtllm", "absorbed")] != before[(None, "absorbed")]  # the tables are read
    monkeypatch.setattr(KernelTables, "mla_bmm_table", lambda self, op, dtype: None)
    for (f, mla), times in before.items():
        if (f, mla) != ("trtllm", "absorbed"):
            assert [r.time_s for r in kv_b("h200", f, 64, mla=mla)[1]] == times
    assert [r.time_s for r in kv_b("h200", "trtllm", 64)[1]] == before[(None, "absorbed")]
    assert not any("mla_bmm" in op for op in kv_b("h200", None, 64)[0].errors)


def test_the_grid_reads_the_tables_as_predict_does() -> None:
    """A deploy step's body is a prefill of the step's tokens: the sweep's arrays equal predict."""
    spec = catalog.load_spec("deepseek-v3")
    hw = load_hardware("h200").with_framework("trtllm")
    seqs = np.array([1.0, 100.0, 3000.0, 30000.0])
    grid = predict_grid(spec, "prefill", np.ones(1), seqs, hw, "bf16", FLASH, mla="absorbed",
                        select=lambda key: key.leaf == "kv_b")
    for s, g in zip(seqs, grid, strict=True):
        p = predict(analyze(spec, "prefill", batch=1, seq=int(s), mla="absorbed"), hw, FLASH)
        assert g == pytest.approx(sum(r.time_s for r in p.rows if r.key.leaf == "kv_b"), rel=1e-12)
    assert "mla_bmm/bf16@trtllm" in p.extrapolated  # 30,000 tokens: past the measured 8,192 and 20,480
