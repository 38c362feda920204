"""The feed-forward network: two matrices around an activation, or three for a GLU.

Non-gated: FFN(x) = act(x W_up) W_down, with ReLU (Vaswani et al. 2017) or GeLU (Hendrycks &
Gimpel 2016; GPT-2, GPT-3, GPT-J). Gated (Shazeer 2020, "GLU Variants Improve Transformer"):
FFN(x) = (act(x W_gate) * x W_up) W_down, with ReLU (ReGLU), GeLU (GeGLU; T5 v1.1, Gemma) or
Swish/SiLU (SwiGLU; PaLM, LLaMA). A gated FFN with f = 8/3 d has the parameters of a
non-gated one with f = 4d.

FLOPs per element of the activation, counting +, -, *, /, exp, tanh and max as one each:
ReLU 1 (max); GeLU 8 (tanh form: x^3 2, *c 1, +x 1, *sqrt(2/pi) 1, tanh 1, +1 1, *x/2 1);
SiLU 4 (exp(-x), +1, divide, *x). The gate's elementwise product adds 1.
"""

from __future__ import annotations

from typing import Any

from costmodel.components.element import Alternative, Choose, Element, Symbol
from costmodel.cost import Cost, Dims, Num, elementwise, linear
from costmodel.spec import Activation, Spec

RELU_FLOPS, GELU_FLOPS, SILU_FLOPS, GATE_FLOPS = 1, 8, 4, 1

ACTIVATION_FLOPS = {
    Activation.relu: RELU_FLOPS,
    Activation.gelu: GELU_FLOPS,
    Activation.reglu: RELU_FLOPS,
    Activation.geglu: GELU_FLOPS,
    Activation.swiglu: SILU_FLOPS,
}


def ffn(spec: Spec, dims: Dims, tokens: Num) -> list[tuple[str, Cost]]:
    """The leaves of one FFN sub-block over `tokens` rows (norms and residual are the block's)."""
    d, f, p, bias = dims.d, dims.f, dims.p, spec.bias.ffn
    hidden = tokens * f
    act = elementwise(hidden, ACTIVATION_FLOPS[spec.activation], p)
    out = []
    if spec.activation.gated:
        out.append(("gate", linear(tokens, d, f, bias, p)))
        act = act + elementwise(hidden, GATE_FLOPS, p, inputs=2)
    out.append(("up", linear(tokens, d, f, bias, p)))
    out.append(("act", act))
    out.append(("down", linear(tokens, f, d, bias, p)))
    return out


# --- the element ------------------------------------------------------------------------------


def equal_params_d_ff(d_ff: int, to_gated: bool) -> int:
    """The FFN width that keeps the FFN's weight count: a gated FFN has three d x f matrices,
    a plain one two, so f' = 2/3 f into a GLU and 3/2 f out of one (Shazeer 2020), rounded
    to the nearest integer, halves up."""
    num, den = (2 * d_ff, 3) if to_gated else (3 * d_ff, 2)
    return (2 * num + den) // (2 * den)


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    out: list[Alternative] = []
    act, f = spec.activation, spec.d_ff
    for alt in Activation:
        if alt is act:
            continue
        if alt.gated == act.gated:
            out.append((f"{act.value} -> {alt.value}", {"activation": alt.value}))
        else:
            f2 = equal_params_d_ff(f, alt.gated)
            out.append((f"{act.value} -> {alt.value}, d_ff {f} -> {f2} (equal params)",
                        {"activation": alt.value, "d_ff": f2}))
            out.append((f"{act.value} -> {alt.value}, same d_ff", {"activation": alt.value}))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    data.update(d_ff=choose(range(2, 21)), activation=choose([a.value for a in Activation]))


ELEMENTS = (
    Element(
        "activation", ("ffn",),
        describe=lambda s: f"f={s.d_ff} · {s.activation.value}",
        choices=(("d_ff", lambda s: s.d_ff), ("activation", lambda s: s.activation.value)),
        swaps=_swaps, sample=_sample,
        symbols={"f": Symbol("FFN hidden width, d_ff", lambda s: s.d_ff)},
    ),
)
