"""A PyTorch transformer built from a ``Spec``: the executable definition of every design element.

Read top to bottom, nanoGPT-style (the sub-blocks, norms, positions, attention, FFN and the
residual wiring of a sub-block, are in ``measure.blocks``): a layer, a stack, the model, its KV
cache. Every element of docs/reference.md is here, written plainly, with no fused kernel that
would hide work from the counters:

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
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from costmodel.measure import encoder
from costmodel.measure.blocks import (
    ALiBi,
    Attention,
    FeedForward,
    KVCache,
    Norm,
    RelativeBias,
    Step,
    SubBlock,
    drop,
    sinusoidal,
)
from costmodel.measure.encoder import DisentangledAttention
from costmodel.measure.latent import LatentAttention
from costmodel.measure.moe import SparseFeedForward, keep_router_dtypes
from costmodel.spec import Block, Head, LayerKind, NormPosition, Position, Spec

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
            kind_of = LatentAttention
        elif spec.position is Position.disentangled:
            kind_of = DisentangledAttention
        self.attention = kind_of(
            spec, own, window=spec.window if kind is LayerKind.local else None,
            chunk=spec.attention_chunk if kind is LayerKind.chunked else None, causal=causal,
            rope=positions and spec.position is Position.rope,
            score_bias=positions and spec.position in (Position.t5_relative, Position.alibi),
        )
        self.cross_attention = Attention(spec, own, cross=True) if cross else None
        if sparse:  # a mixture of experts (costmodel.measure.moe, round-robin routing)
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
        if spec.position is Position.disentangled:  # DeBERTa: the table each layer projects
            self.relative_positions = nn.Embedding(2 * spec.relative_span, spec.d_model)
            self.relative_norm = Norm(spec, spec.d_model)
        self.final_norm = Norm(spec, spec.d_model) if spec.final_norm else None
        self.final_dropout = spec.final_dropout  # T5
        self.recompute = False  # full recompute: each layer keeps its input only

    def forward(self, x: Tensor, step: Step) -> Tensor:
        if self.position_bias is not None:
            keys = torch.arange(step.context, device=x.device)
            step = replace(step, bias=self.position_bias(step.positions, keys).to(x.dtype))
        if hasattr(self, "relative_positions"):
            step = replace(step, relative=self.relative_norm(self.relative_positions.weight))
        for layer in self.layers:
            if self.recompute and self.training and torch.is_grad_enabled():
                x = checkpointed(layer, x, step)
            else:
                x = layer(x, step)
        x = self.final_norm(x) if self.final_norm is not None else x
        return drop(x, self.final_dropout, self.training)


def checkpointed(layer: nn.Module, x: Tensor, step: Step) -> Tensor:
    """The layer under activation checkpointing (Chen et al. 2016): its forward keeps nothing;
    its tensor inputs (x, the encoder output, the position bias, DeBERTa's normalised table)
    are saved and the layer is run again in backward. Reentrant, so that what it keeps goes
    through save_for_backward; every tensor the layer reads that carries a gradient must be an
    input, or the backward of each layer would run the stack's graph again (and fail)."""
    from torch.utils.checkpoint import checkpoint

    def run(x: Tensor, memory: Tensor | None, bias: Tensor | None, relative: Tensor | None) -> Tensor:
        out: Tensor = layer(x, replace(step, memory=memory, bias=bias, relative=relative))
        return out

    out: Tensor = checkpoint(run, x, step.memory, step.bias, step.relative, use_reentrant=True)
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
        # BERT: segment embeddings and a norm over the sum
        self.token_types = nn.Embedding(spec.token_types, spec.d_model) if spec.token_types else None
        self.norm = Norm(spec, spec.d_model) if spec.embedding_norm else None
        self.dropout = spec.embedding_dropout_rate

    def forward(self, ids: Tensor, positions: Tensor, stack: int) -> Tensor:
        x = self.tokens(ids)
        if self.scale is not None:
            x = x * self.scale
        if self.positions is not None:
            x = x + self.positions[stack](positions)
        elif self.sinusoidal:
            x = x + sinusoidal(positions, x.shape[-1]).to(x.dtype)
        if self.token_types is not None:  # every token of segment 0, as transformers' default ids
            x = x + self.token_types(torch.zeros_like(ids))
        if self.norm is not None:
            x = self.norm(x)
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
        # An encoder-only model's one stack is bidirectional and caches nothing (module names:
        # the decoder's, which the component paths drop).
        self.decoder = Stack(spec, decoder_kinds, causal=not spec.is_encoder, cross=enc_dec,
                             sparse=list(spec.sparse_layers()))
        for name, head in encoder.heads(spec).items():
            self.add_module(name, head)
        self.lm_head = LMHead(spec) if not spec.is_encoder or spec.head is Head.mlm else None
        self.cached = [m for m in self.decoder.modules() if isinstance(m, Attention) and not spec.is_encoder]
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
        if self.spec.is_encoder:
            return self.head(x)
        if self.spec.head_scale:  # T5 with a tied head (Mesh TensorFlow): x * d^-1/2 first
            x = x * self.spec.d_model ** -0.5
        assert self.lm_head is not None  # a decoder always has its LM head
        logits: Tensor = self.lm_head(x, self.embedding.tokens.weight)
        if self.spec.logit_scale is not None:  # Cohere
            logits = logits * self.spec.logit_scale
        if self.spec.final_softcap is not None:  # Gemma 2: cap * tanh(logits / cap)
            cap = self.spec.final_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def head(self, x: Tensor) -> Tensor:
        """An encoder-only model's output: the last hidden state, the pooled [CLS], the class
        logits, or the masked-LM logits at every position (``measure.encoder``)."""
        head = self.spec.head
        if head in (Head.pooler, Head.classification):
            x = self.get_submodule("pooler")(x)
            return self.get_submodule("classifier")(x) if head is Head.classification else x
        if head is Head.mlm:
            assert self.lm_head is not None
            logits: Tensor = self.lm_head(self.get_submodule("mlm")(x), self.embedding.tokens.weight)
            return logits
        return x

    def recompute(self, full: bool) -> Transformer:
        """Recompute every layer in backward (full activation recomputation) or none."""
        for stack in self.stacks:
            stack.recompute = full
        return self

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy, plus the z-loss coef * log(Z)^2 (PaLM, Chowdhery et al. 2022, 5)."""
        if self.spec.is_encoder:
            return encoder.objective(self.spec, logits, targets)
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
