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
from costmodel.catalog import load_spec
from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import keep_layers, measure  # noqa: E402
from costmodel.spec import Spec  # noqa: E402

# Seconds each (full models, transformers, hypothesis): out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow


PHASES = ("prefill", "decode", "train")
LONG = 9000  # beyond every bundled sliding window (128 to 4096) and chunk (8192), capped by learned tables


def depth(spec: Spec) -> int:
    """The fewest first layers that hold every kind of layer the spec has (attention kind x dense
    or sparse FFN; DeepSeek-V3: its 3 dense layers and one sparse; Llama 4 Maverick: 3 chunked
    layers, dense and sparse in turn, then a global NoPE one), at least two for a dense FFN: every
    element is measured on them at both shapes and in every phase. A mixture of experts runs
    each expert as its own module, so one layer suffices where all are alike (Qwen3). The
    full depth is measured once (test_full_depth_counts_equal_formulas): the formulas multiply a
    layer's cost by its group's count, which the cut model does not check."""
    layers = list(zip(spec.layer_kinds(), spec.sparse_layers(), strict=True))
    every = set(layers)
    n = next(i for i in range(1, len(layers) + 1) if set(layers[:i]) == every)
    return min(len(layers), max(1 if spec.moe is not None else 2, n))


@lru_cache(maxsize=1)
def _model(path: Path):
    """One cut meta model per spec, shared by its shapes and phases (the tests run in order).
    A mixture of experts runs each expert as its own module (qwen3-235b: 128 per layer), a Python
    loop per expert: the cut keeps that cheap too."""
    spec = load_spec(path)
    spec = keep_layers(spec, depth(spec))
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
    for phase in (p for p in PHASES if not (spec.is_encoder and p == "decode")):  # an encoder: no decode
        m = measure(spec, phase, **shape, count_bytes=False, model=model)
        wrong = [f"{c.quantity}: formula {c.formula:,} measured {c.measured:,}"
                 for c in m.comparisons if not c.agrees]
        where = [f"{r.path}: params {r.params}, matmul {r.flops_matmul}" for r in m.components
                 if r.params[0] != r.params[1] or r.flops_matmul[0] != r.flops_matmul[1]]
        assert not wrong, f"{spec.name} {phase} {shape}: {wrong}; components (formula, measured): {where}"


DENSE = [p for p in catalog.bundled_paths() if load_spec(p).moe is None]


@pytest.mark.parametrize("path", DENSE, ids=lambda p: p.stem)
def test_full_depth_counts_equal_formulas(path: Path) -> None:
    """The whole model (every layer; mixtures of experts excepted: their experts are a Python
    loop), short prompt, prefill: parameters, matmul FLOPs and KV bytes equal the formulas, so the
    layer groups' counts (the pattern repeated and cut at the last layer) are right too."""
    spec = load_spec(path)
    m = measure(spec, "prefill", **shapes(spec)[0], count_bytes=False, model=build(spec))
    wrong = [f"{c.quantity}: formula {c.formula:,} measured {c.measured:,}" for c in m.comparisons if
             not c.agrees]
    assert not wrong, f"{spec.name}: {wrong}"
