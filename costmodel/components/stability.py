"""Training-stability elements that cost elementwise work (QK-norm lives in ``attention``).

- Logit soft-capping, cap * tanh(z / cap), on attention scores and/or output logits: Gemma 2
  (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"), after
  Bello et al. 2016. 3 FLOPs per element (divide, tanh, multiply).
- z-loss, coef * log(Z)^2 with Z the softmax normaliser of the output logits: PaLM (Chowdhery
  et al. 2022, section 5), after Mesh TensorFlow. Computed as its own logsumexp over the
  B*S*V logits (4 FLOPs per element: max, subtract, exp, sum), then 2 per token (square,
  scale). Training only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from costmodel.components.element import Alternative, Choose, Element
from costmodel.cost import Cost, Dims, Num, elementwise

if TYPE_CHECKING:
    from costmodel.spec import Spec

SOFTCAP_FLOPS = 3
LOGSUMEXP_FLOPS = 4


def softcap(dims: Dims, elements: Num) -> Cost:
    """For backward, tanh keeps its output."""
    return elementwise(elements, SOFTCAP_FLOPS, dims.p, saves=1)


def z_loss(dims: Dims, tokens: Num) -> Cost:
    logits = tokens * dims.V
    return Cost(
        other=LOGSUMEXP_FLOPS * logits + 2 * tokens,
        bytes_unfused=dims.p * (logits + tokens),
        saved=dims.p * (logits + tokens),  # logsumexp keeps its input and its output
        train_only=True,
    )


# --- the elements -----------------------------------------------------------------------------

#: Soft-capping values of Gemma 2 (attention logits 50, final logits 30).
GEMMA2_SOFTCAPS = (50.0, 30.0)
#: PaLM's z-loss coefficient (section 5).
PALM_Z_LOSS = 1e-4


def softcaps(spec: Spec) -> str:
    caps = [f"{name} {v:g}" for name, v in (("attn", spec.attn_softcap), ("final", spec.final_softcap)) if v]
    return ", ".join(caps) or "none"


def _softcap_swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.attn_softcap is not None or spec.final_softcap is not None:
        return [("on -> none", {"attn_softcap": None, "final_softcap": None})]
    attn_cap, final_cap = GEMMA2_SOFTCAPS
    return [(f"none -> attention {attn_cap:g}, final {final_cap:g} (Gemma 2)",
             {"attn_softcap": attn_cap, "final_softcap": final_cap})]


def _describe_softcaps(spec: Spec) -> str | None:
    caps = [f"{name} softcap {v:g}" for name, v in (("attn", spec.attn_softcap), ("final",
                                                                                  spec.final_softcap)) if v]
    return " · ".join(caps) or None


def _sample_softcaps(choose: Choose, data: dict[str, Any]) -> None:
    for cap in ("attn_softcap", "final_softcap"):
        if choose([True, False]) and not (cap == "final_softcap" and data.get("architecture") == "encoder"):
            data[cap] = 20.0


def _z_loss_swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.z_loss:
        return [(f"{spec.z_loss:g} -> none", {"z_loss": None})]
    return [(f"none -> {PALM_Z_LOSS:g} (PaLM)", {"z_loss": PALM_Z_LOSS})]


ELEMENTS = (
    Element(
        "logit soft-capping", ("attn_softcap", "final_softcap"), describe=_describe_softcaps,
        choices=(("soft-capping", softcaps),), swaps=_softcap_swaps, sample=_sample_softcaps,
    ),
    Element(
        "z-loss", ("z_loss",), describe=lambda s: f"z-loss {s.z_loss:g}" if s.z_loss else None,
        choices=(("z-loss", lambda s: s.z_loss),), swaps=_z_loss_swaps,
        sample=lambda choose, data: data.update(
            z_loss=choose([0.0, 1e-4]) if data.get("architecture") != "encoder" else 0.0),
    ),
)
