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

from costmodel.cost import Cost, Dims, Num
from costmodel.symbols import ID_BYTES, MASK_BYTES
from costmodel.components.stability import LOGSUMEXP_FLOPS

DROPOUT_FLOPS = 2


def cross_entropy(dims: Dims, tokens: Num) -> Cost:
    logits = tokens * dims.V
    return Cost(
        other=LOGSUMEXP_FLOPS * logits,
        bytes=dims.p * 2 * logits + ID_BYTES * tokens,
        act_in=ID_BYTES * tokens,
        # kept for backward: the log-probabilities, the targets, the 0-dim total weight
        saved=dims.p * logits + ID_BYTES * tokens + dims.p,
        train_only=True,
    )


def dropout(dims: Dims, elements: Num) -> Cost:
    return Cost(
        other=DROPOUT_FLOPS * elements,
        bytes=dims.p * 2 * elements + MASK_BYTES * elements,
        mask_elements=elements,  # the mask is kept for backward; its output is its consumer's
        train_only=True,
    )
