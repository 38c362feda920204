"""Every bundled spec, built as a PyTorch model on the meta device: at two shapes and in all
three phases, its parameters, matmul FLOPs (FlopCounterMode) and KV-cache bytes equal the
formulas exactly. The two implementations share no code: the formulas are sums of per-element
costs (costmodel.components), the counts come from running the module."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

from costmodel import catalog  # noqa: E402
from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import keep_layers, measure  # noqa: E402
from costmodel.spec import Spec, load_spec  # noqa: E402

PHASES = ("prefill", "decode", "train")
LONG = 9000  # beyond every bundled sliding window (128 to 4096) and chunk (8192), capped by learned tables
MOE_EXPERTS = 128  # experts a mixture of experts runs per test, at most (one Python loop step each)


def moe_layers(spec: Spec) -> int:
    """Leading layers of a mixture of experts to measure: one whole period of its attention
    pattern (at least two layers), cut while its sparse layers hold more than MOE_EXPERTS experts
    in all, to no fewer than one. The reference runs each expert as its own module (qwen3-235b:
    12,032 of them), so these layers stand for the stack: Llama 4 Scout keeps 4 (its 4th is the
    first global NoPE layer), Maverick 3 (dense, sparse, dense: its attention is Scout's),
    gpt-oss-20b 2 (local, global), gpt-oss-120b and Qwen3 1 (gpt-oss-20b measures the same global
    layer; all of Qwen3's layers are alike)."""
    moe = spec.moe
    assert moe is not None
    sparse, n = spec.sparse_layers(), max(2, len(spec.layer_pattern))
    while n > 1 and sum(sparse[:n]) * moe.n_experts > MOE_EXPERTS:
        n -= 1
    return n


@lru_cache(maxsize=1)
def _model(path: Path):
    """One meta model per spec, shared by its shapes and phases (the tests run in order)."""
    spec = load_spec(path)
    if spec.moe is not None:
        spec = keep_layers(spec, moe_layers(spec))
    return spec, build(spec)


def shapes(spec: Spec) -> list[dict]:
    """A short prompt, and a long batched one that slides past every window."""
    enc = spec.is_encoder_decoder
    return [
        dict(batch=1, seq=7, enc_seq=5 if enc else None),
        dict(batch=3, seq=min(LONG, spec.max_seq_len - 1), enc_seq=300 if enc else None),
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["short", "long"])
@pytest.mark.parametrize("path", catalog.bundled_paths(), ids=lambda p: p.stem)
def test_counts_equal_formulas(path: Path, which: int) -> None:
    """Parameters, matmul FLOPs and KV-cache bytes: measured == formula, exactly."""
    spec, model = _model(path)
    shape = shapes(spec)[which]
    for phase in PHASES:
        m = measure(spec, phase, **shape, count_bytes=False, model=model)
        wrong = [f"{c.quantity}: formula {c.formula:,} measured {c.measured:,}"
                 for c in m.comparisons if not c.agrees]
        where = [f"{r.path}: params {r.params}, matmul {r.flops_matmul}" for r in m.components
                 if r.params[0] != r.params[1] or r.flops_matmul[0] != r.flops_matmul[1]]
        assert not wrong, f"{spec.name} {phase} {shape}: {wrong}; components (formula, measured): {where}"
