"""nvfp4 weights as NVIDIA's ModelOpt NVFP4 checkpoints hold them (``costmodel.precision``): the
linear layers' matrices but the LM head's and the router's in 4-bit E2M1, an E4M3 scale per 16
elements along each row's K, an fp32 weight_scale_2 and input_scale per tensor, the rest 16-bit.
The expected counts are by hand from the architectures' published sizes (config.json), not from
the code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.devices.kernels import kernels_root, load_kernels
from costmodel.precision import Widths, blocks_of
from costmodel.runtime.kernels import KERNELS, default_kernels
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.timing import Prediction, predict


def _linear(k: int, n: int) -> int:
    """One k x n NVFP4 tensor: two elements a byte, n x ceil(k / 16) E4M3 scales, two fp32 scales."""
    return k * n // 2 + n * -(-k // 16) + 8


def test_one_qwen3_30b_a3b_layer_by_hand() -> None:
    # Qwen/Qwen3-30B-A3B config.json: hidden 2,048, 32 heads and 4 KV heads of 128, 128 experts
    # of 768, 48 layers, vocabulary 151,936, untied head, QK-norm per head
    d, h, kv, hd, e, f, layers, vocab = 2048, 32, 4, 128, 128, 768, 48, 151936
    attention = _linear(d, h * hd) + 2 * _linear(d, kv * hd) + _linear(h * hd, d)
    experts = e * (2 * _linear(d, f) + _linear(f, d))
    norms = 2 * (2 * d + 2 * hd)  # input, post-attention, q_norm, k_norm: bf16
    router = 2 * d * e  # bf16
    layer = attention + experts + norms + router
    wide = 2 * (2 * vocab * d + d)  # embedding, LM head, final norm
    spec = catalog.load("qwen3-30b-a3b")
    whole = analyze(spec, "decode", seq=16, weights_dtype="nvfp4").bytes_weights
    assert whole == layers * layer + wide
    # the memory model holds the same bytes (one rule for every command)
    assert memory(spec, "decode", 1, 100, None, Run(weights_dtype="nvfp4")).total("weights") == whole


def test_dense_spec_and_the_fewest_scales() -> None:
    spec = catalog.load("llama-3-8b")
    d, layers, kv, ffn, vocab = 4096, 32, 1024, 14336, 128256
    per_layer = 2 * _linear(d, d) + 2 * _linear(d, kv) + 2 * _linear(d, ffn) + _linear(ffn, d)
    wide = 2 * vocab * d + (2 * layers + 1) * d
    assert analyze(spec, "decode", seq=10, weights_dtype="nvfp4").bytes_weights == (
        layers * per_layer + 2 * wide)
    # 4.5 bits an element plus 8 bytes a tensor: below fp8's byte, above mxfp4's 4.25 bits
    assert blocks_of(2 * 4096 * 576, [(1, 1, 4096, 576)], int, (16, 1)) == 2 * 576 * 256
    assert blocks_of(33, [], int, (16, 1)) == 3  # no shape known: the fewest groups
    assert Widths("nvfp4").label("bf16") == " (nvfp4 weights)"


# --- time: the nvfp4 tables ----------------------------------------------------------------------

QWEN3_EXPERTS = (4096, 1536, 128, 8)  # Qwen3 235B: hidden, expert width, experts, top_k


def _file_row(gpu: str, file: str, dtype: str) -> dict[str, Any]:
    data = json.loads((kernels_root() / gpu / file).read_text())
    return next(t for t in data["tables"] if t["dtype"] == dtype)


def test_the_lookup_returns_the_measured_nvfp4_rows() -> None:
    """TensorRT-LLM's nvfp4 MoE (CUTLASS, balanced routing, EP 1) and nvfp4 GEMM (torch_flow) as
    aiconfigurator measured them on a B200, read at measured shapes: the file's own numbers."""
    tables = load_kernels("b200", "trtllm")
    table = _file_row("b200", "moe.trtllm.json", "nvfp4")
    assert table["source"]["kernel"] == "moe_torch_flow_cutlass"
    config = next(c for c in table["configs"] if "ep" not in c
                  and (c["hidden"], c["inter"], c["experts"], c["topk"]) == QWEN3_EXPERTS)
    for tokens in (1024, 8192):
        got = tables.moe("nvfp4", tokens, *QWEN3_EXPERTS)
        assert got is not None and got.inside
        measured = config["time_s"][config["axes"]["tokens"].index(tokens)]
        assert got.time_s == pytest.approx(measured, rel=1e-12)
    gemm = _file_row("b200", "gemm.json", "nvfp4")
    assert (gemm["source"]["framework"], gemm["source"]["kernel"]) == ("trtllm", "torch_flow")
    M, N, K = (gemm["axes"][a] for a in ("M", "N", "K"))
    t = gemm["time_s"]
    # the lookup reads the time envelope: the least time measured at this shape or any larger one
    for m, n, k in ((64, 7168, 2048), (4096, 16384, 8192)):
        least = min(t[(a * len(N) + b) * len(K) + c] for a in range(M.index(m), len(M))
                    for b in range(N.index(n), len(N)) for c in range(K.index(k), len(K)))
        got = tables.gemm("nvfp4", m, n, k)
        assert got is not None and got.inside
        assert got.time_s == pytest.approx(least, rel=1e-12)
    assert not any(t["dtype"] == "nvfp4" for t in json.loads(
        (kernels_root() / "h200" / "gemm.json").read_text())["tables"])  # no FP4 tensor cores


def _qwen3(gpu: str, phase: str, weights: str | None) -> Prediction:
    spec = catalog.load("qwen3-235b-a22b")
    hw = load_hardware(gpu).with_framework("trtllm")
    batch, seq = (1, 8192) if phase == "prefill" else (64, 2048)
    a = analyze(spec, phase, batch=batch, seq=seq, weights_dtype=weights)
    return predict(a, hw, KERNELS[default_kernels(hw, "serve")])


def test_nvfp4_reads_its_tables_at_the_fp4_peak_above_the_floor() -> None:
    """Qwen3 235B on a B200: the linear layers read the nvfp4 GEMM table, the experts the nvfp4 MoE
    table; every component at or above the physics floor, its FLOPs at the fp4 peak (9 PFLOP/s
    dense, the datasheet's 18 with sparsity) and its bytes, the scales included, at full bandwidth."""
    hw = load_hardware("b200")
    assert hw.peak("nvfp4") == 9.0e15
    p = _qwen3("b200", "prefill", "nvfp4")
    assert p.calibrated and p.note is None
    # gate, up and down: a third each of the measured layer, over Qwen3's 94 layers
    products = sum(r.time_s for r in p.rows if r.key.routed_expert and r.kind == "matmul")
    layer = load_kernels("b200", "trtllm").moe("nvfp4", 8192, *QWEN3_EXPERTS)
    assert layer is not None and products == pytest.approx(94 * layer.time_s, rel=1e-9)
    assert all(r.time_s >= r.roofline_s * (1 - 1e-12) for r in p.rows)
    q = next(r for r in p.rows if r.path == "layers/attention/q")
    assert q.roofline_s >= max(q.flops / 9.0e15, q.bytes / hw.memory_bandwidth) * (1 - 1e-12)
    a = analyze(catalog.load("qwen3-235b-a22b"), "prefill", batch=1, seq=8192, weights_dtype="nvfp4")
    assert q.bytes == next(r.bytes_unfused for r in a.rows if r.path == "layers/attention/q")


def test_hopper_has_no_fp4_tensor_cores_and_says_so() -> None:
    p = _qwen3("h200", "decode", "nvfp4")
    assert not p.calibrated
    assert p.note is not None
    assert p.note.startswith("h200 has no FP4 tensor cores (no fp4 peak in its profile): nvfp4 weights")


NVFP4_QUANT = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
               "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}


def test_an_nvfp4_config_imports_with_one_warning(tmp_path: Path) -> None:
    """A ModelOpt NVFP4 quantization_config: the architecture imports, one warning names the width;
    another group size is refused as before."""
    from tests.hf_configs import CLASS_SIZES

    config = {"model_type": "llama", **CLASS_SIZES["llama"], "quantization_config": NVFP4_QUANT}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json", "--weights-dtype", "nvfp4"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"warning: {path}: quantization_config: NVFP4 (E2M1 weights, an E4M3 scale per 16 and two fp32 "
        "scales a tensor): parameters are counted as elements, their bytes at --dtype; --weights-dtype nvfp4 "
        "holds and times them as the checkpoint does (every linear layer but the LM head and routers; "
        "exclude_modules is not read)"]
    from costmodel.hf.importer import modelopt_nvfp4

    assert modelopt_nvfp4({"quant_method": "modelopt_fp4", "quant_algo": "NVFP4"})
    assert not modelopt_nvfp4({**NVFP4_QUANT, "quant_algo": "FP8"})
    path.write_text(json.dumps({**config, "quantization_config": {**NVFP4_QUANT, "group_size": 32}}))
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert "quantization_config: quantised weights are not modelled" in result.output


def test_a_serving_step_floor_and_the_checkpoints_wide_parts() -> None:
    """A step's physics floor at the fastest peak its GEMMs run at (nvfp4's fp4 under bf16
    activations; a GPU without one keeps --dtype's); at --dtype fp8 an NVFP4 checkpoint's head,
    embedding and router run off the bf16 tables, as an FP8 checkpoint's; absorbed MLA's kv_b
    products read the bf16 tables (NVIDIA's FP4 DeepSeek checkpoints leave kv_b unquantised)."""
    from costmodel.deploy.step import gemm_peak
    from costmodel.runtime.timing import runs_wide

    b200, h200 = load_hardware("b200"), load_hardware("h200")
    assert gemm_peak(b200, "bf16", Widths("nvfp4")) == 9.0e15
    assert gemm_peak(b200, "bf16", Widths("int4")) == gemm_peak(b200, "bf16", Widths()) == 2.25e15
    assert gemm_peak(h200, "bf16", Widths("nvfp4")) == h200.peak("bf16")
    assert runs_wide(b200, "fp8", Widths("nvfp4")) and not runs_wide(b200, "bf16", Widths("nvfp4"))
    tables = load_kernels("b200", "trtllm")
    assert tables.mla_bmm_table("pre", "nvfp4") is tables.mla_bmm_table("pre", "bf16") is not None
