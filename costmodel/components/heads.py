"""What an encoder-only model ends in: nothing, BERT's pooler, a masked-LM or a classification head.

Devlin et al. 2019, "BERT", section 3 and appendix A, as transformers builds them:

- ``pooler`` (``BertPooler``, in ``BertModel``, so in every count of BERT's 110M and 340M): the
  hidden state of the first token ([CLS]) through a d x d dense layer with a bias and tanh;
  B rows, whatever the sequence length.
- ``mlm`` (``BertForMaskedLM``, which drops the pooler): at every position, the transform
  (dense d x d, GELU, a norm) and the decoder to the vocabulary, whose weight is the token table
  (tied) and whose bias is its own; cross-entropy over the vocabulary in training. The logits
  are computed at every position, as transformers does (the loss then ignores unmasked ones).
- ``classification`` (``BertForSequenceClassification``): the pooler, then a d x n_labels
  classifier with a bias; cross-entropy over the labels of the B sequences in training.
  RoBERTa's head (dense, tanh, out_proj) and DeBERTa's (ContextPooler, GELU) hold the same
  parameters; ModernBERT's adds a norm and runs GELU (not modelled: docs/encoders.md).
- ``none``: the last hidden state (``ModernBertModel``, ``DebertaV2Model``). A training step
  with ``none`` or ``pooler`` counts no objective: the gradient arrives at the output.

``tied_embeddings`` and ``bias.lm_head`` describe the masked-LM decoder: they are read only with
``head: mlm`` (a config imports them whatever head is counted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from costmodel.components.element import Alternative, Choose, Element, Symbol
from costmodel.components.ffn import GELU_FLOPS
from costmodel.components.key import Key, Role
from costmodel.components.loss import cross_entropy
from costmodel.components.norm import norm
from costmodel.components.stability import LOGSUMEXP_FLOPS
from costmodel.cost import Cost, Dims, elementwise, linear
from costmodel.spec import Head, PoolerActivation, Spec
from costmodel.symbols import ID_BYTES

TANH_FLOPS = 1  # tanh counts one FLOP per element, as in the FFN's GeLU (components.ffn)


def pooler(spec: Spec, dims: Dims) -> list[tuple[Key, Cost]]:
    """The B [CLS] states through dense (d x d; its bias the FFN's), the activation
    (``pooler_activation``) and, with ``pooler_norm``, a norm (ModernBertPredictionHead).

    Kept for backward, as PyTorch keeps it: the dense layer's input ``x[:, 0]`` is a view of
    the last hidden state, so its whole storage (B*S*d) stays alive, not B*d; tanh keeps its
    output, GELU its input, a norm its input and statistics."""
    rows = dims.B
    dense = linear(rows, dims.d, dims.d, spec.bias.ffn, dims.p, saves_input=False)
    act = (TANH_FLOPS if spec.pooler_activation is PoolerActivation.tanh else GELU_FLOPS)
    out = [(Key("dense", Role.head, block="pooler"), replace(dense, saved=dims.p * dims.B * dims.S * dims.d)),
           (Key("act", Role.head, block="pooler"), elementwise(rows * dims.d, act, dims.p, saves=1))]
    if spec.pooler_norm:
        out.append((Key("norm", Role.head, block="pooler"), norm(spec, dims, rows, dims.d)))
    return out


def pooled_kept(spec: Spec) -> bool:
    """Whether the pooler's output is already kept for backward when the classifier reads it:
    tanh keeps its output; GELU keeps its input and a norm its input, so then the classifier
    keeps one more B x d tensor."""
    return spec.pooler_activation is PoolerActivation.tanh and not spec.pooler_norm


def labels_loss(dims: Dims) -> Cost:
    """Cross-entropy over n_labels logits for each of the B sequences (components.loss's, on
    B rows of n_labels rather than tokens of V)."""
    logits = dims.B * dims.n_labels
    return Cost(other=LOGSUMEXP_FLOPS * logits, bytes_unfused=dims.p * 2 * logits + ID_BYTES * dims.B,
                act_in=ID_BYTES * dims.B, saved=dims.p * logits + ID_BYTES * dims.B + dims.p,
                train_only=True)


def head(spec: Spec, dims: Dims) -> list[tuple[Key, Cost]]:
    """The leaves after the last layer of an encoder-only model, by ``spec.head``."""
    from costmodel.components.embedding import lm_head  # the decoder: a (tied) LM head

    if spec.head is Head.none:
        return []
    if spec.head is Head.pooler:
        return pooler(spec, dims)
    if spec.head is Head.classification:
        classifier = linear(dims.B, dims.d, dims.n_labels, True, dims.p, saves_input=not pooled_kept(spec))
        return [*pooler(spec, dims), (Key("classifier", Role.head), classifier),
                (Key("cross_entropy", Role.loss, block="loss"), labels_loss(dims))]
    tokens = dims.B * dims.S
    return [
        (Key("transform", Role.head, block="mlm"), linear(tokens, dims.d, dims.d, spec.bias.ffn, dims.p)),
        (Key("act", Role.head, block="mlm"), elementwise(tokens * dims.d, GELU_FLOPS, dims.p, saves=1)),
        (Key("norm", Role.head, block="mlm"), norm(spec, dims, tokens, dims.d)),
        (Key("lm_head", Role.head), lm_head(spec, dims, tokens)),
        (Key("cross_entropy", Role.loss, block="loss"), cross_entropy(dims, tokens)),
    ]


# --- the element ------------------------------------------------------------------------------


def label(spec: Spec) -> str:
    if not spec.is_encoder:
        return "LM head"
    if spec.head is Head.classification:
        return f"classification ({spec.n_labels} labels)"
    return str(spec.head.value)


def _swaps(spec: Spec, window: int) -> list[Alternative]:
    if not spec.is_encoder:
        return []
    out: list[Alternative] = []
    for h in Head:
        if h is spec.head:
            continue
        changes: dict[str, Any] = {"head": h.value}
        if spec.head is Head.classification:
            changes["n_labels"] = None
        out.append((f"{spec.head.value} -> {h.value}", changes))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    if data.get("architecture") != "encoder":
        return
    data["head"] = choose([h.value for h in Head])
    if data["head"] == "classification":
        data["n_labels"] = choose([1, 2, 3])


ELEMENTS = (
    Element(
        "encoder head", ("head", "n_labels"),
        describe=lambda s: f"head {label(s)}" if s.is_encoder else None,
        choices=(("head", label),),
        swaps=_swaps, sample=_sample,
        symbols={"n_labels": Symbol("classifier outputs (num_labels)",
                                    lambda s: s.n_labels if s.head is Head.classification else None)},
    ),
)
