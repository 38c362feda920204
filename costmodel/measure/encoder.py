"""The parts of the reference model only an encoder-only model has (``measure.reference`` wires
them): BERT's heads (the pooler, the masked-LM head, the classifier; ``components.heads``) and
DeBERTa's relative positions (the stack's table, the buckets, the c2p and p2c terms;
``components.disentangled``), written as transformers' BertModel and DebertaV2Model run them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.measure.blocks import Attention, Norm, Step, drop
from costmodel.spec import Head, PoolerActivation, Spec

# --- heads ------------------------------------------------------------------------------------


class Pooler(nn.Module):
    """The first token's ([CLS]) hidden state through dense and the activation: BertPooler
    (tanh), RobertaClassificationHead's dense and tanh, DeBERTa-v2's ContextPooler (GELU);
    with ``pooler_norm``, ModernBertPredictionHead (dense, GELU, LayerNorm)."""

    def __init__(self, spec: Spec):
        super().__init__()
        self.dense = nn.Linear(spec.d_model, spec.d_model, bias=spec.head_bias)
        self.tanh = spec.pooler_activation is PoolerActivation.tanh
        self.norm = Norm(spec, spec.d_model) if spec.pooler_norm else None

    def forward(self, x: Tensor) -> Tensor:
        y = self.dense(x[:, 0])
        y = torch.tanh(y) if self.tanh else F.gelu(y)
        return self.norm(y) if self.norm is not None else y


class MaskedLM(nn.Module):
    """BertPredictionHeadTransform: dense, GELU, norm, at every position (the decoder after it is
    the model's LM head, tied to the token table)."""

    def __init__(self, spec: Spec):
        super().__init__()
        self.transform = nn.Linear(spec.d_model, spec.d_model, bias=spec.head_bias)
        self.norm = Norm(spec, spec.d_model)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.norm(F.gelu(self.transform(x), approximate="tanh"))
        return out


def heads(spec: Spec) -> dict[str, nn.Module]:
    """The modules of the spec's head, by the names the formulas give them."""
    if spec.head in (Head.pooler, Head.classification):
        out: dict[str, nn.Module] = {"pooler": Pooler(spec)}
        if spec.head is Head.classification:
            out["classifier"] = nn.Linear(spec.d_model, spec.n_labels, bias=True)
        return out
    if spec.head is Head.mlm:
        return {"mlm": MaskedLM(spec)}
    return {}


def objective(spec: Spec, output: Tensor, targets: Tensor) -> Tensor:
    """The training loss of the head: cross-entropy over the vocabulary at every position (mlm)
    or over the labels of each sequence (classification); with no task head, the output's mean
    (a stand-in: the formulas count no objective, and a mean has no matmul)."""
    if spec.head is Head.mlm:
        return F.cross_entropy(output.flatten(0, 1), targets.flatten())
    if spec.head is Head.classification:
        return F.cross_entropy(output, targets[:, 0] % spec.n_labels)
    return output.float().mean()


# --- DeBERTa's relative positions ---------------------------------------------------------------


def log_buckets(relative: Tensor, buckets: int, max_position: int) -> Tensor:
    """make_log_bucket_position (He et al. 2021; transformers): distances under buckets/2 kept,
    larger ones on a log scale up to max_position."""
    sign = torch.sign(relative)
    mid = buckets // 2
    near = (relative < mid) & (relative > -mid)
    absolute = torch.where(near, torch.full_like(relative, mid - 1), relative.abs())
    scale = math.log(max(max_position - 1, mid + 1) / mid)
    far = torch.ceil(torch.log(absolute.float() / mid) / scale * (mid - 1)) + mid
    return torch.where(absolute <= mid, relative.float(), far * sign).long()


def relative_indices(spec: Spec, queries: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """For every (query, key), the table rows c2p and p2c gather: the bucketed distance
    q - k shifted by k into 0 .. 2k - 1, and its negation likewise."""
    k = spec.relative_span
    relative = queries[:, None] - keys[None, :]
    if spec.position_buckets:
        relative = log_buckets(relative, spec.position_buckets,
                               spec.max_relative_positions or spec.max_seq_len)
    return (relative + k).clamp(0, 2 * k - 1), (-relative + k).clamp(0, 2 * k - 1)


class DisentangledAttention(Attention):
    """DeBERTa's DisentangledSelfAttention with share_att_key: the stack's normalised table
    (``Step.relative``), dropped out in training at the hidden rate (``pos_dropout``), through
    this layer's own q and k projections, every layer; the content
    scores plus c2p (queries x projected keys) and p2c (keys x projected queries), each
    gathered at the pairs' relative rows, all over sqrt(3 d_h)."""

    def __init__(self, spec: Spec, own_norm: bool, **kwargs: Any):
        super().__init__(spec, own_norm, **kwargs)
        self.spec = spec
        self.scale = 1 / math.sqrt(3 * self.head_dim)

    def extra_scores(self, scores: Tensor, q: Tensor, k: Tensor, step: Step) -> Tensor:
        assert step.relative is not None  # the stack computes it
        # transformers' pos_dropout (hidden_dropout_prob) on the table, in every layer
        table = drop(step.relative, self.spec.dropout, self.training)
        B, h, S, _ = q.shape
        pos_q = self.split(self.q(table[None]), self.heads)  # (1, h, 2k, d_h)
        pos_k = self.split(self.k(table[None]), self.heads)
        c2p_rows, p2c_rows = step.once("relative", lambda: relative_indices(self.spec, step.positions,
                                                                             step.positions))
        c2p = torch.gather(q @ pos_k.transpose(-2, -1), -1, c2p_rows.expand(B, h, S, S))
        p2c = torch.gather(k @ pos_q.transpose(-2, -1), -1, p2c_rows.expand(B, h, S, S)).transpose(-2, -1)
        return scores + (c2p + p2c) * self.scale
