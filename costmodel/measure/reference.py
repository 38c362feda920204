"""A PyTorch transformer built from a ``Spec``: the executable definition of every design element.

Read top to bottom, nanoGPT-style: norms, positions, attention, FFN, the residual wiring of a
sub-block, a layer, a stack, the model, its KV cache. Every element of docs/reference.md is
here, written plainly, with no fused kernel that would hide work from the counters:

- attention is two matmuls over the whole score matrix (the dense convention): a causal or
  window mask is applied to the scores, never skipped; a GQA/MQA layer groups the h query
  heads by the k K/V heads they share, so each matmul counts 2*B*h*S*span*d_h and K, V are
  read once at k heads, as a GQA-aware kernel reads them (never copied h/k times);
- the KV cache is preallocated for the context it will hold (a static cache, as serving
  stacks keep one) and written in place: global layers keep every token, local layers a
  rolling buffer of min(C, w) slots (position p in slot p mod w; Mistral 7B, Jiang et al.
  2023), chunked layers one of min(C, c) slots (Llama 4: a query sees its own chunk, a mask
  hides the rest), cross-attention the C_e encoder outputs, projected once;
- attention sinks (gpt-oss) are one more softmax column per head; latent attention
  (DeepSeek-V2) is ``measure.latent.LatentAttention``, in its naive or absorbed convention;
- a pass is a prompt (prefill, training: positions 0..S-1) or one new token at position C-1
  with C-1 tokens already cached (decode); a decode of an encoder-decoder does not run the
  encoder, whose K/V sit in the cache.

Module names mirror the component paths of ``costmodel.model`` (``decoder.layers.3.attention.q``
is ``layers[kind]/attention/q``), so ``costmodel.measure.run`` can join measured counts to the
formulas component by component.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.spec import Activation, Block, LayerKind, NormPosition, Position, QKNorm, Spec
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
    shared     what the first layer to need it computes for all: RoPE angles, masks
    """

    positions: Tensor
    context: int
    cache: KVCache | None = None
    memory: Tensor | None = None
    bias: Tensor | None = None
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
        probs = self.probabilities(scores.view(B, self.heads, S, span) * self.scale, step, key_positions)
        out = probs.view(B, self.kv_heads, -1, span) @ v
        result: Tensor = self.out(out.view(B, self.heads, S, self.head_dim).transpose(1, 2).reshape(B, S, -1))
        return result

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
        if self.causal and not self.cross:
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
        """True where a query may not see a key: the future, and keys w or more behind."""
        behind = queries[:, None] - keys[None, :]
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


# --- layers and stacks ------------------------------------------------------------------------


def uses_positions(spec: Spec, kind: LayerKind) -> bool:
    """A per-layer scheme applies in this layer unless the layer is a NoPE global one."""
    return spec.position.per_layer and not (spec.global_nope and kind is LayerKind.global_)


class Layer(nn.Module):
    """Self-attention, cross-attention (a decoder of an encoder-decoder) and FFN, in series, or
    in parallel (GPT-J, PaLM: x + Attn(norm(x)) + FFN(norm(x)), one shared norm or one each)."""

    def __init__(self, spec: Spec, kind: LayerKind, causal: bool, cross: bool, sparse: bool = False):
        super().__init__()
        self.parallel = spec.block is Block.parallel
        pre = spec.norm_position in (NormPosition.pre, NormPosition.sandwich)
        self.post = spec.norm_position is NormPosition.post
        shared = self.parallel and pre and spec.shared_norm
        own = not self.parallel or (pre and not spec.shared_norm)
        positions = uses_positions(spec, kind)
        kind_of: type[Attention] = Attention
        if spec.mla is not None:
            from costmodel.measure.latent import LatentAttention

            kind_of = LatentAttention
        self.attention = kind_of(
            spec, own, window=spec.window if kind is LayerKind.local else None,
            chunk=spec.attention_chunk if kind is LayerKind.chunked else None, causal=causal,
            rope=positions and spec.position is Position.rope,
            score_bias=positions and spec.position in (Position.t5_relative, Position.alibi),
        )
        self.cross_attention = Attention(spec, own, cross=True) if cross else None
        if sparse:  # a mixture of experts (costmodel.measure.moe, round-robin routing)
            from costmodel.measure.moe import SparseFeedForward

            self.ffn: SubBlock = SparseFeedForward(spec, own)
        else:
            self.ffn = FeedForward(spec, own)
        self.norm = Norm(spec, spec.d_model) if shared or (self.parallel and self.post) else None

    def sub_blocks(self) -> list[SubBlock]:
        return [b for b in (self.attention, self.cross_attention, self.ffn) if b is not None]

    def forward(self, x: Tensor, step: Step) -> Tensor:
        if not self.parallel:
            for block in self.sub_blocks():
                x = block(x, step)
            return x
        y = self.norm(x) if self.norm is not None and not self.post else x
        for block in self.sub_blocks():
            x = x + block.branch(y, step)
        return self.norm(x) if self.post and self.norm is not None else x  # post: a norm is built


class Stack(nn.Module):
    """The layers of a decoder (causal) or an encoder (bidirectional), the stack's position
    bias (built once, shared by its layers) and, unless post-norm, a final norm."""

    def __init__(self, spec: Spec, kinds: list[LayerKind], causal: bool, cross: bool,
                 sparse: list[bool] | None = None):
        super().__init__()
        sparse = sparse or [False] * len(kinds)
        layers = [Layer(spec, kind, causal, cross, moe) for kind, moe in zip(kinds, sparse, strict=True)]
        self.layers = nn.ModuleList(layers)
        biased = any(layer.attention.score_bias for layer in layers)
        self.position_bias: nn.Module | None = None
        if biased and spec.position is Position.t5_relative:
            self.position_bias = RelativeBias(spec, bidirectional=not causal)
        elif biased and spec.position is Position.alibi:
            self.position_bias = ALiBi(spec)
        self.final_norm = Norm(spec, spec.d_model) if spec.final_norm else None
        self.final_dropout = spec.final_dropout  # T5
        self.recompute = False  # full recompute: each layer keeps its input only

    def forward(self, x: Tensor, step: Step) -> Tensor:
        if self.position_bias is not None:
            keys = torch.arange(step.context, device=x.device)
            step = replace(step, bias=self.position_bias(step.positions, keys).to(x.dtype))
        for layer in self.layers:
            if self.recompute and self.training and torch.is_grad_enabled():
                x = checkpointed(layer, x, step)
            else:
                x = layer(x, step)
        x = self.final_norm(x) if self.final_norm is not None else x
        return drop(x, self.final_dropout, self.training)


def checkpointed(layer: nn.Module, x: Tensor, step: Step) -> Tensor:
    """The layer under activation checkpointing (Chen et al. 2016): its forward keeps nothing;
    its tensor inputs (x, the encoder output, the position bias) are saved and the layer is run
    again in backward. Reentrant, so that what it keeps goes through save_for_backward."""
    from torch.utils.checkpoint import checkpoint

    def run(x: Tensor, memory: Tensor | None, bias: Tensor | None) -> Tensor:
        out: Tensor = layer(x, replace(step, memory=memory, bias=bias))
        return out

    out: Tensor = checkpoint(run, x, step.memory, step.bias, use_reentrant=True)
    return out


class Embedding(nn.Module):
    """Token embeddings (scaled by sqrt(d) in Vaswani et al. 2017 and Gemma), plus absolute
    positions: a learned table per stack (GPT-2) or sinusoids (Vaswani et al. 2017)."""

    def __init__(self, spec: Spec, stacks: int):
        super().__init__()
        self.tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.positions = None
        if spec.position is Position.learned:
            # OPT reserves position_offset rows past the trained context
            tables = (nn.Embedding(spec.position_rows, spec.d_model) for _ in range(stacks))
            self.positions = nn.ModuleList(tables)
        self.sinusoidal = spec.position is Position.sinusoidal
        self.scale = math.sqrt(spec.d_model) if spec.embedding_scale else None
        self.dropout = spec.embedding_dropout_rate

    def forward(self, ids: Tensor, positions: Tensor, stack: int) -> Tensor:
        x = self.tokens(ids)
        if self.scale is not None:
            x = x * self.scale
        if self.positions is not None:
            x = x + self.positions[stack](positions)
        elif self.sinusoidal:
            x = x + sinusoidal(positions, x.shape[-1]).to(x.dtype)
        return drop(x, self.dropout, self.training)


class LMHead(nn.Module):
    """Logits for every position; a tied head (Press & Wolf 2017) reuses the token table."""

    def __init__(self, spec: Spec):
        super().__init__()
        shape = (spec.vocab_size, spec.d_model)
        self.weight = None if spec.tied_embeddings else nn.Parameter(torch.empty(shape))
        self.bias = nn.Parameter(torch.zeros(spec.vocab_size)) if spec.bias.lm_head else None

    def forward(self, x: Tensor, table: Tensor) -> Tensor:
        return F.linear(x, table if self.weight is None else self.weight, self.bias)


# --- the model --------------------------------------------------------------------------------


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


class Transformer(nn.Module):
    """A decoder-only model, or an encoder-decoder (Vaswani et al. 2017; T5) whose encoder and
    decoder share the token table."""

    def __init__(self, spec: Spec):
        super().__init__()
        self.spec = spec
        enc_dec = spec.is_encoder_decoder
        self.embedding = Embedding(spec, stacks=2 if enc_dec else 1)
        self.encoder = None
        if enc_dec:
            assert spec.n_encoder_layers is not None and spec.n_decoder_layers is not None
            encoder_kinds = [LayerKind.global_] * spec.n_encoder_layers
            self.encoder = Stack(spec, encoder_kinds, causal=False, cross=False)
            decoder_kinds = [LayerKind.global_] * spec.n_decoder_layers
        else:
            decoder_kinds = spec.layer_kinds()
        self.decoder = Stack(spec, decoder_kinds, causal=True, cross=enc_dec,
                             sparse=list(spec.sparse_layers()))
        self.lm_head = LMHead(spec)
        self.cached = [m for m in self.decoder.modules() if isinstance(m, Attention)]
        self.stacks = [s for s in (self.encoder, self.decoder) if s is not None]
        for slot, module in enumerate(self.cached):
            module.slot = slot

    def forward(self, tokens: Tensor, enc_tokens: Tensor | None = None, cache: KVCache | None = None,
                start: int = 0) -> Tensor:
        """Logits at every position of `tokens`, which sit at positions start, start+1, ...

        `enc_tokens` runs the encoder (prefill, training); without it a decoder reads the
        encoder's K/V from `cache` (decode).
        """
        memory = None
        if self.encoder is not None and enc_tokens is not None:
            positions = torch.arange(enc_tokens.shape[1], device=enc_tokens.device)
            x = self.embedding(enc_tokens, positions, stack=0)
            memory = self.encoder(x, Step(positions, context=positions.shape[0]))
        S = tokens.shape[1]
        positions = torch.arange(start, start + S, device=tokens.device)
        x = self.embedding(tokens, positions, stack=-1)
        x = self.decoder(x, Step(positions, context=start + S, cache=cache, memory=memory))
        if self.spec.head_scale:  # T5 with a tied head (Mesh TensorFlow): x * d^-1/2 first
            x = x * self.spec.d_model ** -0.5
        logits: Tensor = self.lm_head(x, self.embedding.tokens.weight)
        if self.spec.logit_scale is not None:  # Cohere
            logits = logits * self.spec.logit_scale
        if self.spec.final_softcap is not None:  # Gemma 2: cap * tanh(logits / cap)
            cap = self.spec.final_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def recompute(self, full: bool) -> Transformer:
        """Recompute every layer in backward (full activation recomputation) or none."""
        for stack in self.stacks:
            stack.recompute = full
        return self

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy, plus the z-loss coef * log(Z)^2 (PaLM, Chowdhery et al. 2022, 5)."""
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        if self.spec.z_loss > 0:
            loss = loss + self.spec.z_loss * torch.logsumexp(logits, dim=-1).pow(2).mean()
        for module in self.decoder.modules():  # Switch's load-balancing loss of each sparse layer
            aux = getattr(module, "aux", None)
            if aux is not None:
                loss = loss + aux
        return loss

    def new_cache(self, batch: int, context: int, enc_context: int = 0, *, random: bool = False) -> KVCache:
        """An empty cache for `context` decoder tokens and `enc_context` encoder tokens, on the
        model's device and dtype; `random` fills it (timing a decode step on real hardware)."""
        weight = self.embedding.tokens.weight
        buffers = []
        for m in self.cached:
            tokens = enc_context if m.cross else min(context, m.ring) if m.ring else context
            pair = [torch.empty(shape, device=weight.device, dtype=weight.dtype)
                    for shape in m.cache_shapes(batch, tokens)]
            if random:
                for t in pair:
                    t.normal_()
            buffers.append((pair[0], pair[1]))
        return KVCache(buffers)


def build(spec: Spec, device: str = "meta", dtype: torch.dtype = torch.bfloat16, seed: int = 0,
          ) -> Transformer:
    """The model on `device`: on the meta device shapes only (no memory, any size); elsewhere
    initialised GPT-2 style (normal(0, 0.02) weights, zero biases, unit gains)."""
    with torch.device("meta"):
        model = Transformer(spec)
    model = model.to(dtype=dtype)
    if spec.moe is not None and spec.moe.router_dtype is not None:  # DeepSeek's fp32 router
        from costmodel.measure.moe import keep_router_dtypes

        keep_router_dtypes(model)
    if device == "meta":
        return model
    model = model.to_empty(device=device)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if isinstance(_owner(model, name), Norm):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
        for module in model.modules():
            if isinstance(module, ALiBi):
                module.slopes = torch.tensor(ALiBi.slopes_for(spec.n_heads), device=device)
    return model


def _owner(model: nn.Module, name: str) -> nn.Module:
    return model.get_submodule(name.rpartition(".")[0])
