"""What an encoder-only model ends in: nothing, BERT's pooler, a masked-LM or a classification head.

Devlin et al. 2019, "BERT", section 3 and appendix A, as transformers builds them (the modules
read at transformers v5.24.0, ``src/transformers/models/``: ``bert/modeling_bert.py``
BertPooler, ``roberta/modeling_roberta.py`` RobertaClassificationHead,
``deberta_v2/modeling_deberta_v2.py`` ContextPooler, ``modernbert/modeling_modernbert.py``
ModernBertPredictionHead):

- ``pooler`` (``BertPooler``, in ``BertModel``, so in every count of BERT's 110M and 340M): the
  hidden state of the first token ([CLS]) through a d x d dense layer and its activation; B
  rows, whatever the sequence length. ``pooler_activation`` is tanh for BERT and RoBERTa, GELU
  for DeBERTa's ContextPooler (``pooler_hidden_act``) and ModernBERT's head
  (``classifier_activation``); ``pooler_norm`` adds ModernBertPredictionHead's norm after it.
  The dense layer's bias is ``Bias.head`` (ModernBERT's ``classifier_bias``; else the FFN's).
- ``mlm`` (``BertForMaskedLM``, which drops the pooler): at every position, the transform
  (dense d x d, GELU, a norm) and the decoder to the vocabulary, whose weight is the token table
  (tied) and whose bias is its own; cross-entropy over the vocabulary in training. The logits
  are computed at every position, as transformers does (the loss then ignores unmasked ones).
- ``classification`` (``BertForSequenceClassification``): the pooler, then a d x n_labels
  classifier with a bias; cross-entropy over the labels of the B sequences in training.
  RoBERTa's RobertaClassificationHead is the same dense, tanh and out_proj over [CLS] (its
  RobertaModel built without a pooler), DeBERTa's the ContextPooler and a classifier,
  ModernBERT's its prediction head and a classifier. The heads' dropouts are not counted.
- ``none``: the last hidden state (``ModernBertModel``, ``DebertaV2Model``). A training step
  with ``none`` or ``pooler`` counts no objective: the gradient arrives at the output.

``tied_embeddings`` and ``bias.lm_head`` describe the masked-LM decoder, the pooler fields the
pooler: each is read only with its head (a config imports them whatever head is counted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from costmodel.components.element import Alternative, Choose, Element, Symbol
from costmodel.components.ffn import GELU_FLOPS
from costmodel.components.key import Key, Role
from costmodel.components.loss import cross_entropy
from costmodel.components.norm import norm, norm_of_kept
from costmodel.components.stability import LOGSUMEXP_FLOPS
from costmodel.cost import Cost, Dims, elementwise, linear
from costmodel.spec import Head, PoolerActivation, Spec
from costmodel.symbols import ID_BYTES

TANH_FLOPS = 1  # tanh counts one FLOP per element, as in the FFN's GeLU (components.ffn)


def pooler(spec: Spec, dims: Dims) -> list[tuple[Key, Cost]]:
    """The B [CLS] states through dense (d x d; ``Bias.head``), the activation
    (``pooler_activation``) and, with ``pooler_norm``, a norm (ModernBertPredictionHead).

    Kept for backward, as PyTorch keeps it: the dense layer's input ``x[:, 0]`` is a view of
    the last hidden state, so its whole storage (B*S*d) stays alive, not B*d; tanh keeps its
    output, GELU its input, a norm its input and statistics."""
    rows = dims.B
    dense = linear(rows, dims.d, dims.d, spec.head_bias, dims.p, saves_input=False)
    act = (TANH_FLOPS if spec.pooler_activation is PoolerActivation.tanh else GELU_FLOPS)
    out = [(Key("dense", Role.head, block="pooler"), replace(dense, saved=dims.p * dims.B * dims.S * dims.d)),
           (Key("act", Role.head, block="pooler"), elementwise(rows * dims.d, act, dims.p, saves=1))]
    if spec.pooler_norm:  # its input is tanh's output (kept by tanh) or GELU's (its own)
        tanh = spec.pooler_activation is PoolerActivation.tanh
        pooled = (norm_of_kept if tanh else norm)(spec, dims, rows, dims.d)
        out.append((Key("norm", Role.head, block="pooler"), pooled))
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
        (Key("transform", Role.head, block="mlm"), linear(tokens, dims.d, dims.d, spec.head_bias, dims.p)),
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
        return f"classification ({spec.n_labels} labels{_pooled(spec)})"
    return f"{spec.head.value}{_pooled(spec) if spec.head is Head.pooler else ''}"


def _pooled(spec: Spec) -> str:
    """How the pooler runs, where it is not BERT's tanh: ", gelu", ", gelu + norm"."""
    if spec.pooler_activation is PoolerActivation.tanh and not spec.pooler_norm:
        return ""
    return f", {spec.pooler_activation.value}" + (" + norm" if spec.pooler_norm else "")


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
    if spec.head in (Head.pooler, Head.classification):
        other = next(a for a in PoolerActivation if a is not spec.pooler_activation)
        out.append((f"pooler {spec.pooler_activation.value} -> {other.value}",
                    {"pooler_activation": other.value}))
    return out


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    if data.get("architecture") != "encoder":
        return
    data["head"] = choose([h.value for h in Head])
    if data["head"] == "classification":
        data["n_labels"] = choose([1, 2, 3])
    data["pooler_activation"] = choose([a.value for a in PoolerActivation])
    data["pooler_norm"] = choose([False, True])


ELEMENTS = (
    Element(
        "encoder head", ("head", "n_labels", "pooler_activation", "pooler_norm"),
        describe=lambda s: f"head {label(s)}" if s.is_encoder else None,
        choices=(("head", label),),
        swaps=_swaps, sample=_sample,
        symbols={"n_labels": Symbol("classifier outputs (num_labels)",
                                    lambda s: s.n_labels if s.head is Head.classification else None)},
    ),
)
