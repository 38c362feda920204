"""A whole model's component tree: the design elements of a spec assembled into blocks and stacks.

The tree is a flat, ordered mapping from a component path to its ``Cost``, nanoGPT-style:
``embedding/tokens``, ``layers/attention/q``, ``layers/ffn/down``, ``lm_head``. A parent is the
sum of its children, so a path prefix selects a sub-tree. A stack with several kinds of layer
(a local/global pattern) has one group per kind: ``layers[local]/...``, ``layers[global]/...``.
An encoder-decoder has ``encoder/...`` and ``decoder/...`` stacks, with ``cross_attention``
in each decoder layer.

Layer costs are per layer times the layer-count symbol (``L``, ``L_local``, ``L_dec`` ...).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import reduce

from costmodel import symbols as sym
from costmodel.components import attention as attn
from costmodel.components import embedding, position, stability
from costmodel.components.ffn import ffn
from costmodel.components.loss import cross_entropy, dropout
from costmodel.components.mla import Convention, latent_attention
from costmodel.components.norm import norm
from costmodel.cost import Cost, Dims, Num, elementwise
from costmodel.spec import Block, LayerKind, NormPosition, Position, Spec

RESIDUAL_FLOPS = 1  # one add per element per branch joining the residual stream


@dataclass(frozen=True)
class SubBlock:
    """An attention sub-block of a layer: its name, shape and positions."""

    name: str
    shape: attn.Shape
    rope: bool
    score_bias: bool


def symbolic_dims(spec: Spec) -> Dims:
    """Every size a symbol: the formulas as a reader of the papers writes them."""
    dims = {n: getattr(sym, n) for n in _SIZES}
    return Dims(**dims, layers={key: sym.layer_count(*key) for key in layer_groups(spec)})


def numeric_dims(spec: Spec, shape: dict[str, int], p: int) -> Dims:
    """Every size an integer: the spec's sizes, the pass's shape (B, S, C, S_e, C_e) and p."""
    return Dims(
        **shape,
        d=spec.d_model, h=spec.n_heads, k=spec.n_kv_heads, d_h=spec.head_dim, f=spec.d_ff,
        V=spec.vocab_size, w=spec.window or 0, r=spec.rotary_dims, n_pos=spec.position_rows,
        n_buckets=spec.relative_buckets, p=p, c=spec.attention_chunk or 0,
        **latent_values(spec),
        layers=layer_groups(spec),
    )


def latent_values(spec: Spec) -> dict[str, int]:
    """r_q, r_kv, d_n, d_r, d_v of a latent-attention spec (none for MHA/GQA/MQA)."""
    m = spec.attention
    if m is None:
        return {}
    values = dict(r_kv=m.kv_lora_rank, d_n=m.qk_nope_head_dim, d_r=m.qk_rope_head_dim, d_v=m.v_head_dim)
    return values | ({} if m.q_lora_rank is None else {"r_q": m.q_lora_rank})


_SIZES = tuple(f.name for f in fields(Dims) if f.name != "layers")


def spec_values(spec: Spec) -> dict:
    """symbol -> the spec's value, for every model-size symbol (phase symbols left free)."""
    values = {getattr(sym, n): v for n, v in (
        ("d", spec.d_model), ("h", spec.n_heads), ("k", spec.n_kv_heads), ("d_h", spec.head_dim),
        ("f", spec.d_ff), ("V", spec.vocab_size), ("r", spec.rotary_dims),
        ("n_pos", spec.position_rows), ("n_buckets", spec.relative_buckets),
    )}
    if spec.window is not None:
        values[sym.w] = spec.window
    if spec.attention_chunk is not None:
        values[sym.c] = spec.attention_chunk
    for name, v in latent_values(spec).items():
        values[getattr(sym, name)] = v
    for key, count in layer_groups(spec).items():
        values[sym.layer_count(*key)] = count
    return values


def layer_groups(spec: Spec) -> dict[tuple[str, str | None], int]:
    """(stack, kind) -> number of layers. Kind is None when a stack has one kind of layer."""
    if spec.is_encoder_decoder:
        return {("encoder", None): spec.n_encoder_layers, ("decoder", None): spec.n_decoder_layers}
    counts = spec.kind_counts()
    if len(counts) == 1:
        return {("layers", None): spec.n_layers}  # type: ignore[dict-item]
    return {("layers", kind.value): n for kind, n in counts.items()}


def components(spec: Spec, dims: Dims, mla: Convention = Convention.naive) -> dict[str, Cost]:
    """The component tree of one forward pass (plus the training-only leaves, flagged).

    `mla` is how latent attention runs (``components.mla``); other specs ignore it.
    """
    B, S, S_e = dims.B, dims.S, dims.S_e
    out: dict[str, Cost] = {}
    # Encoder and decoder of an encoder-decoder share one embedding table (T5, Vaswani et al.).
    stacks = [(S_e, "encoder"), (S, "decoder")] if spec.is_encoder_decoder else [(S, "layers")]
    out["embedding/tokens"] = _sum(
        embedding.tokens(spec, dims, B * n, owns_table=i == 0) for i, (n, _) in enumerate(stacks)
    )
    if spec.position in (Position.learned, Position.sinusoidal):
        out["embedding/positions"] = _sum(position.input_positions(spec, dims, B * n, n) for n, _ in stacks)
    if spec.embedding_dropout_rate > 0:
        out["embedding/dropout"] = _sum(dropout(dims, B * n * dims.d) for n, _ in stacks)
    for _, stack in stacks:
        out.update(_stack(spec, dims, stack, mla))
    if spec.head_scale:
        out["head_scale"] = embedding.head_scale(dims, B * S)
    out["lm_head"] = embedding.lm_head(spec, dims, B * S)
    if spec.logit_scale is not None:
        out["logit_scale"] = embedding.logit_scale(dims, B * S)
    if spec.final_softcap is not None:
        out["logit_softcap"] = embedding.logit_softcap(dims, B * S)
    out["loss/cross_entropy"] = cross_entropy(dims, B * S)
    if spec.z_loss > 0:
        out["loss/z_loss"] = stability.z_loss(dims, B * S)
    return out


def _stack(spec: Spec, dims: Dims, stack: str, mla: Convention) -> dict[str, Cost]:
    prefix = "" if stack == "layers" else f"{stack}/"
    q_len = dims.S_e if stack == "encoder" else dims.S
    out: dict[str, Cost] = {}
    groups = [(kind, n) for (s, kind), n in dims.layers.items() if s == stack]
    layers = {kind: _sub_blocks(spec, dims, stack, kind) for kind, _ in groups}
    if spec.position in (Position.t5_relative, Position.alibi):
        spans = [subs[0].shape.span for subs in layers.values() if subs[0].score_bias]
        if spans:  # one bias per stack, as wide as the widest layer that uses it
            out[f"{prefix}position_bias"] = position.score_bias(spec, dims, q_len, spans[-1])
    for kind, count in groups:
        group = f"{prefix}layers" + (f"[{kind}]" if kind else "")
        for name, cost in _layer(spec, dims, layers[kind], q_len, mla):
            out[f"{group}/{name}"] = cost.times(count)
    if spec.final_norm:
        out[f"{prefix}final_norm"] = norm(spec, dims, dims.B * q_len, dims.d)
    if spec.final_dropout > 0:
        out[f"{prefix}final_dropout"] = dropout(dims, dims.B * q_len * dims.d)
    return out


def _sub_blocks(spec: Spec, dims: Dims, stack: str, kind: str | None) -> list[SubBlock]:
    """The attention sub-blocks of one layer of this stack and kind."""
    if kind is not None:
        layer_kind = LayerKind(kind)
    else:  # a stack of one kind: the spec's only kind, or global in an encoder-decoder
        layer_kind = spec.layer_pattern[0] if stack == "layers" else LayerKind.global_
    local = layer_kind is LayerKind.local
    if stack == "encoder":
        shape = attn.bidirectional(dims)
    elif layer_kind is LayerKind.chunked:
        shape = attn.chunked(dims)
    else:
        shape = attn.causal(dims, window=local)
    positions = spec.position.per_layer and not (spec.global_nope and layer_kind is LayerKind.global_)
    subs = [SubBlock(
        "attention", shape,
        rope=positions and spec.position is Position.rope,
        score_bias=positions and spec.position in (Position.t5_relative, Position.alibi),
    )]
    if stack == "decoder":
        subs.append(SubBlock("cross_attention", attn.cross(dims), rope=False, score_bias=False))
    return subs


def _layer(
    spec: Spec, dims: Dims, subs: list[SubBlock], q_len: Num, mla: Convention
) -> list[tuple[str, Cost]]:
    """One layer: its sub-blocks with norms, dropout and residual adds where the spec puts them.

    pre            x + F(norm(x))                  (GPT-2, LLaMA)
    post           norm(x + F(x))                  (Vaswani et al. 2017)
    sandwich       x + norm(F(norm(x)))            (Gemma 2/3)
    post_sublayer  x + norm(F(x))                  (OLMo 2)
    A parallel block (GPT-J, PaLM) feeds attention and FFN the same input and adds both to the
    residual in one step: x + Attn(norm(x)) + FFN(norm(x)), with one shared norm or one each.
    """
    T = dims.B * q_len
    pos = spec.norm_position
    pre = pos in (NormPosition.pre, NormPosition.sandwich)
    on_output = pos in (NormPosition.sandwich, NormPosition.post_sublayer)

    def attention(s: SubBlock) -> list[tuple[str, Cost]]:
        if spec.attention is not None:
            return latent_attention(spec, dims, s.shape, s.rope, s.score_bias, mla)
        return attn.attention(spec, dims, s.shape, s.rope, s.score_bias)

    branches = [(s.name, attention(s), s) for s in subs]
    branches.append(("ffn", ffn(spec, dims, T), None))

    def the_norm() -> Cost:
        return norm(spec, dims, T, dims.d)

    def branch(name: str, leaves: list[tuple[str, Cost]], sub: SubBlock | None, own_norm: bool):
        if own_norm:
            yield f"{name}/norm", the_norm()
        for leaf, cost in leaves:
            yield f"{name}/{leaf}", cost
        if on_output:
            yield f"{name}/post_norm", the_norm()
        # On the branch output, the attention probabilities and the FFN hidden activations,
        # each at its own rate.
        drop_out = spec.dropout > 0
        drop_probs = sub is not None and spec.attention_dropout_rate > 0
        drop_hidden = sub is None and spec.ffn_dropout > 0
        if drop_out or drop_probs or drop_hidden:
            output = T * dims.d if drop_out else 0
            probs = dims.B * dims.h * sub.shape.q_len * sub.shape.span if drop_probs else 0
            hidden = T * dims.f if drop_hidden else 0
            yield f"{name}/dropout", dropout(dims, output + probs + hidden)

    out: list[tuple[str, Cost]] = []
    if spec.block is Block.parallel:
        shared = pre and spec.shared_norm
        if shared:
            out.append(("norm", the_norm()))
        for name, leaves, sub in branches:
            out.extend(branch(name, leaves, sub, own_norm=pre and not shared))
        n = len(branches)
        out.append(("residual", elementwise(T * dims.d, n * RESIDUAL_FLOPS, dims.p, inputs=n + 1)))
        if pos is NormPosition.post:
            out.append(("norm", the_norm()))
        return out
    for name, leaves, sub in branches:
        out.extend(branch(name, leaves, sub, own_norm=pre))
        out.append((f"{name}/residual", elementwise(T * dims.d, RESIDUAL_FLOPS, dims.p, inputs=2)))
        if pos is NormPosition.post:
            out.append((f"{name}/norm", the_norm()))
    return out


def _sum(costs: Iterable[Cost]) -> Cost:
    return reduce(operator.add, costs)
