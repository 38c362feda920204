"""LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer
Normalization").

FLOPs per element: LayerNorm 5 (mean, centre, square, variance sum, scale by 1/std),
RMSNorm 3 (square, sum, scale): RMSNorm skips the mean. The gain adds 1, a bias 1 more.
Per-row reductions (1/std, 1/rms) are one op per row and not counted. Bytes are the same
for both: one read and one write of the activations, plus the parameters.

Kept for backward, as PyTorch's kernels keep it: LayerNorm its input and the fp32 mean and
1/std of every row; RMSNorm (``F.rms_norm``, which computes in fp32) the fp32 copy of its input,
the fp32 normalised x (for the gain's gradient) and the fp32 1/rms of every row. As one kernel
(``Dims.one_kernel``: Transformer Engine's, NVIDIA/TransformerEngine@d0067d0,
transformer_engine/pytorch/ops/basic/rmsnorm.py and module/layernorm_linear.py, which save the
input and the fp32 1/rms, and for LayerNorm the mean, of every row) an RMSNorm keeps its input
and 1/rms: no fp32 copy is ever written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from costmodel.components.element import Alternative, Choose, Element
from costmodel.cost import Cost, Dims, Num, is_array, runs
from costmodel.spec import Norm, NormPosition, Spec

FP32_BYTES = 4  # norm statistics (and RMSNorm's upcast) are fp32 whatever the activations are

CORE_FLOPS = {Norm.layernorm: 5, Norm.rmsnorm: 3}


def norm(spec: Spec, dims: Dims, tokens: Num, width: Num, params_width: Num | None = None) -> Cost:
    """One norm over `tokens` rows of `width`; its gain (and bias) is `params_width` wide.

    `params_width` differs from `width` only for QK-norm shared across heads, where a d_h-wide
    gain normalises every head of a projection.
    """
    pw = width if params_width is None else params_width
    params = pw * (2 if spec.norm_bias else 1)
    flops = CORE_FLOPS[spec.norm] + 1 + (1 if spec.norm_bias else 0)
    read = dims.p * params * runs(tokens)
    if is_array(tokens) and params_width is None:
        # over arrays (the time grid) the sizes first, one pass a product (rows = tokens;
        # integers below 2^53: the same floats as the forms below)
        other, moved = (flops * width) * tokens, (dims.p * 2 * width) * tokens
        saved = ((FP32_BYTES * (2 * width + 1)) if spec.norm is Norm.rmsnorm and not dims.one_kernel
                 else (dims.p * width + FP32_BYTES * _stats(spec))) * tokens
    else:
        elements = tokens * width
        # rows normalised: one per token, or one per head for QK-norm shared across heads
        rows = tokens if params_width is None else tokens * (
            width // pw if isinstance(width, int) and isinstance(pw, int) else width / pw)
        if spec.norm is Norm.rmsnorm and not dims.one_kernel:
            saved = FP32_BYTES * (2 * elements + rows)
        else:
            saved = dims.p * elements + FP32_BYTES * _stats(spec) * rows
        other, moved = flops * elements, dims.p * 2 * elements
    return Cost(
        params=params,
        other=other,
        bytes_unfused=moved + read,
        weights_read=read,
        saved=saved,
        factored=params,
    )


def _stats(spec: Spec) -> int:
    """fp32 statistics a row keeps: LayerNorm's mean and 1/std, RMSNorm's 1/rms."""
    return 2 if spec.norm is Norm.layernorm else 1


def norm_of_kept(spec: Spec, dims: Dims, tokens: Num, width: Num) -> Cost:
    """A norm whose input is kept for backward already (a weight; the output of a tanh, which
    keeps it): it keeps only what it adds, its statistics (an eager RMSNorm also its fp32 upcast
    of the input, a copy unless the input is fp32 already, then the input itself)."""
    c = norm(spec, dims, tokens, width)
    one_copy = spec.norm is Norm.layernorm or dims.p == FP32_BYTES or dims.one_kernel
    kept = dims.p * tokens * width if one_copy else 0
    return replace(c, saved=c.saved - kept)


def _norm_swaps(spec: Spec, window: int) -> list[Alternative]:
    other = Norm.layernorm if spec.norm is Norm.rmsnorm else Norm.rmsnorm
    extra = {"bias.norm": None} if other is Norm.rmsnorm else {}
    return [(f"{spec.norm.value} -> {other.value}", {"norm": other.value, **extra})]


def _position_swaps(spec: Spec, window: int) -> list[Alternative]:
    return [(f"{spec.norm_position.value} -> {pos.value}", {"norm_position": pos.value})
            for pos in NormPosition if pos is not spec.norm_position]


def _sample_norm(choose: Choose, data: dict[str, Any]) -> None:
    data["norm"] = choose([n.value for n in Norm])


ELEMENTS = (
    Element(
        "norm", ("norm",), describe=lambda s: s.norm.value,
        choices=(("norm", lambda s: s.norm.value),), swaps=_norm_swaps, sample=_sample_norm,
    ),
    Element(
        "norm position", ("norm_position",), describe=lambda s: s.norm_position.value,
        choices=(("norm position", lambda s: s.norm_position.value),), swaps=_position_swaps,
        sample=lambda choose, data: data.update(norm_position=choose([p.value for p in NormPosition])),
    ),
)
