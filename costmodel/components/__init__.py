"""One module per design element of docs/reference.md, each returning symbolic costs.

Every cost function takes the spec (for its discrete choices: which norm, which activation) and
a ``Dims`` (for the sizes, symbols or integers) and returns ``Cost`` objects; ``costmodel.model``
assembles them into the component tree of a whole model. Each module also declares its
``ELEMENTS`` (``element.Element``: fields, labels, alternatives, symbols), collected here into
the one registry everything else derives from; the kinds of the FFN and attention unions map to
their cost functions in ``FFN_KINDS`` and ``ATTENTION_KINDS``. docs/architecture.md says how to
add an element or a kind.
"""

from __future__ import annotations

from collections.abc import Callable

from costmodel.components import (
    attention,
    bias,
    block,
    disentangled,
    embedding,
    ffn,
    heads,
    loss,
    mla,
    moe,
    norm,
    position,
    shape,
    stability,
)
from costmodel.components.element import Element, Symbol
from costmodel.cost import Cost, Dims, Num
from costmodel.symbols import declare_sizes

#: Every design element, in the order describe and compare show them. A sample may read what
#: the elements before it drew (positions read head_dim; the sliding window reads positions).
ELEMENTS: tuple[Element, ...] = (
    *shape.ELEMENTS,
    *attention.ELEMENTS[:1],  # heads
    *position.ELEMENTS,
    *disentangled.ELEMENTS,
    *attention.ELEMENTS[1:2],  # sliding window
    attention.CHUNKED,
    *norm.ELEMENTS,
    *bias.ELEMENTS,
    *ffn.ELEMENTS,
    *block.ELEMENTS,
    *embedding.ELEMENTS,
    *heads.ELEMENTS,
    *attention.ELEMENTS[2:],  # QK-norm
    attention.SINKS,
    *stability.ELEMENTS,
    *loss.ELEMENTS,
    shape.CONTEXT,
)

Leaves = list[tuple[str, Cost]]
FFNCost = Callable[..., Leaves]  # (spec, dims, tokens) -> leaves of one FFN sub-block
AttentionCost = Callable[..., Leaves]  # (spec, dims, shape, rope, score_bias) -> leaves

#: spec.ffn.kind -> the cost of one FFN sub-block of that kind.
FFN_KINDS: dict[str, FFNCost] = {"dense": ffn.ffn, "moe": moe.moe}
#: spec.attention.kind -> the cost of one attention sub-block of that kind.
ATTENTION_KINDS: dict[str, AttentionCost] = {"mha": attention.attention, "mla": mla.latent_attention}


def element(name: str) -> Element:
    return next(e for e in ELEMENTS if e.name == name)


def size_symbols() -> dict[str, Symbol]:
    """Every model-size symbol the elements declare, by name (the spec binds these)."""
    out: dict[str, Symbol] = {}
    for e in ELEMENTS:
        out.update(e.symbols)
    return out


# The alphabet (costmodel.symbols, below this package) learns the sizes the elements declare.
declare_sizes({n: s.meaning for n, s in size_symbols().items()})

__all__ = ["ATTENTION_KINDS", "ELEMENTS", "FFN_KINDS", "Cost", "Dims", "Element", "Num", "element",
           "size_symbols"]
