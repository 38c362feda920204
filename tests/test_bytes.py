"""Bytes guarded by hand-derived counts and by the reference model, not only by snapshots.

The tiny spec (tests/helpers.py): d=8, h=2, k=1, d_h=4, f=12, V=10, L=2, RMSNorm pre, SwiGLU,
RoPE, untied. Every expected value below is worked out on paper from the conventions of
cost.py and phases.py (stated in each docstring), never read back from the code under test.
"""

from __future__ import annotations

import pytest

from costmodel import analyze
from costmodel.analysis import Analysis
from tests.helpers import tiny

P = 2  # bf16


def row(a: Analysis, path: str):
    return next(r for r in a.rows if r.path == path)


def test_kv_cache_unfused_bytes_by_hand():
    """K and V of one token: 2 * k * d_h * p = 2 * 1 * 4 * 2 = 16 bytes. Unfused, the cache
    reads the new K and V and stores them: prefill of 5 tokens 16 * (5 + 5) = 160 per layer,
    320 for 2 layers; decode of 1 token 16 * (1 + 1) * 2 layers = 64."""
    assert row(analyze(tiny(), "prefill", batch=1, seq=5), "layers/attention/kv_cache").bytes_unfused == 320
    assert row(analyze(tiny(), "decode", batch=1, seq=5), "layers/attention/kv_cache").bytes_unfused == 64


def test_training_fused_bytes_are_three_weight_reads_plus_the_ids():
    """The convention (phases.py): a training step reads every weight twice and writes its
    gradient once, 3 x the weights read, plus the token ids in; the logits stay on chip.

    Parameters: embedding V*d = 80; per layer 2 norms 8 + 8, q 64, k 32, v 32, out 64, gate,
    up, down 96 each = 496, x 2 layers = 992; final norm 8; LM head 80: N = 1160. The weights
    a pass reads: all but the table, 1080 x 2 bytes = 2160, plus the 5 gathered rows 5*8*2 = 80:
    2240. Three times that is 6720; ids in: 5 inputs and 5 targets, int64: 80. Total 6800."""
    a = analyze(tiny(), "train", batch=1, seq=5)
    assert a.total().params == 1160
    assert a.total().bytes_fused == 3 * (P * 1080 + 5 * 8 * P) + 2 * 8 * 5 == 6800


def test_rope_reads_its_cos_and_sin_tables():
    """RoPE unfused, per layer: q (B*S*h = 10 heads of d_h = 4) and k (B*S*k = 5) read and
    written, 2 * 15 * 4 = 120 elements, plus the cos and sin tables, 2 * S * r = 2 * 5 * 4 = 40:
    160 elements, 320 bytes; 640 for 2 layers."""
    assert row(analyze(tiny(), "prefill", batch=1, seq=5), "layers/attention/rope").bytes_unfused == 640


def test_cross_entropy_reads_the_target_ids():
    """Unfused, the log-softmax reads the B*S*V = 50 logits and writes 50 log-probabilities
    (2 * 50 * 2 bytes = 200) and the 5 targets are read as int64 (40): 240 forward, and a
    training step counts 3 passes: 720."""
    assert row(analyze(tiny(), "train", batch=1, seq=5), "loss/cross_entropy").bytes_unfused == 3 * 240


def test_score_scaling_is_one_flop_per_score():
    """scores * 1/sqrt(d_h): B*h*S*C = 1*2*5*5 = 50 scores per layer, one multiply each, 100
    for 2 layers; unfused it reads and writes them: 2 * 50 * 2 bytes * 2 layers = 400."""
    r = row(analyze(tiny(), "prefill", batch=1, seq=5), "layers/attention/scale")
    assert (r.flops_other, r.bytes_unfused) == (100, 400)


def test_cross_attention_pairs_are_every_query_with_every_encoder_token():
    """Cross-attention has no mask: S decoder queries each see all C_e encoder outputs. With
    S = 5, C_e = 3: 15 pairs; scores (and AV) 2 * B*h*pairs*d_h = 2*1*2*15*4 = 240 FLOPs per
    layer, dense and effective alike; in decode (S = 1) 2*1*2*3*4 = 48."""
    spec = tiny(architecture="encoder-decoder", n_layers=None, n_encoder_layers=1, n_decoder_layers=1,
                position="t5_relative")
    for phase, expected in (("prefill", 240), ("decode", 48)):
        a = analyze(spec, phase, batch=1, seq=5, enc_seq=3)
        r = row(a, "decoder/layers/cross_attention/scores")
        assert (r.flops_matmul, r.flops_matmul_effective) == (expected, expected), phase
        r = row(a, "decoder/layers/cross_attention/av")
        assert (r.flops_matmul, r.flops_matmul_effective) == (expected, expected), phase


# --- against the reference model: the components whose measured and formula bytes must agree --

EQUAL = ("embedding/tokens", "layers/attention/q", "layers/attention/k", "layers/attention/v",
         "layers/attention/out", "layers/ffn/gate", "layers/ffn/up", "layers/ffn/down", "lm_head")


@pytest.mark.parametrize("changes", [{}, {"activation": "gelu", "bias": True, "tied_embeddings": True}])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_projection_ffn_head_and_embedding_bytes_equal_the_reference_model(phase, changes):
    """A linear layer reads its input and weights and writes its output, and so does
    nn.Linear; a gather reads the ids and the rows it writes: byte for byte, as counted by
    measure.counters on the reference model."""
    pytest.importorskip("torch", reason="the reference model needs the [measure] extra (torch)")
    from costmodel.measure.run import measure

    spec = tiny(**changes)
    m = measure(spec, phase, batch=2, seq=5, dtype="fp32", count_bytes=True)
    counts = {c.path: c.bytes for c in m.components}
    gated = spec.activation.gated
    for path in EQUAL:
        if path == "layers/ffn/gate" and not gated:
            continue
        formula, measured = counts[path]
        assert formula == measured and formula > 0, (path, formula, measured)


@pytest.mark.parametrize("S, C, phase, seq", [(5, 5, "prefill", 5), (1, 6, "decode", 5)])
def test_kv_cache_writes_equal_the_reference_model(S, C, phase, seq):
    """The reference attention's cache write (``Attention.keys``) reads the new K and V and
    stores them into the preallocated cache: the formula's kv_cache bytes of one layer. It also
    builds the C key positions (int64) for its mask, which are not KV-cache traffic."""
    torch = pytest.importorskip("torch", reason="the reference model needs the [measure] extra (torch)")
    from torch.utils.module_tracker import ModuleTracker

    from costmodel.measure.counters import ByteCounter
    from costmodel.measure.reference import Step, build

    spec, B = tiny(), 2
    model = build(spec, "cpu", torch.float32)
    step = Step(positions=torch.arange(C - S, C), context=C, cache=model.new_cache(B, C))
    k, v = torch.randn(B, spec.n_kv_heads, S, spec.head_dim), torch.randn(B, spec.n_kv_heads, S,
                                                                          spec.head_dim)
    with ModuleTracker() as tracker, ByteCounter(tracker) as counter:
        model.cached[0].keys(k, v, step)
    formula = row(analyze(spec, phase, batch=B, seq=seq, dtype="fp32"), "layers/attention/kv_cache")
    assert counter.total - 8 * C == formula.bytes_unfused // spec.n_layers
