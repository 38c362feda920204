"""Random small specs mixing every design element (hypothesis).

- On the meta device, in all three phases, measured parameters, matmul FLOPs and KV-cache
  bytes equal the formulas exactly.
- On the CPU, the reference model is a working transformer: decoding token S+1 from the cache
  that a prefill of S tokens left gives the logits a full forward over S+1 tokens gives at its
  last position (RoPE offsets, rolling windows, cached cross-attention, position biases).
A failure prints the spec (YAML) and shape that broke it.
"""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

import torch  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import measure  # noqa: E402
from costmodel.spec import Spec, spec_from_dict  # noqa: E402
from tests.helpers import random_spec_data  # noqa: E402

# Seconds each (full models, transformers, hypothesis): out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow


@st.composite
def specs(draw) -> dict:
    """A valid spec mixing the design elements (every element of the registry draws its own)."""
    return random_spec_data(draw)


def _spec(data: dict) -> Spec:
    return spec_from_dict(data, "hypothesis")


def _show(data: dict, **shape) -> str:
    return f"shape {shape}, spec:\n{yaml.safe_dump(data, sort_keys=False)}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=specs(), batch=st.integers(1, 3), seq=st.integers(1, 12), enc_seq=st.integers(1, 6))
def test_random_specs_count_exactly(data: dict, batch: int, seq: int, enc_seq: int) -> None:
    """Every phase of a random spec: parameters, matmul FLOPs and KV cache equal the formulas."""
    spec = _spec(data)
    model = build(spec)
    for phase in ("prefill", "train") if spec.is_encoder else ("prefill", "decode", "train"):
        m = measure(spec, phase, batch=batch, seq=seq, count_bytes=False, model=model,
                    enc_seq=enc_seq if spec.is_encoder_decoder else None)
        wrong = [f"{c.quantity}: formula {c.formula:,} measured {c.measured:,}"
                 for c in m.comparisons if not c.agrees]
        assert not wrong, f"{phase}: {wrong}\n{_show(data, batch=batch, seq=seq, enc_seq=enc_seq)}"


def decode_matches_prefill(spec: Spec, seq: int, enc_seq: int = 3, batch: int = 2,
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits for token seq+1: (full forward over seq+1 tokens, decode after a prefill of seq)."""
    model = build(spec, "cpu", torch.float32, seed=1).eval()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, spec.vocab_size, (batch, seq + 1), generator=g)
    enc = None
    if spec.is_encoder_decoder:
        enc = torch.randint(0, spec.vocab_size, (batch, enc_seq), generator=g)
    with torch.no_grad():
        full = model(tokens, enc)[:, -1]
        cache = model.new_cache(batch, seq + 1, enc_seq)
        model(tokens[:, :seq], enc, cache)
        step = model(tokens[:, seq:], None, cache, start=seq)[:, -1]
    return full, step


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=specs(), seq=st.integers(1, 12))
def test_random_specs_decode_from_cache(data: dict, seq: int) -> None:
    """A decode step from the prefill's cache computes what a full forward computes."""
    spec = _spec(data)
    # The reference routes a mixture of experts by a token's index in its pass (round robin, for
    # exact counts), so a token decoded alone meets other experts than in the prompt: by design.
    assume(spec.moe is None)
    assume(not spec.is_encoder)  # an encoder-only model decodes nothing
    full, step = decode_matches_prefill(spec, seq)
    assert torch.allclose(full, step, atol=1e-5, rtol=1e-4), _show(data, seq=seq)
