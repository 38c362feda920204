"""The training loss: softmax cross-entropy over the output logits, and dropout.

Cross-entropy: log-sum-exp over the vocabulary (4 FLOPs per logit: max, subtract, exp, sum),
then the target logit gathered (not counted). Unfused, a log-softmax reads the logits and
writes log-probabilities, and the targets (int64 ids) are read.

Dropout (Srivastava et al. 2014): a random mask and a rescale, 2 FLOPs per element (random
number generation not counted); unfused, it reads the input and writes the output and a
one-byte mask. Applied in training only, where a spec's ``dropout`` is above zero: to the
embeddings, the attention probabilities, and the output of every sub-block (GPT-2's
embd_pdrop, attn_pdrop, resid_pdrop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from costmodel.components.element import Alternative, Choose, Element
from costmodel.components.stability import LOGSUMEXP_FLOPS
from costmodel.cost import Cost, Dims, Num, is_array
from costmodel.symbols import ID_BYTES, MASK_BYTES

if TYPE_CHECKING:
    from costmodel.spec import Spec

DROPOUT_FLOPS = 2


def cross_entropy(dims: Dims, tokens: Num) -> Cost:
    logits = tokens * dims.V
    return Cost(
        other=LOGSUMEXP_FLOPS * logits,
        bytes_unfused=dims.p * 2 * logits + ID_BYTES * tokens,
        act_in=ID_BYTES * tokens,
        # kept for backward: the log-probabilities, the targets, the 0-dim total weight
        saved=dims.p * logits + ID_BYTES * tokens + dims.p,
        train_only=True,
    )


def dropout(dims: Dims, elements: Num) -> Cost:
    # over arrays the sizes summed first: one pass, not three (integers below 2^53: the same floats)
    moved = ((dims.p * 2 + MASK_BYTES) * elements if is_array(elements)
             else dims.p * 2 * elements + MASK_BYTES * elements)
    return Cost(
        other=DROPOUT_FLOPS * elements,
        bytes_unfused=moved,
        mask_elements=elements,  # the mask is kept for backward; its output is its consumer's
        train_only=True,
    )


# --- the element: dropout at every site ---------------------------------------------------------

#: GPT-2's dropout rate (embd_pdrop = attn_pdrop = resid_pdrop = 0.1).
GPT2_DROPOUT = 0.1
SITES = ("embedding_dropout", "attention_dropout", "ffn_dropout", "final_dropout")


def sites(spec: Spec) -> str:
    """Each site's rate: "embeddings 0.1, attention 0.1, ffn 0, final 0"."""
    rates = (spec.embedding_dropout_rate, spec.attention_dropout_rate, spec.ffn_dropout, spec.final_dropout)
    return ", ".join(f"{site.removesuffix('_dropout')} {r:g}" for site, r in zip(SITES, rates, strict=False))


def _rates(spec: Spec) -> str:
    """Each site's rate, compactly, for compare's narrow columns: embeddings/attention/FFN/final."""
    rates = (spec.embedding_dropout_rate, spec.attention_dropout_rate, spec.ffn_dropout, spec.final_dropout)
    return "/".join(f"{r:g}" for r in rates)


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.dropout:
        return [(f"{spec.dropout:g} -> none", {"dropout": None})]
    return [(f"none -> {GPT2_DROPOUT:g} (GPT-2)", {"dropout": GPT2_DROPOUT})]


def _describe(spec: Spec) -> str | None:
    if not (spec.dropout or any(getattr(spec, site) for site in SITES)):
        return None
    return f"dropout {spec.dropout:g} ({sites(spec)})"


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    data["dropout"] = choose([0.0, 0.1])
    moe = isinstance(data.get("ffn"), dict) and data["ffn"].get("kind") == "moe"
    for site in SITES:
        if choose([True, False]) and not (moe and site == "ffn_dropout"):  # no hidden dropout in experts
            data[site] = choose([0.0, 0.2])


ELEMENTS = (
    Element(
        "dropout", ("dropout", *SITES), describe=_describe,
        choices=(("dropout", lambda s: s.dropout), ("dropout sites", _rates)),
        swaps=_swaps, sample=_sample,
    ),
)
