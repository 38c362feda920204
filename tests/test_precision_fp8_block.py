"""fp8-block weights as a block-scaled FP8 checkpoint holds them (``costmodel.precision``:
DeepSeek-V3's and Qwen3's own): the linear layers' matrices at 1 byte but the LM head's and the
router's, an fp32 scale per 128 x 128 block of each weight tensor, the rest 16-bit. The expected
counts are by hand from the architecture's published sizes (config.json), not from the code."""

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
from costmodel.errors import AnalysisError
from costmodel.precision import Widths, blocks_of
from costmodel.runtime.kernels import KERNELS, default_kernels
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.timing import Prediction, predict

#: DeepSeek-V3's config.json: hidden 7,168, q_lora_rank 1,536, kv_lora_rank 512, rope 64, nope 128,
#: v 128, 128 heads, 256 routed experts and 1 shared of 2,048, dense FFN 18,432, vocabulary
#: 129,280, 61 layers of which the first 3 dense.
D, Q, KV, ROPE, NOPE, V, H, F, E, DENSE, VOCAB = 7168, 1536, 512, 64, 128, 128, 128, 2048, 256, 18432, 129280


def _blocks(k: int, n: int) -> int:
    return -(-k // 128) * -(-n // 128)


def _linear(k: int, n: int) -> int:
    """One k x n fp8 tensor and its fp32 weight_scale_inv grid."""
    return k * n + 4 * _blocks(k, n)


def _attention() -> int:
    return (_linear(D, Q) + _linear(Q, H * (NOPE + ROPE)) + _linear(D, KV + ROPE)
            + _linear(KV, H * (NOPE + V)) + _linear(H * V, D)
            + 2 * (D + Q + KV + D))  # the four norms (input, q_a, kv_a, post): bf16


def _moe_layer() -> int:
    """One MoE layer: attention, the router in bf16, 256 + 1 experts of three 7,168 x 2,048 tensors."""
    return _attention() + 2 * D * E + (E + 1) * 3 * _linear(D, F)


def test_one_deepseek_v3_layer_by_hand() -> None:
    # kv_a's 576 outputs are 5 rows of blocks (the last zero-padded): 56 x 5 scales
    assert _blocks(D, KV + ROPE) == 56 * 5
    spec = catalog.load("deepseek-v3")
    a = analyze(spec, "decode", seq=16, dtype="fp8", weights_dtype="fp8-block")
    whole = a.bytes_weights
    dense_layer = _attention() + 3 * _linear(D, DENSE)
    wide = 2 * (2 * VOCAB * D + D)  # embedding, LM head, final norm: bf16
    assert whole == 58 * _moe_layer() + 3 * dense_layer + wide
    assert _moe_layer() == 11_511_946_464
    # the memory model holds the same bytes (one rule for every command)
    assert memory(spec, "decode", 1, 100, None, Run(dtype="fp8", weights_dtype="fp8-block")).total(
        "weights") == whole


def test_the_whole_checkpoint_against_its_published_size() -> None:
    """deepseek-ai/DeepSeek-V3's safetensors files hold 688,586,727,753 bytes (revision afb92e1;
    docs/serving-data.md): the 61 layers here, plus the MTP module the spec leaves out (one more
    MoE layer, its two norms, a bf16 eh_proj of 14,336 x 7,168, its own copies of the embedding
    and head in bf16, a norm), come within 12 MB of it: the files' JSON headers and the routers'
    fp32 score biases, which no count here holds."""
    spec = catalog.load("deepseek-v3")
    ours = analyze(spec, "decode", seq=16, weights_dtype="fp8-block").bytes_weights
    mtp = _moe_layer() + 2 * 2 * D + 2 * (2 * D) * D + 2 * 2 * VOCAB * D + 2 * D
    assert 0 < 688_586_727_753 - (ours + mtp) < 12e6


def test_scales_are_a_grid_of_blocks_not_a_pair_a_tensor() -> None:
    spec = catalog.load("deepseek-v3")
    per_tensor = analyze(spec, "decode", seq=16, weights_dtype="fp8").bytes_weights
    block = analyze(spec, "decode", seq=16, weights_dtype="fp8-block").bytes_weights
    assert block > per_tensor
    # a tensor shape unknown: the fewest blocks the weights could be
    assert blocks_of(128 * 128 * 3 + 1, []) == 4
    assert blocks_of(2 * 7168 * 576, [(1, 1, 7168, 576)]) == 2 * 56 * 5


def test_every_spec_with_linear_layers_takes_it() -> None:
    spec = catalog.load("llama-3-8b")
    d, layers, kv, ffn, vocab = 4096, 32, 1024, 14336, 128256
    blocks = layers * (2 * _blocks(d, d) + 2 * _blocks(d, kv) + 3 * _blocks(d, ffn))
    matrices = layers * (2 * d * d + 2 * d * kv + 3 * d * ffn)
    wide = 2 * vocab * d + (2 * layers + 1) * d
    assert analyze(spec, "decode", seq=10, weights_dtype="fp8-block").bytes_weights == (
        matrices + 4 * blocks + 2 * wide)
    with pytest.raises(AnalysisError, match="weights-dtype: unknown 'fp8_block'"):
        Widths("fp8_block").check()


BLOCK_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
               "weight_block_size": [128, 128]}


def test_a_block_scaled_fp8_config_imports_with_one_warning(tmp_path: Path) -> None:
    """DeepSeek-V3's and Qwen3-FP8's quantization_config: the architecture imports, one warning
    line names the width that holds it; another block size is refused as before."""
    from tests.hf_configs import CLASS_SIZES

    config = {"model_type": "deepseek_v3", **CLASS_SIZES["deepseek_v3"], "quantization_config": BLOCK_QUANT}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json", "--weights-dtype", "fp8-block"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"warning: {path}: quantization_config: fp8 in 128 x 128 blocks (E4M3 weights, an fp32 scale per "
        "block): parameters are counted as elements, their bytes at --dtype; --weights-dtype fp8-block holds "
        "and times them as the checkpoint does"]
    other = {**BLOCK_QUANT, "weight_block_size": [1, 128]}
    path.write_text(json.dumps({**config, "quantization_config": other}))
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert "quantization_config: quantised weights are not modelled" in result.output


# --- time: the fp8_block tables ------------------------------------------------------------------

QWEN3_EXPERTS = (4096, 1536, 128, 8)  # Qwen3 235B: hidden, expert width, experts, top_k


def _file_row(gpu: str, file: str, dtype: str) -> dict[str, Any]:
    data = json.loads((kernels_root() / gpu / file).read_text())
    return next(t for t in data["tables"] if t["dtype"] == dtype)


def test_the_lookup_returns_the_measured_fp8_block_rows() -> None:
    """TensorRT-LLM's fp8_block MoE as aiconfigurator measured it (Qwen3's experts on an H200 at
    EP 1: 1.00 ms at 1,024 tokens, 4.95 ms at 8,192, about twice per-tensor fp8's 2.45 ms there)
    and its fp8_block GEMM, read at a measured shape: the file's own number."""
    tables = load_kernels("h200", "trtllm")
    table = _file_row("h200", "moe.trtllm.json", "fp8-block")
    config = next(c for c in table["configs"] if "ep" not in c
                  and (c["hidden"], c["inter"], c["experts"], c["topk"]) == QWEN3_EXPERTS)
    for tokens in (1024, 8192):
        got = tables.moe("fp8-block", tokens, *QWEN3_EXPERTS)
        assert got is not None and got.inside
        measured = config["time_s"][config["axes"]["tokens"].index(tokens)]
        assert got.time_s == pytest.approx(measured, rel=1e-12)
    assert tables.moe("fp8-block", 1024, *QWEN3_EXPERTS).time_s == pytest.approx(1.00e-3, abs=0.01e-3)
    assert tables.moe("fp8-block", 8192, *QWEN3_EXPERTS).time_s == pytest.approx(4.95e-3, abs=0.01e-3)
    assert tables.moe("fp8", 8192, *QWEN3_EXPERTS).time_s == pytest.approx(2.45e-3, abs=0.01e-3)
    gemm = _file_row("h200", "gemm.json", "fp8-block")
    assert gemm["source"]["framework"] == "trtllm" and gemm["source"]["kernel"] == "torch_flow"
    M, N, K = (gemm["axes"][a] for a in ("M", "N", "K"))
    i, j, k = M.index(64), N.index(7168), K.index(2048)
    got = tables.gemm("fp8-block", 64, 7168, 2048)
    assert got is not None and got.inside
    assert got.time_s == pytest.approx(gemm["time_s"][(i * len(N) + j) * len(K) + k], rel=1e-12)


def _qwen3(gpu: str, framework: str | None, phase: str, weights: str | None) -> Prediction:
    spec = catalog.load("qwen3-235b-a22b")
    hw = load_hardware(gpu).with_framework(framework)
    batch, seq = (1, 8192) if phase == "prefill" else (64, 2048)
    a = analyze(spec, phase, batch=batch, seq=seq, dtype="fp8", weights_dtype=weights, kv_dtype="bf16")
    return predict(a, hw, KERNELS[default_kernels(hw, "serve")])


def test_a_block_scaled_prefill_reads_the_slower_kernels_above_the_floor() -> None:
    """Qwen3 on an H200 with TensorRT-LLM's tables: the experts of an 8,192-token prefill read the
    fp8_block MoE (about twice per-tensor fp8's time there), each component at or above the physics
    floor (its FLOPs at the fp8 peak, its bytes, the block scales included, at full bandwidth)."""
    per_tensor, block = (_qwen3("h200", "trtllm", "prefill", w) for w in (None, "fp8-block"))
    assert block.calibrated and not block.extrapolated
    experts = [sum(r.time_s for r in p.rows if r.key.routed_expert) for p in (per_tensor, block)]
    assert 1.8 < experts[1] / experts[0] < 2.2
    hw = load_hardware("h200")
    assert all(r.time_s >= r.roofline_s * (1 - 1e-12) for r in block.rows)
    for path in ("layers/attention/q", "layers/ffn/experts/up"):
        r = next(r for r in block.rows if r.path == path)
        assert r.roofline_s >= max(r.flops / hw.peak("fp8"), r.bytes / hw.memory_bandwidth) * (1 - 1e-12)


def test_without_an_fp8_block_table_the_fallback_is_said() -> None:
    """vLLM's default MoE tables have no fp8_block rows: the experts read per-tensor fp8's, and the
    prediction names it among the op classes read past the tables; a GPU without fp8 (A100) times
    block-scaled weights by the roofline and says so."""
    p = _qwen3("h200", None, "decode", "fp8-block")
    assert "moe/fp8-block (none measured: moe/fp8, per-tensor)" in p.extrapolated
    spec = catalog.load("qwen3-235b-a22b")
    a = analyze(spec, "decode", batch=8, seq=512, dtype="bf16", weights_dtype="fp8-block")
    a100 = predict(a, load_hardware("a100-80gb"))
    assert not a100.calibrated and a100.note is not None and "fp8-block weights" in a100.note
