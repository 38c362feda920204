"""Additive biases: on the attention projections, the attention output, the FFN matrices, the
LM head (nn.Linear(bias=True)) and LayerNorm's beta. Their costs are in ``cost.linear`` and
``norm``; this module declares the element."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from costmodel.components.element import Alternative, Choose, Element

if TYPE_CHECKING:
    from costmodel.spec import Spec

LINEAR_PARTS = ("qkv", "attn_out", "ffn", "lm_head")


def label(spec: Spec) -> str:
    """Which parts carry a bias: "all linear, norm", "qkv", "norm only", "none"."""
    parts = [p for p in LINEAR_PARTS if getattr(spec.bias, p)]
    linear = "all linear" if len(parts) == len(LINEAR_PARTS) else "+".join(parts)
    if not linear:
        return "norm only" if spec.norm_bias else "none"
    return linear + (", norm" if spec.norm_bias else "")


def _parts(spec: Spec) -> tuple[str, ...]:
    """The linear parts a spec has: an encoder-only model has an LM head only with head: mlm."""
    if spec.is_encoder and spec.head.value != "mlm":
        return LINEAR_PARTS[:-1]
    return LINEAR_PARTS


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    out: list[Alternative] = []
    parts = _parts(spec)
    present = [p for p in parts if getattr(spec.bias, p)]
    if present:
        out.append((f"linear biases on {'+'.join(present)} -> none",
                    {f"bias.{p}": False for p in parts}))
    if len(present) < len(parts):
        out.append((f"linear biases on {'+'.join(present) or 'none'} -> all",
                    {f"bias.{p}": True for p in parts}))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    data["bias"] = {p: choose([True, False]) for p in LINEAR_PARTS}
    data["bias"]["norm"] = choose([True, False]) if data["norm"] == "layernorm" else False
    if data.get("architecture") == "encoder":  # an encoder head's dense layers (None: the FFN's)
        data["bias"]["head"] = choose([None, True, False])


ELEMENTS = (
    Element("biases", ("bias",), describe=lambda s: f"bias {label(s)}", choices=(("bias", label),),
            swaps=_swaps, sample=_sample),
)
