"""The mixture-of-experts FFN as PyTorch modules, with a routing the counters can follow.

``SparseFeedForward`` is ``costmodel.components.moe`` executed: a router linear d -> E, scores
(softmax or sigmoid), a top-k over them, E expert FFNs, the weighted combine, the shared
experts (and Qwen2-MoE's sigmoid gate on them).

Routing is deterministic: the router runs in full (logits, scores, top-k: their work and bytes
are real), but the experts each token is sent to are fixed by its index, round robin:
token t's j-th choice is expert (t*K + j) mod E. Every token gets exactly K distinct experts
(K <= E consecutive residues), loads differ by at most one (perfect balance), and the T*K
assignments reach min(E, T*K) experts: the formulas' worst case of experts read, which
``Routing.worst`` counts. A learned router on random weights would send a data-dependent
number of tokens to each expert, which FlopCounterMode could not be held to; and on the meta
device there is no data to route by. The gate weights are the scores gathered at the fixed
choices (renormalised when the spec says so), so the output has the form of the real layer's.

With a capacity factor every expert runs exactly C = ceil(c*T*K/E) rows (its tokens, cut at
C, padded with zeros), as a static-shape implementation (Switch, GShard) does.

Module names mirror the component paths: ``ffn.router``, ``ffn.experts.3.up`` (the index drops
out: ``ffn/experts/up``), ``ffn.shared.down``, ``ffn.shared_gate``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.measure.blocks import ACTIVATIONS, Step, SubBlock
from costmodel.spec import Activation, MoEFFN, Scoring, Spec

ROUTER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def round_robin(tokens: int, k: int, experts: int) -> list[tuple[list[int], list[int]]]:
    """For each expert, the (token, slot) pairs routed to it: assignment a = t*K + j goes to
    expert a mod E, so expert e holds a = e, e + E, e + 2E, ... < T*K."""
    out = []
    for e in range(experts):
        assigned = range(e, tokens * k, experts)
        out.append(([a // k for a in assigned], [a % k for a in assigned]))
    return out


def choices(tokens: int, k: int, experts: int) -> Tensor:
    """(T, K) expert ids of the round-robin routing."""
    return (torch.arange(tokens)[:, None] * k + torch.arange(k)[None, :]) % experts


class Expert(nn.Module):
    """One FFN of width f: act(x W_up) W_down, or act(x W_gate) * (x W_up) W_down (GLU)."""

    def __init__(self, d: int, f: int, activation: Activation, bias: bool):
        super().__init__()
        self.gate = nn.Linear(d, f, bias=bias) if activation.gated else None
        self.up = nn.Linear(d, f, bias=bias)
        self.down = nn.Linear(f, d, bias=bias)
        self.act = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        out: Tensor = self.down(hidden)
        return out


class _Sparse:
    """The parts and the forward pass of a sparse FFN, shared by the standalone module and the
    sub-block (which adds the norms around it). A mixin of an nn.Module."""

    cfg: MoEFFN
    router_dtype: torch.dtype | None
    aux: Tensor | None

    def _make(self, cfg: MoEFFN, d: int, ffn_bias: bool) -> None:
        self.cfg = cfg
        self.router = nn.Linear(d, cfg.n_experts, bias=cfg.router_bias)
        self.router_dtype = ROUTER_DTYPES[cfg.router_dtype] if cfg.router_dtype else None
        self.experts = nn.ModuleList(
            Expert(d, cfg.d_ff_expert, cfg.activation, cfg.expert_bias) for _ in range(cfg.n_experts)
        )
        self.shared = Expert(d, cfg.shared_width, cfg.activation, ffn_bias) if cfg.n_shared_experts else None
        self.shared_gate = nn.Linear(d, 1, bias=False) if cfg.shared_expert_gate else None
        self.aux = None  # the last training pass's load-balancing loss

    def keep_router_dtype(self) -> None:
        """After the model is cast to its dtype: the router back to its own (DeepSeek: fp32)."""
        if self.router_dtype is not None:
            self.router.to(self.router_dtype)

    def _sparse(self, x: Tensor, training: bool) -> Tensor:
        cfg, (B, S, d) = self.cfg, x.shape
        T, E, K = B * S, cfg.n_experts, cfg.top_k
        flat = x.reshape(T, d)
        logits = self.router(flat if self.router_dtype is None else flat.to(self.router_dtype))
        scores = F.softmax(logits, dim=-1) if cfg.scoring is Scoring.softmax else torch.sigmoid(logits)
        scores.topk(K, dim=-1)  # the selection a learned router makes, run for its cost only
        chosen = choices(T, K, E).to(x.device)
        weights = scores.gather(-1, chosen)
        if cfg.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(flat)
        rows = None
        if cfg.capacity_factor is not None:
            rows = math.ceil(Fraction(str(cfg.capacity_factor)) * T * K / E)
        for expert, (tokens, slots) in zip(self.experts, round_robin(T, K, E), strict=True):
            if rows is not None:  # static shapes: cut at the capacity, pad to it
                tokens, slots = tokens[:rows], slots[:rows]
            elif not tokens:
                continue  # an expert no token reaches does not run
            index = torch.tensor(tokens, dtype=torch.long).to(x.device)
            picked = flat.index_select(0, index)
            if rows is not None and len(tokens) < rows:
                picked = F.pad(picked, (0, 0, 0, rows - len(tokens)))
            y = expert(picked)[: len(tokens)]
            w = weights[index, torch.tensor(slots, dtype=torch.long).to(x.device)]
            out.index_add_(0, index, y * w[:, None])
        if training and cfg.aux_loss > 0:
            self.aux = self.balance_loss(scores, chosen)
        if self.shared is not None:
            shared = self.shared(flat)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            out = out + shared
        return out.view(B, S, d)

    def balance_loss(self, scores: Tensor, chosen: Tensor) -> Tensor:
        """Switch (Fedus et al. 2021): alpha * E * sum_i f_i * P_i, f_i the share of the T*K
        assignments sent to expert i, P_i the mean router probability of expert i."""
        E, T = self.cfg.n_experts, scores.shape[0]
        P = scores.sum(dim=0)
        ones = torch.ones_like(chosen.flatten(), dtype=scores.dtype)
        f = torch.zeros(E, device=scores.device, dtype=scores.dtype).index_add(0, chosen.flatten(), ones)
        loss: Tensor = (f * P).sum() * (self.cfg.aux_loss * E / T**2)
        return loss


class SparseMLP(_Sparse, nn.Module):
    """The sparse FFN function over (B, S, d) activations, alone (tests count it directly)."""

    def __init__(self, cfg: MoEFFN, d: int, ffn_bias: bool = False):
        nn.Module.__init__(self)
        self._make(cfg, d, ffn_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self._sparse(x, self.training)


class SparseFeedForward(_Sparse, SubBlock):
    """The FFN sub-block of a sparse layer: ``SparseMLP`` inside the spec's norms and residual."""

    def __init__(self, spec: Spec, own_norm: bool):
        SubBlock.__init__(self, spec, own_norm)
        assert spec.moe is not None
        self._make(spec.moe, spec.d_model, spec.bias.ffn)

    def function(self, x: Tensor, step: Step) -> Tensor:
        return self._sparse(x, self.training)


def keep_router_dtypes(model: nn.Module) -> None:
    """Every sparse layer's router back to its own dtype, after the model is cast to its dtype."""
    for module in model.modules():
        if isinstance(module, _Sparse):
            module.keep_router_dtype()
