"""fp8-block weights as a block-scaled FP8 checkpoint holds them (``costmodel.precision``:
DeepSeek-V3's and Qwen3's own): the linear layers' matrices at 1 byte but the LM head's and the
router's, an fp32 scale per 128 x 128 block of each weight tensor, the rest 16-bit. The expected
counts are by hand from the architecture's published sizes (config.json), not from the code."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.errors import AnalysisError
from costmodel.precision import Widths, blocks_of
from costmodel.runtime.memory import Run, memory

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
