"""fp8 weights as a per-tensor FP8 checkpoint holds them (``costmodel.precision``: ModelOpt's
FP8_DEFAULT_CFG): the linear layers' matrices at 1 byte but the LM head's and the router's, an
fp32 weight and input scale per matrix, the rest 16-bit. The expected counts are by hand from the
architectures' published sizes (config.json), not from the code."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.runtime.memory import Run, memory


def _llama_3_8b_fp8() -> int:
    """Llama 3 8B: d 4096, 32 layers, 8 KV heads of 128, FFN 14,336, vocabulary 128,256."""
    d, layers, kv, ffn, vocab = 4096, 32, 1024, 14336, 128256
    matrices = layers * (2 * d * d + 2 * d * kv + 3 * d * ffn)  # q, o, k, v, gate, up, down
    scales = layers * 7 * 8  # 7 linears a layer, fp32 weight_scale + input_scale
    wide = 2 * vocab * d + (2 * layers + 1) * d  # embedding, LM head, norms: bf16
    return matrices + scales + 2 * wide


def _llama_4_scout_fp8() -> int:
    """Llama 4 Scout: d 5120, 48 layers, 40 query and 8 KV heads of 128, 16 routed experts and a
    shared one of 8,192, a 5,120 x 16 router, vocabulary 202,048."""
    d, layers, kv, inter, experts, vocab = 5120, 48, 1024, 8192, 16, 202048
    matrices = layers * (2 * d * d + 2 * d * kv + 3 * d * inter * (experts + 1))
    scales = layers * (4 + 3 * experts + 3) * 8  # one pair per expert's matrix
    wide = 2 * vocab * d + layers * d * experts + (2 * layers + 1) * d  # + the router, bf16
    return matrices + scales + 2 * wide


@pytest.mark.parametrize(("name", "expected"), [("llama-3-8b", _llama_3_8b_fp8()),
                                                ("llama-4-scout", _llama_4_scout_fp8())])
def test_fp8_weights_hold_what_an_fp8_checkpoint_holds(name: str, expected: int) -> None:
    spec = catalog.load(name)
    # --weights-dtype fp8 beside bf16 activations, and --dtype fp8 (fp8 matmuls): the same rule
    assert analyze(spec, "decode", seq=10, weights_dtype="fp8").bytes_weights == expected
    assert analyze(spec, "decode", seq=10, dtype="fp8").bytes_weights == expected
    # the memory model holds the same bytes (one rule for every command)
    assert memory(spec, "decode", 1, 100, None, Run(dtype="fp8")).total("weights") == expected


def test_fp8_reads_its_matrices_at_one_byte_and_the_head_at_two() -> None:
    spec = catalog.load("llama-3-8b")
    bf16 = {r.path: r for r in analyze(spec, "decode", seq=10).rows}
    fp8 = {r.path: r for r in analyze(spec, "decode", seq=10, weights_dtype="fp8").rows}
    q = 32 * 4096 * 4096
    assert bf16["layers/attention/q"].bytes_unfused - fp8["layers/attention/q"].bytes_unfused == q - 32 * 8
    assert bf16["lm_head"].bytes_unfused == fp8["lm_head"].bytes_unfused
    assert bf16["embedding/tokens"].bytes_unfused == fp8["embedding/tokens"].bytes_unfused


def test_a_training_step_at_fp8_holds_every_parameter_at_one_byte() -> None:
    spec = catalog.load("llama-3-8b")
    a = analyze(spec, "train", seq=10, dtype="fp8")
    assert a.bytes_weights == a.total().params


def test_the_scales_are_the_checkpoints_whatever_the_latent_convention() -> None:
    """DeepSeek-V3 holds kv_b_proj whole (one fp32 weight and input scale a layer), though the
    absorbed forms multiply by it a head at a time: the weights' bytes are the same in every
    latent-attention convention, in analyze and in memory (before, absorbed counted a scale pair
    per head: 61 x 255 more, 124,440 bytes)."""
    spec = catalog.load("deepseek-v3")
    held = {mla: analyze(spec, "decode", batch=1, seq=8, dtype="fp8", mla=mla).bytes_weights
            for mla in ("naive", "absorbed")}
    assert held["naive"] == held["absorbed"]
    kept = {mla: memory(spec, "decode", 1, 8, None, Run(dtype="fp8", mla=mla)).total("weights")
            for mla in ("naive", "absorbed")}
    assert kept["naive"] == kept["absorbed"] == held["naive"]


def test_an_fp8_checkpoints_head_is_timed_as_the_bf16_gemm_it_runs() -> None:
    """The LM head an FP8 checkpoint keeps in bf16 runs as a bf16 GEMM: its prefill time is never
    below its FLOPs at the bf16 peak (read off the fp8 table it took 5.7 ms here, under the 8.7 ms
    that bound allows), and ``predict`` times the step as ``deploy``'s sweep does (which reads
    the wide components off the bf16 table: ``predict_grid`` with ``select``)."""
    import numpy as np

    from costmodel.analysis import held_wide
    from costmodel.devices.hardware import load_hardware
    from costmodel.runtime.kernels import KERNELS
    from costmodel.runtime.timing import predict
    from costmodel.runtime.timing_grid import predict_grid

    spec, hw, kernels = catalog.load("llama-3-8b"), load_hardware("h200"), KERNELS["flash"]
    p = predict(analyze(spec, "prefill", batch=4, seq=2048, dtype="fp8"), hw, kernels)
    head = next(r for r in p.rows if r.key.is_lm_head)
    assert head.time_s >= 2 * 4 * 2048 * spec.d_model * spec.vocab_size / hw.peak("bf16")
    assert {"gemm/bf16", "gemm/fp8"} <= set(p.errors)
    b, s = np.array([4]), np.array([2048])
    swept = (predict_grid(spec, "prefill", b, s, hw, "fp8", kernels, select=lambda k: not held_wide(k))
             + predict_grid(spec, "prefill", b, s, hw, "bf16", kernels, select=held_wide))
    # (the sweep counts the head's activations at 2 bytes, the analysis at --dtype's 1: 6e-5 here)
    assert abs(p.time_s - swept.item()) <= 1e-3 * p.time_s
