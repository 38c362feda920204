"""Formula fixes that measuring found (no torch needed).

An encoder-decoder's decode step (S_e = 0) does not run the encoder, nor the cross-attention
K/V projections (their output is cached): the formulas once charged every weight of a
component that processes 0 tokens to bytes and to the fused bound (``cost.linear``,
``norm.norm``, the T5 bias table), and let the encoder's self-attention span C_e keys with no
queries (``attention.bidirectional``): T5 11B's decode fused bound was twice the truth.
"""

from __future__ import annotations

import sympy

from costmodel import catalog
from costmodel import symbols as sym
from costmodel.analysis import analyze, formula
from costmodel.catalog import load_spec


def _spec(name: str):
    return load_spec(catalog.specs_dir() / f"{name}.yaml")


def test_encoder_decoder_decode_reads_no_encoder_weights() -> None:
    """T5 decode: the encoder and the cross-attention K/V projections move no bytes."""
    a = analyze(_spec("t5-11b"), "decode", batch=2, seq=100, enc_seq=50)
    encoder = a.total("encoder")
    assert (encoder.bytes_unfused, encoder.bytes_fused, encoder.flops) == (0, 0, 0)
    for leaf in ("k", "v"):
        row = a.total(f"decoder/layers/cross_attention/{leaf}")
        assert (row.bytes_unfused, row.bytes_fused, row.flops) == (0, 0, 0)


def test_encoder_weights_are_read_when_the_encoder_runs() -> None:
    """Prefill reads each encoder weight once: the fused bound is the encoder's parameters
    times 2 bytes (bf16) plus nothing else, since the encoder owns no cache or logits."""
    spec = _spec("t5-11b")
    a = analyze(spec, "prefill", batch=1, seq=64, enc_seq=32)
    encoder = a.total("encoder")
    assert encoder.bytes_fused == 2 * encoder.params


def test_decoder_formulas_read_as_before() -> None:
    """Min(B*S, 1) is 1 for positive B, S: a projection's bytes stay L*p*(B*S*d + d*h*d_h +
    B*S*h*d_h); the encoder's carry Min(1, B*S_e), which decode sets to 0."""
    B, S, S_e, d, h, d_h, p = sym.B, sym.S, sym.S_e, sym.d, sym.h, sym.d_h, sym.p
    L = sym.layer_count("layers", None)
    q = formula(_spec("llama-2-7b"), "bytes", "prefill", "layers/attention/q", symbolic=True)
    assert sympy.expand(q - L * p * (B * S * d + d * h * d_h + B * S * h * d_h)) == 0
    L_enc = sym.layer_count("encoder", None)
    enc_q = formula(_spec("t5-11b"), "bytes_fused", "prefill", "encoder/layers/attention/q", symbolic=True)
    assert sympy.expand(enc_q - L_enc * p * d * h * d_h * sympy.Min(1, B * S_e)) == 0
    assert formula(_spec("t5-11b"), "bytes_fused", "decode", "encoder/layers/attention/q", symbolic=True) == 0
