"""Small helpers for building specs in tests."""

from __future__ import annotations

from typing import Any

from costmodel.spec import Spec, spec_from_dict

#: A LLaMA-shaped decoder small enough to count by hand: d=8, h=2, k=1, d_h=4, f=12, V=10, L=2.
TINY: dict[str, Any] = dict(
    name="tiny",
    d_model=8,
    n_layers=2,
    n_heads=2,
    n_kv_heads=1,
    d_ff=12,
    vocab_size=10,
    max_seq_len=64,
    norm="rmsnorm",
    activation="swiglu",
    position="rope",
)


def tiny(**changes: Any) -> Spec:
    """TINY with some fields changed (None removes a field)."""
    data = {**TINY, **changes}
    return spec_from_dict({k: v for k, v in data.items() if v is not None})
