"""The formula a user reads and the number analyze prints come from the same code: substituting
the spec's sizes and the phase's shape into the symbolic expression gives the exact number."""

from __future__ import annotations

import pytest
import sympy

from costmodel import analyze, formula
from costmodel import symbols as sym
from costmodel.analysis import FORMULA_QUANTITIES
from costmodel.catalog import load
from costmodel.model import spec_values

SPECS = ["llama-2-7b", "mistral-7b", "gemma-2-9b", "t5-11b", "command-r7b", "gpt2-small", "palm-540b"]


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("phase", ["train", "prefill", "decode"])
def test_formula_evaluates_to_the_analyzed_number(name: str, phase: str) -> None:
    spec = load(name)
    batch, seq, enc_seq = 3, 100, 37
    a = analyze(spec, phase, batch=batch, seq=seq, enc_seq=enc_seq if spec.is_encoder_decoder else None)
    values = {**spec_values(spec), **{getattr(sym, n): v for n, v in a.shape.items()}, sym.p: 2}
    total = a.total()
    expected = {
        "params": total.params, "flops": total.flops, "flops_matmul": total.flops_matmul,
        "flops_matmul_effective": total.flops_matmul_effective, "flops_other": total.flops_other,
        "bytes_unfused": total.bytes_unfused, "bytes_fused": total.bytes_fused, "kv_cache": total.kv_cache,
    }
    assert set(expected) == set(FORMULA_QUANTITIES)
    for quantity, number in expected.items():
        expr = formula(spec, quantity, phase, symbolic=True)
        assert expr.xreplace(values) == number, (name, phase, quantity)


def test_substituted_formula_keeps_only_the_phase_symbols() -> None:
    spec = load("llama-2-7b")
    prefill = formula(spec, "flops_matmul", "prefill")
    assert prefill.free_symbols == {sym.B, sym.S}
    decode = formula(spec, "kv_cache", "decode")
    assert decode.free_symbols == {sym.B, sym.C, sym.p}
    # LLaMA-2-7B decode KV cache: 2 * 32 layers * 32 heads * 128 = 262144 elements per token
    assert sympy.expand(decode - 262144 * sym.B * sym.C * sym.p) == 0


def test_symbolic_formula_reads_like_the_paper() -> None:
    """Parameters of a LLaMA block: 2*d*h*d_h (Q, O) + 2*d*k*d_h (K, V) + 3*d*f (SwiGLU) + 2d norms."""
    expr = formula(load("llama-2-7b"), "params", component="layers", symbolic=True)
    L, d, h, k, d_h, f = sym.layer_count("layers", None), sym.d, sym.h, sym.k, sym.d_h, sym.f
    assert sympy.expand(expr - L * (2 * d * h * d_h + 2 * d * k * d_h + 3 * d * f + 2 * d)) == 0
