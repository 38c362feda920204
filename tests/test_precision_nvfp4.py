"""nvfp4 weights as NVIDIA's ModelOpt NVFP4 checkpoints hold them (``costmodel.precision``): the
linear layers' matrices but the LM head's and the router's in 4-bit E2M1, an E4M3 scale per 16
elements along each row's K, an fp32 weight_scale_2 and input_scale per tensor, the rest 16-bit.
The expected counts are by hand from the architectures' published sizes (config.json), not from
the code."""

from __future__ import annotations

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.precision import Widths, blocks_of
from costmodel.runtime.memory import Run, memory


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
