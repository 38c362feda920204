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

from costmodel.cost import Cost, Dims, Num, elementwise

SOFTCAP_FLOPS = 3
LOGSUMEXP_FLOPS = 4


def softcap(dims: Dims, elements: Num) -> Cost:
    """For backward, tanh keeps its output."""
    return elementwise(elements, SOFTCAP_FLOPS, dims.p, saves=1)


def z_loss(dims: Dims, tokens: Num) -> Cost:
    logits = tokens * dims.V
    return Cost(
        other=LOGSUMEXP_FLOPS * logits + 2 * tokens,
        bytes=dims.p * (logits + tokens),
        saved=dims.p * (logits + tokens),  # logsumexp keeps its input and its output
        train_only=True,
    )
