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


def random_spec_data(draw: Any) -> dict[str, Any]:
    """A valid small spec mixing every design element, as the YAML mapping a user would write.

    Each element draws its own fields (``Element.sample``), in the registry's order; `draw` is
    hypothesis's draw (inside ``st.composite``). A new element is in this strategy by being in
    the registry.
    """
    from hypothesis import strategies as st

    from costmodel.components import ELEMENTS

    data: dict[str, Any] = {"name": "random"}
    for e in ELEMENTS:
        e.sample(lambda options: draw(st.sampled_from(list(options))), data)
    return data
