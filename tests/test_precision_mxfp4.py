"""MXFP4 routed experts (costmodel.precision): gpt-oss's checkpoints against a count by hand and
the model card's checkpoint sizes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze
from costmodel.cli import app
from costmodel.precision import Widths
from costmodel.runtime.memory import MemoryConfigError, Run, memory

runner = CliRunner()
GIB = 2**30
# gpt-oss-20b, config.json (tests/hf_configs.py RELEASED): 24 layers, d = f_e = 2880, 32 experts
L, D, F, E = 24, 2880, 2880, 32
EXPERT_ELEMENTS = L * E * (D * F + D * F + F * D)  # gate, up and down matrices of every expert
TOTAL = 20_914_757_184  # the spec's published exact count (transformers, meta device)


@pytest.fixture(scope="module")
def oss20():
    return catalog.load("gpt-oss-20b")


def test_the_experts_at_4_25_bits_and_the_rest_at_bf16_is_the_hand_count(oss20) -> None:
    # 4-bit elements plus one E8M0 byte per 32 (OCP MX v1.0): 17/32 bytes an element; the experts'
    # biases, attention, router, norms, embedding and head at 2 bytes
    hand = EXPERT_ELEMENTS * 17 // 32 + (TOTAL - EXPERT_ELEMENTS) * 2
    a = analyze(oss20, "decode", seq=1000, weights_dtype="mxfp4")
    assert a.total().params == TOTAL and a.bytes_weights == hand
    assert memory(oss20, "decode", 1, 1000, None, Run(weights_dtype="mxfp4")).total("weights") == hand
    # a decode step at batch 1 reads the weights of 4 experts out of 32 a layer: what it moves falls
    # by 2 - 17/32 bytes on each expert element it reads, nothing else changes
    bf16 = analyze(oss20, "decode", seq=1000).total()
    assert bf16.bytes_fused - a.total().bytes_fused == EXPERT_ELEMENTS * 4 // E * (2 * 32 - 17) // 32
    assert (a.total().flops, a.total().kv_cache) == (bf16.flops, bf16.kv_cache)


def test_the_checkpoints_are_the_model_cards_sizes() -> None:
    """Model card (arXiv:2508.10925) Table 1, checkpoint size: 12.8 GiB (20b), 60.8 GiB (120b);
    section 2.4: the 20b runs in 16 GB, the 120b on one 80 GB GPU."""
    for name, gib in (("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)):
        held = analyze(catalog.load(name), "decode", seq=1, weights_dtype="mxfp4").bytes_weights
        assert abs(held / GIB - gib) < 0.05, (name, held / GIB)
    assert held < 80e9


def test_mxfp4_is_refused_where_there_are_no_routed_experts() -> None:
    llama = catalog.load("llama-3-8b")
    with pytest.raises(AnalysisError, match="^weights-dtype: mxfp4 holds .* llama-3-8b has none"):
        analyze(llama, "decode", seq=10, weights_dtype="mxfp4")
    with pytest.raises(MemoryConfigError, match="^weights-dtype: mxfp4"):
        memory(llama, "decode", 1, 10, None, Run(weights_dtype="mxfp4"))
    out = runner.invoke(app, ["memory", "llama-3-8b", "-p", "decode", "--weights-dtype", "mxfp4"])
    assert out.exit_code == 2 and "weights-dtype: mxfp4" in out.output


def test_a_sweep_holds_the_experts_at_mxfp4(oss20) -> None:
    """The sweeps' tree at widths (``analysis.symbolic_tree``: keys, not paths, pick the experts)
    agrees with analyze (whose rows are whole bytes: a batch of 8 reads a fractional expected
    number of experts, so within a byte a row)."""
    import numpy as np

    from costmodel.studies.sweep import Evaluator

    ev = Evaluator(oss20, "decode", "bf16", widths=Widths("mxfp4"))
    got = ev(np.array([[1, 8]]), np.array([[1], [300]]))
    for i, s in enumerate([1, 300]):
        for j, b in enumerate([1, 8]):
            a = analyze(oss20, "decode", batch=b, seq=s, weights_dtype="mxfp4")
            assert abs(got["bytes_fused"][i, j] - a.total().bytes_fused) <= len(a.rows)
    bf16 = analyze(oss20, "decode", batch=8, seq=300).total().bytes_fused
    assert got["bytes_fused"][1, 1] < bf16 - 1e9  # the experts' reads did shrink
