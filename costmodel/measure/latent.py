"""Multi-head latent attention in PyTorch (DeepSeek-AI 2024, "DeepSeek-V2", section 2.1), in both
conventions of ``costmodel.components.mla``, written plainly for the counters.

- naive: what transformers executes (modeling_deepseek_v3.py, ``DeepseekV3Attention``): the
  cache holds the normed latent and the rotated shared key; every pass re-expands all of them
  through kv_b into h heads of keys (d_n content + d_r rotary) and values (d_v);
- absorbed: what DeepSeek's inference code runs (DeepSeek-V3 inference/model.py, attn_impl
  "absorb"): q_nope is taken into the latent space through each head's W_UK, the scores and AV
  read the cached latent directly (one tensor shared by every head, as MQA shares its K/V), and
  each head's W_UV turns AV's latent output into values before the output projection.

Both run the same weights on the same cache and give the same output (a test checks it).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.components.mla import Convention
from costmodel.measure.blocks import Attention, Norm, Step, SubBlock, rope, rope_angles
from costmodel.spec import MLA, Spec


class LatentUp(nn.Module):
    """kv_b: the latent's up projection, r_kv -> h*(d_n + d_v) (W_UK and W_UV of every head).

    ``forward(x, "kv")`` expands latents into keys and values (naive); ``"k"`` takes queries
    (B, h, S, d_n) into the latent space through W_UK; ``"v"`` takes AV's latent output
    (B, h, S, r_kv) to values through W_UV (absorbed). A module call either way, so the counters
    attribute its FLOPs to kv_b.
    """

    def __init__(self, m: MLA, heads: int):
        super().__init__()
        self.heads, self.nope, self.value = heads, m.qk_nope_head_dim, m.v_head_dim
        self.weight = nn.Parameter(torch.empty(heads * (self.nope + self.value), m.kv_lora_rank))

    def forward(self, x: Tensor, part: str = "kv") -> Tensor:
        if part == "kv":
            return F.linear(x, self.weight)
        w = self.weight.view(self.heads, self.nope + self.value, -1)
        if part == "k":
            return torch.einsum("bhsn,hnr->bhsr", x, w[:, : self.nope])
        return torch.einsum("bhsr,hvr->bhsv", x, w[:, self.nope :])


class LatentAttention(Attention):
    """MLA in place of MHA/GQA/MQA: the same masks, windows, chunks, sinks and cache slots as
    ``Attention``; its own projections, cache (latent and rotary key) and scores."""

    def __init__(self, spec: Spec, own_norm: bool, *, window: int | None = None, chunk: int | None = None,
                 causal: bool = True, cross: bool = False, rope: bool = False, score_bias: bool = False):
        SubBlock.__init__(self, spec, own_norm)  # the branch's norms; Attention's projections not
        m = spec.mla
        assert m is not None
        d, h = spec.d_model, spec.n_heads
        self.scoring(spec, window, chunk, causal, cross, score_bias)
        self.heads, self.rank, self.nope, self.rotary, self.value = (
            h, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim)
        self.rope_dims = m.qk_rope_head_dim if rope else 0
        self.scale = 1 / math.sqrt(self.nope + self.rotary)
        q_width = h * (self.nope + self.rotary)
        if m.q_lora_rank is None:
            self.q = nn.Linear(d, q_width, bias=False)
        else:
            self.q_a = nn.Linear(d, m.q_lora_rank, bias=spec.bias.qkv)
            self.q_norm = Norm(spec, m.q_lora_rank)
            self.q_b = nn.Linear(m.q_lora_rank, q_width, bias=False)
        self.lora = m.q_lora_rank is not None
        self.kv_a = nn.Linear(d, self.rank + self.rotary, bias=spec.bias.qkv)
        self.kv_norm = Norm(spec, self.rank)
        self.kv_b = LatentUp(m, h)
        self.out = nn.Linear(h * self.value, d, bias=spec.bias.attn_out)
        self.convention = Convention.naive

    def cache_shapes(self, batch: int, tokens: int) -> list[tuple[int, ...]]:
        """The latent (r_kv) and the rotary key (d_r), one head: r_kv + d_r elements a token."""
        return [(batch, 1, tokens, self.rank), (batch, 1, tokens, self.rotary)]

    def function(self, x: Tensor, step: Step) -> Tensor:
        B, S, _ = x.shape
        h = self.heads
        q = self.q(x) if not self.lora else self.q_b(self.q_norm(self.q_a(x)))
        q_nope, q_rot = q.view(B, S, h, -1).transpose(1, 2).split([self.nope, self.rotary], dim=-1)
        latent, k_rot = self.kv_a(x).split([self.rank, self.rotary], dim=-1)
        # a copy: a norm that keeps its input (LayerNorm) then keeps the latent, not the whole
        # kv_a output its split is a view of (contiguous() would return a one-token view as is)
        latent = self.kv_norm(latent.clone()).view(B, 1, S, self.rank)
        k_rot = k_rot.reshape(B, 1, S, self.rotary)
        if self.rope_dims:
            cos, sin = step.once(("rope", self.rope_dims),
                                 lambda: rope_angles(step.positions, self.rope_dims, q.dtype))
            q_rot, k_rot = rope(q_rot, cos, sin), rope(k_rot, cos, sin)
        latent, k_rot, key_positions = self.keys(latent, k_rot, step)
        span = latent.shape[2]
        if self.convention is Convention.naive:
            kv = self.kv_b(latent).view(B, span, h, -1).transpose(1, 2)
            k_nope, v = kv.split([self.nope, self.value], dim=-1)
            k = torch.cat((k_nope, k_rot.expand(B, h, span, self.rotary)), dim=-1)
            scores = torch.cat((q_nope, q_rot), dim=-1) @ k.transpose(-2, -1)
            probs = self.probabilities(scores * self.scale, step, key_positions)
            out = probs @ v.clone()  # V itself for backward (the view would keep all of kv)
        else:
            # the h heads' queries are h*S rows against the one latent (MQA-like)
            q_latent = self.kv_b(q_nope, "k").reshape(B, 1, h * S, self.rank)
            scores = (q_latent @ latent.transpose(-2, -1)
                      + q_rot.reshape(B, 1, h * S, self.rotary) @ k_rot.transpose(-2, -1))
            probs = self.probabilities(scores.view(B, h, S, span) * self.scale, step, key_positions)
            out = self.kv_b((probs.view(B, 1, h * S, span) @ latent).view(B, h, S, self.rank), "v")
        result: torch.Tensor = self.out(out.transpose(1, 2).reshape(B, S, h * self.value))
        return result


def set_convention(model: nn.Module, convention: Convention | str) -> None:
    """Run every latent-attention layer of `model` in `convention` (naive or absorbed)."""
    for m in model.modules():
        if isinstance(m, LatentAttention):
            m.convention = Convention(convention)
