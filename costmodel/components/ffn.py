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

from collections.abc import Callable
from typing import Any

from costmodel.components.element import Alternative, Choose, Element, Symbol
from costmodel.cost import Cost, Dims, Num, elementwise, linear
from costmodel.spec import Activation, MoEFFN, Spec

RELU_FLOPS, GELU_FLOPS, SILU_FLOPS, GATE_FLOPS = 1, 8, 4, 1

ACTIVATION_FLOPS = {
    Activation.relu: RELU_FLOPS,
    Activation.gelu: GELU_FLOPS,
    Activation.reglu: RELU_FLOPS,
    Activation.geglu: GELU_FLOPS,
    Activation.swiglu: SILU_FLOPS,
}


def activation(act: Activation, hidden: Num, p: Num, one_kernel: bool = False) -> Cost:
    """The activation over `hidden` elements, and a gated one's product, with what each keeps for
    backward: the activation its input (GeLU, SiLU) or nothing (ReGLU: the ReLU's output is the
    product's first factor, kept once, by the product); the product both factors. As one kernel
    (``Dims.one_kernel``: Megatron-Core's fused SwiGLU saves its input, gate and up,
    NVIDIA/Megatron-LM@d98e8a6 megatron/core/fusions/fused_bias_swiglu.py) a gated activation
    keeps only what the product keeps, its two inputs: f(gate) is never written. Shared by the
    dense FFN and the experts (``components.moe.mlp``)."""
    cost = elementwise(hidden, ACTIVATION_FLOPS[act], p,
                       saves=0 if act is Activation.reglu or (act.gated and one_kernel) else 1)
    if act.gated:
        cost = cost + elementwise(hidden, GATE_FLOPS, p, inputs=2, saves=2)
    return cost


def ffn(spec: Spec, dims: Dims, tokens: Num) -> list[tuple[str, Cost]]:
    """The leaves of one FFN sub-block over `tokens` rows (norms and residual are the block's)."""
    d, f, p, bias = dims.d, dims.f, dims.p, spec.bias.ffn
    # Kept for backward (besides the activation's, ``activation``): down its input, which for a
    # plain ReLU with no hidden dropout is the ReLU's output, already kept.
    gated = spec.activation.gated
    act = activation(spec.activation, tokens * f, p, dims.one_kernel)
    relu_output = spec.activation is Activation.relu and spec.ffn_dropout == 0
    out = []
    if gated:
        out.append(("gate", linear(tokens, d, f, bias, p)))
    out.append(("up", linear(tokens, d, f, bias, p, saves_input=not gated)))
    out.append(("act", act))
    out.append(("down", linear(tokens, f, d, bias, p, saves_input=not relu_output)))
    return out


# --- the element ------------------------------------------------------------------------------


def equal_params_d_ff(d_ff: int, to_gated: bool) -> int:
    """The FFN width that keeps the FFN's weight count: a gated FFN has three d x f matrices,
    a plain one two, so f' = 2/3 f into a GLU and 3/2 f out of one (Shazeer 2020), rounded
    to the nearest integer, halves up."""
    num, den = (2 * d_ff, 3) if to_gated else (3 * d_ff, 2)
    return (2 * num + den) // (2 * den)


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    moe = spec.moe
    if moe is not None:
        return _moe_swaps(spec)
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
    if f % 2 == 0 and not spec.is_encoder_decoder and spec.ffn_dropout == 0:
        # 8 experts of half the width, top-2: the same FFN parameters per token, 4x in all
        moe_ffn = {"kind": "moe", "activation": act.value, "n_experts": 8, "top_k": 2, "d_ff_expert": f // 2}
        out.append((f"dense -> moe 8 experts top-2 of d_ff {f // 2} (equal active params)", {"ffn": moe_ffn}))
    return out


def dense_equivalent_d_ff(moe: MoEFFN) -> int:
    """The dense width with a sparse layer's active FFN weights: top_k routed experts and the
    shared ones, K*f_e + n_s*f_s (the router's d x E aside)."""
    return moe.top_k * moe.d_ff_expert + moe.shared_width


def _moe_swaps(spec: Spec) -> list[Alternative]:
    moe = spec.moe
    assert moe is not None
    f = dense_equivalent_d_ff(moe)
    dense = {"kind": "dense", "activation": moe.activation.value, "d_ff": f}
    out: list[Alternative] = [(f"moe -> dense d_ff {f} (equal active params)", {"ffn": dense})]
    data = moe.model_dump(exclude_unset=True)
    if moe.top_k > 1:
        out.append((f"top_k {moe.top_k} -> 1", {"ffn": {**data, "top_k": 1}}))
    if moe.n_shared_experts:
        fewer = {k: v for k, v in data.items() if k not in ("n_shared_experts", "d_ff_shared",
                                                            "shared_expert_gate")}
        out.append(("no shared experts", {"ffn": fewer}))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    activation = choose([a.value for a in Activation])
    if data.get("architecture") in ("encoder-decoder", "encoder") or not choose([True, True, True, False]):
        data.update(d_ff=choose(range(2, 21)), activation=activation)
        return
    # one in four decoders: a mixture of experts, some layers perhaps dense
    moe: dict[str, Any] = {"kind": "moe", "activation": activation, "n_experts": choose([2, 3, 4, 8]),
                           "d_ff_expert": choose(range(2, 9))}
    moe["top_k"] = choose(range(1, moe["n_experts"] + 1))
    if choose([True, False]):
        moe.update(n_shared_experts=choose([1, 2]), shared_expert_gate=choose([True, False]))
    if data.get("n_layers", 1) > 1 and choose([True, False]):
        moe.update(first_k_dense=1, d_ff=choose(range(2, 21)))
    moe.update(router_bias=choose([True, False]), expert_bias=choose([True, False]),
               scoring=choose(["softmax", "sigmoid"]), norm_topk=choose([True, False]),
               capacity_factor=choose([None, None, 1.25]), aux_loss=choose([0.0, 0.01]))
    data["ffn"] = moe


def _describe(spec: Spec) -> str:
    moe = spec.moe
    if moe is None:
        return f"f={spec.d_ff} · {spec.activation.value}"
    text = f"moe {moe.n_experts} experts top-{moe.top_k} f_e={moe.d_ff_expert}"
    if moe.n_shared_experts:
        text += f" + {moe.n_shared_experts} shared"
    dense = spec.decoder_layers - moe.sparse_count(spec.decoder_layers)
    if dense:
        text += f", {dense} dense layers f={moe.d_ff}"
    return f"{text} · {moe.activation.value}"


def _moe_value(attr: str) -> Callable[[Spec], Any]:
    return lambda s: getattr(s.moe, attr) if s.moe is not None else "-"


def _value(f: Callable[[MoEFFN], int | None]) -> Callable[[Spec], int | None]:
    """A size of the sparse FFN (None for a dense one: no formula of it reads the symbol)."""
    return lambda s: f(s.moe) if s.moe is not None else None


ELEMENTS = (
    Element(
        "activation", ("ffn",),
        describe=_describe,
        choices=(("d_ff", lambda s: s.d_ff), ("activation", lambda s: s.activation.value),
                 ("experts", lambda s: f"{s.moe.n_experts} top-{s.moe.top_k}" if s.moe else "-"),
                 ("d_ff_expert", _moe_value("d_ff_expert")), ("shared experts",
                                                              _moe_value("n_shared_experts")),
                 ("sparse layers", lambda s: s.moe.sparse_count(s.decoder_layers) if s.moe else "-")),
        swaps=_swaps, sample=_sample,
        symbols={
            "f": Symbol("FFN hidden width, d_ff (of the dense layers)", lambda s: s.ffn.d_ff),
            "E": Symbol("routed experts per sparse layer", _value(lambda m: m.n_experts)),
            "K": Symbol("experts each token is routed to (top_k)", _value(lambda m: m.top_k)),
            "f_e": Symbol("hidden width of each routed expert", _value(lambda m: m.d_ff_expert)),
            "n_s": Symbol("shared experts", _value(lambda m: m.n_shared_experts or None)),
            "f_s": Symbol("hidden width of each shared expert",
                          _value(lambda m: (m.d_ff_shared or m.d_ff_expert) if m.n_shared_experts else None)),
        },
    ),
)
