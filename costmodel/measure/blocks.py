"""The sub-blocks of the reference model (``measure.reference``), each the executable definition
of its elements: norms, positions, attention (with its sinks), the FFN, and the residual wiring
of a sub-block. ``measure.latent`` (MLA) and ``measure.moe`` (a mixture of experts) build their
sub-blocks on these; ``measure.reference`` assembles all of them into layers, stacks and the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.spec import Activation, NormPosition, QKNorm, Spec
from costmodel.spec import Norm as NormKind

EPS = 1e-6
ROPE_BASE = 10000.0  # Su et al. 2021
T5_MAX_DISTANCE = 128  # Raffel et al. 2020: distances beyond this share the last bucket


# --- norms ------------------------------------------------------------------------------------


class Norm(nn.Module):
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang & Sennrich 2019) over the last dimension.

    The gain (and LayerNorm's bias, unless the spec drops it) is ``width`` wide.
    """

    def __init__(self, spec: Spec, width: int):
        super().__init__()
        self.rms = spec.norm is NormKind.rmsnorm
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if spec.norm_bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.rms:
            return F.rms_norm(x, self.weight.shape, self.weight, EPS)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, EPS)


# --- positions --------------------------------------------------------------------------------


def sinusoidal(positions: Tensor, width: int) -> Tensor:
    """Vaswani et al. 2017, section 3.5: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...)."""
    freq = torch.exp(torch.arange(0, width, 2, device=positions.device) * (-math.log(10000.0) / width))
    angles = positions[:, None].float() * freq[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[:, :width]


def rope_angles(positions: Tensor, dims: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of RoPE's angles p * base^(-2i/dims) (Su et al. 2021), (S, dims) each."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, dims, 2, device=positions.device).float() / dims)
    angles = positions[:, None].float() * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE (Su et al. 2021, "RoFormer"): rotate the first r = cos.shape[-1] features of every
    head; pairs (i, i + r/2) turn together (the rotate-half layout of GPT-NeoX and LLaMA), the
    other d_h - r features pass unchanged (GPT-J's partial rotary)."""
    dims = cos.shape[-1]
    rotated, passed = x[..., :dims], x[..., dims:]
    first, second = rotated.chunk(2, dim=-1)
    rotated = rotated * cos + torch.cat((-second, first), dim=-1) * sin
    return torch.cat((rotated, passed), dim=-1) if passed.shape[-1] else rotated


class RelativeBias(nn.Module):
    """T5's relative attention bias (Raffel et al. 2020, section 2.1): one scalar per head and
    distance bucket, held once per stack and added to the scores of every layer.

    Half the buckets hold exact small distances, the rest grow logarithmically up to 128.
    An encoder's buckets are bidirectional (half for each sign); a decoder's see only the past.
    """

    def __init__(self, spec: Spec, bidirectional: bool):
        super().__init__()
        self.buckets = spec.relative_buckets
        self.bidirectional = bidirectional
        self.table = nn.Embedding(self.buckets, spec.n_heads)

    def bucket(self, distance: Tensor) -> Tensor:
        """distance = key position - query position -> bucket index."""
        n = self.buckets
        bucket = torch.zeros_like(distance)
        if self.bidirectional:
            n //= 2
            bucket = (distance > 0).long() * n
            distance = distance.abs()
        else:
            distance = -distance.clamp(max=0)
        exact = n // 2
        log_ratio = torch.log(distance.float().clamp(min=1) / exact) / math.log(T5_MAX_DISTANCE / exact)
        far = (exact + (log_ratio * (n - exact)).long()).clamp(max=n - 1)
        return bucket + torch.where(distance < exact, distance, far)

    def forward(self, queries: Tensor, keys: Tensor) -> Tensor:
        """The (h, queries, keys) bias for these query and key positions."""
        distance = keys[None, :] - queries[:, None]
        bias: Tensor = self.table(self.bucket(distance)).permute(2, 0, 1)
        return bias


class ALiBi(nn.Module):
    """ALiBi (Press et al. 2022, "Train Short, Test Long"): a fixed slope per head times the
    query-key distance, subtracted from the scores. No parameters.

    Slopes are the geometric sequence 2^(-8/n), 2^(-16/n), ... for n heads a power of two;
    otherwise the sequence of the nearest lower power of two, then every other one of twice it.
    """

    slopes: Tensor  # a buffer

    def __init__(self, spec: Spec):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(self.slopes_for(spec.n_heads)), persistent=False)

    @staticmethod
    def slopes_for(heads: int) -> list[float]:
        def geometric(n: int) -> list[float]:
            return [2 ** (-8 * (i + 1) / n) for i in range(n)]

        if heads & (heads - 1) == 0:
            return geometric(heads)
        lower = 2 ** math.floor(math.log2(heads))
        return geometric(lower) + geometric(2 * lower)[0::2][: heads - lower]

    def forward(self, queries: Tensor, keys: Tensor) -> Tensor:
        distance = (queries[:, None] - keys[None, :]).abs()
        return -self.slopes[:, None, None] * distance


# --- one pass ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What one stack's layers know about the pass besides the activations.

    positions  absolute positions of the S tokens of this pass
    context    C: tokens in the context after this pass (the last position + 1)
    cache      the KV cache to write and read (None in training and in the encoder)
    memory     encoder output for cross-attention (None in decode: its K/V are cached)
    bias       the stack's (h, S, C) position bias (T5 relative, ALiBi), if any
    relative   the stack's normalised 2k x d relative-position table (DeBERTa), if any
    shared     what the first layer to need it computes for all: RoPE angles, masks
    """

    positions: Tensor
    context: int
    cache: KVCache | None = None
    memory: Tensor | None = None
    bias: Tensor | None = None
    relative: Tensor | None = None
    shared: dict[object, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> bool:
        return self.context == self.positions.shape[0]

    def once(self, key: object, make: Callable[[], Any]) -> Any:
        """`make()`, computed by the first layer that asks and reused by the others."""
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]


# --- sub-blocks -------------------------------------------------------------------------------


class SubBlock(nn.Module):
    """A residual branch F with its norms where ``norm_position`` puts them:

    pre            x + F(norm(x))                  (GPT-2, LLaMA)
    post           norm(x + F(x))                  (Vaswani et al. 2017)
    sandwich       x + post_norm(F(norm(x)))       (Gemma 2/3)
    post_sublayer  x + post_norm(F(x))             (OLMo 2)

    `own_norm` is False in a parallel block whose layer holds the norm(s) instead.
    Dropout (Srivastava et al. 2014), when training with a rate, hits the branch output.
    """

    def __init__(self, spec: Spec, own_norm: bool):
        super().__init__()
        position = spec.norm_position
        self.pre = position in (NormPosition.pre, NormPosition.sandwich)
        self.post = position is NormPosition.post
        on_output = position in (NormPosition.sandwich, NormPosition.post_sublayer)
        self.norm = Norm(spec, spec.d_model) if own_norm and (self.pre or self.post) else None
        self.post_norm = Norm(spec, spec.d_model) if on_output else None
        self.dropout = spec.dropout

    def function(self, x: Tensor, step: Step) -> Tensor:
        raise NotImplementedError

    def branch(self, x: Tensor, step: Step) -> Tensor:
        """F(x) with the norms on its input and output, before the residual add."""
        y = self.norm(x) if self.pre and self.norm is not None else x
        y = self.function(y, step)
        if self.post_norm is not None:
            y = self.post_norm(y)
        return drop(y, self.dropout, self.training)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = x + self.branch(x, step)
        return self.norm(x) if self.post and self.norm is not None else x


def drop(x: Tensor, rate: float, training: bool) -> Tensor:
    return F.dropout(x, rate, training=True) if training and rate > 0 else x


class Sinks(nn.Module):
    """Attention sinks as gpt-oss has them (OpenAI 2025): one learned logit per head, one column
    more in the softmax, dropped after it (so a row may give its keys less than all weight)."""

    def __init__(self, heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads))

    def forward(self, scores: Tensor) -> Tensor:
        B, h, S, _ = scores.shape
        sink = self.weight.to(scores.dtype).view(1, h, 1, 1).expand(B, h, S, 1)
        return F.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]


class Attention(SubBlock):
    """Multi-head attention (Vaswani et al. 2017) with k K/V heads: MHA, GQA or MQA.

    Self-attention is causal (a decoder, optionally over a sliding window of w keys: Child et
    al. 2019, Beltagy et al. 2020) or bidirectional (an encoder); cross-attention takes its
    queries from the decoder and K, V from the encoder output. Scores are computed in full,
    scaled by 1/sqrt(d_h), biased by a relative position bias, soft-capped (Gemma 2:
    cap * tanh(s / cap)), masked, and softmaxed.
    """

    def __init__(self, spec: Spec, own_norm: bool, *, window: int | None = None, chunk: int | None = None,
                 causal: bool = True, cross: bool = False, rope: bool = False, score_bias: bool = False):
        super().__init__(spec, own_norm)
        d, h, k, d_h, bias = spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.bias.qkv
        self.heads, self.kv_heads, self.head_dim = h, k, d_h
        self.scoring(spec, window, chunk, causal, cross, score_bias)
        self.rope_dims = spec.rotary_dims if rope else 0
        self.scale = 1 / math.sqrt(d_h)
        self.q = nn.Linear(d, h * d_h, bias=bias)
        self.k = nn.Linear(d, k * d_h, bias=bias)
        self.v = nn.Linear(d, k * d_h, bias=bias)
        self.out = nn.Linear(h * d_h, d, bias=spec.bias.attn_out)
        # QK-norm: one d_h-wide norm shared by the heads (Gemma 3), or over the whole
        # projection (OLMo 2).
        self.qk_norm = spec.qk_norm
        if spec.qk_norm is QKNorm.head:
            self.q_norm, self.k_norm = Norm(spec, d_h), Norm(spec, d_h)
        elif spec.qk_norm is QKNorm.full:
            self.q_norm, self.k_norm = Norm(spec, h * d_h), Norm(spec, k * d_h)

    def scoring(self, spec: Spec, window: int | None, chunk: int | None, causal: bool, cross: bool,
                score_bias: bool) -> None:
        """What turns scores into probabilities, and which keys a query sees."""
        self.window = window
        self.chunk = chunk  # chunked local attention (Llama 4): keys of the query's own chunk
        self.causal = causal
        self.cross = cross
        self.score_bias = score_bias
        self.softcap = spec.attn_softcap
        self.sinks = Sinks(spec.n_heads) if spec.attention_sinks else None
        self.attention_dropout = spec.attention_dropout_rate
        self.slot: int | None = None  # where its K/V live in a KVCache (decoder layers)

    @property
    def ring(self) -> int | None:
        """Slots of a rolling cache buffer: the window, or the chunk (None: one per position)."""
        return self.window or self.chunk

    def cache_shapes(self, batch: int, tokens: int) -> list[tuple[int, ...]]:
        """The two cache tensors of this sub-block for `tokens` cached tokens: K and V."""
        return [(batch, self.kv_heads, tokens, self.head_dim)] * 2

    def function(self, x: Tensor, step: Step) -> Tensor:
        B, S, _ = x.shape
        q = self.q(x)
        source = step.memory if self.cross else x
        k = v = None  # decode of a cross-attention: K and V come from the cache
        if source is not None:
            k, v = self.k(source), self.v(source)
        if self.qk_norm is QKNorm.full:
            q = self.q_norm(q)
            k = self.k_norm(k) if k is not None else None
        q = self.split(q, self.heads)
        k, v = (self.split(t, self.kv_heads) if t is not None else None for t in (k, v))
        if self.qk_norm is QKNorm.head:
            q = self.q_norm(q)
            k = self.k_norm(k) if k is not None else None
        if self.rope_dims:
            cos, sin = step.once("rope", lambda: rope_angles(step.positions, self.rope_dims, q.dtype))
            q, k = rope(q, cos, sin), rope(k, cos, sin) if k is not None else None
        k, v, key_positions = self.keys(k, v, step)

        # GQA/MQA (Ainslie et al. 2023; Shazeer 2019): the g = h/k query heads that share a
        # K/V head are stacked as g*S rows of one matmul against that head.
        span = k.shape[2]
        scores = q.reshape(B, self.kv_heads, -1, self.head_dim) @ k.transpose(-2, -1)
        scores = self.extra_scores(scores.view(B, self.heads, S, span) * self.scale, q, k, step)
        probs = self.probabilities(scores, step, key_positions)
        out = probs.view(B, self.kv_heads, -1, span) @ v
        result: Tensor = self.out(out.view(B, self.heads, S, self.head_dim).transpose(1, 2).reshape(B, S, -1))
        return result

    def extra_scores(self, scores: Tensor, q: Tensor, k: Tensor, step: Step) -> Tensor:
        """Terms added to the scaled scores (DeBERTa's c2p and p2c: ``measure.encoder``)."""
        return scores

    def probabilities(self, scores: Tensor, step: Step, key_positions: Tensor | None) -> Tensor:
        """Scaled scores -> probabilities: position bias, soft-cap, mask, softmax (with sinks)."""
        if self.score_bias:
            bias = step.bias
            assert bias is not None  # the stack computes it for a layer that has one
            if key_positions is not None and key_positions.shape[0] < step.context:
                # a rolling buffer's keys, in slot order
                full = bias
                bias = step.once(("bias", self.ring), lambda: full[..., key_positions])
            scores = scores + bias
        if self.softcap is not None:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        if (self.causal or self.window is not None) and not self.cross:
            assert key_positions is not None  # keys' positions: None for cross-attention only
            key = ("mask", self.window, self.chunk)
            mask = step.once(key, lambda: self.mask(step.positions, key_positions))
            scores = scores.masked_fill(mask, float("-inf"))
        probs = F.softmax(scores, dim=-1) if self.sinks is None else self.sinks(scores)
        return drop(probs, self.attention_dropout, self.training)

    def split(self, t: Tensor, heads: int) -> Tensor:
        """(B, T, heads*d_h) -> (B, heads, T, d_h)."""
        B, T, _ = t.shape
        return t.view(B, T, heads, self.head_dim).transpose(1, 2)

    def mask(self, queries: Tensor, keys: Tensor) -> Tensor:
        """True where a query may not see a key: the future, and keys w or more behind; in an
        encoder's local layer (ModernBERT), keys more than w/2 away either side."""
        behind = queries[:, None] - keys[None, :]
        if not self.causal:
            assert self.window is not None  # an encoder masks only its local layers
            return behind.abs() > self.window // 2
        hidden = behind < 0
        if self.window is not None:
            hidden = hidden | (behind >= self.window)
        if self.chunk is not None:
            hidden = hidden | (queries[:, None] // self.chunk != keys[None, :] // self.chunk)
        return hidden

    def keys(self, k: Tensor | None, v: Tensor | None, step: Step) -> tuple[Tensor, Tensor, Tensor | None]:
        """Write this pass's K, V into the cache; return what the queries attend to and the
        positions of those keys (None for cross-attention, which has no mask)."""
        cache = step.cache[self.slot] if step.cache is not None and self.slot is not None else None
        if self.cross:
            if cache is None:
                assert k is not None and v is not None  # no cache: the encoder output is given
                return k, v, None
            if k is not None and v is not None:  # prefill: K and V of the encoder output, projected once
                cache[0].copy_(k)
                cache[1].copy_(v)
            return cache[0], cache[1], None
        assert k is not None and v is not None  # self-attention projects its own K and V
        if cache is None:
            return k, v, step.positions
        k_cache, v_cache = cache
        C, S = step.context, step.positions.shape[0]
        ring = self.ring
        if ring is None:  # one slot per position
            k_cache[:, :, C - S:C] = k
            v_cache[:, :, C - S:C] = v
            return k_cache[:, :, :C], v_cache[:, :, :C], torch.arange(C, device=k.device)
        # Rolling buffer: position p lives in slot p mod w (or c); it keeps the last min(C, w)
        # tokens. A chunked layer keeps its keys as a window does: only the mask differs.
        slots = k_cache.shape[2]
        kept = min(S, slots)
        where = step.positions[-kept:] % ring
        k_cache.index_copy_(2, where, k[:, :, -kept:])
        v_cache.index_copy_(2, where, v[:, :, -kept:])
        if step.prompt:  # a prompt attends to its own keys under the band mask
            return k, v, step.positions
        slot = torch.arange(slots, device=k.device)
        return k_cache, v_cache, C - 1 - (C - 1 - slot) % ring


ACTIVATIONS: dict[Activation, Callable[[Tensor], Tensor]] = {
    Activation.relu: F.relu,
    Activation.gelu: partial(F.gelu, approximate="tanh"),
    Activation.reglu: F.relu,
    Activation.geglu: partial(F.gelu, approximate="tanh"),
    Activation.swiglu: F.silu,
}


class FeedForward(SubBlock):
    """act(x W_up) W_down, or the gated act(x W_gate) * (x W_up), then W_down (Shazeer 2020,
    "GLU Variants Improve Transformer")."""

    def __init__(self, spec: Spec, own_norm: bool):
        super().__init__(spec, own_norm)
        d, f, bias = spec.d_model, spec.d_ff, spec.bias.ffn
        self.gate = nn.Linear(d, f, bias=bias) if spec.activation.gated else None
        self.up = nn.Linear(d, f, bias=bias)
        self.down = nn.Linear(f, d, bias=bias)
        self.act = ACTIVATIONS[spec.activation]
        self.hidden_dropout = spec.ffn_dropout  # T5 drops out the hidden activations too

    def function(self, x: Tensor, step: Step) -> Tensor:
        hidden = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        out: Tensor = self.down(drop(hidden, self.hidden_dropout, self.training))
        return out


class KVCache:
    """K and V of every decoder attention sub-block, (B, k, tokens, d_h) each (latent attention:
    its latent and rotary key, ``cache_shapes``), preallocated for the context they hold: C tokens
    (global), min(C, w) (local), min(C, c) (chunked), C_e (cross)."""

    def __init__(self, buffers: list[tuple[Tensor, Tensor]]):
        self.buffers = buffers

    def __getitem__(self, slot: int) -> tuple[Tensor, Tensor]:
        return self.buffers[slot]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for pair in self.buffers for t in pair)
