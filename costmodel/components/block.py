"""The block layout: serial (attention, then FFN on its output) or parallel (GPT-J, Wang &
Komatsuzaki 2021; PaLM, Chowdhery et al. 2022: both read the same input, outputs summed), and
the residual adds that join each branch to the stream (one FLOP per element per branch)."""

from __future__ import annotations

from typing import Any

from costmodel.components.element import Alternative, Choose, Element
from costmodel.cost import Cost, Dims, Num, elementwise
from costmodel.spec import Block, Spec

RESIDUAL_FLOPS = 1  # one add per element per branch joining the residual stream


def residual(dims: Dims, tokens: Num, branches: int) -> Cost:
    """`branches` outputs added into the residual stream over `tokens` rows."""
    return elementwise(tokens * dims.d, branches * RESIDUAL_FLOPS, dims.p, inputs=branches + 1)


def label(spec: Spec) -> str:
    if spec.block is Block.parallel:
        return "parallel, " + ("shared norm" if spec.shared_norm else "two norms")
    return "serial"


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.block is Block.parallel:
        return [("parallel -> serial", {"block": "serial", "shared_norm": None})]
    return [("serial -> parallel (one shared norm)", {"block": "parallel"})]


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    data["block"] = choose([b.value for b in Block])
    if data["block"] == "parallel":
        data["shared_norm"] = choose([True, False])


ELEMENTS = (
    Element("block layout", ("block", "shared_norm"), describe=label, choices=(("block", label),),
            swaps=_swaps, sample=_sample),
)
