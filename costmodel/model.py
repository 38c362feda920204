"""A whole model's component tree: the design elements of a spec assembled into blocks and stacks.

The tree is a flat, ordered mapping from a component to its ``Cost``: ``tree`` keys it by
``Key`` (``components/key.py``: stack, layer group, sub-block, leaf, role), ``components`` by
the key's path, nanoGPT-style:
``embedding/tokens``, ``layers/attention/q``, ``layers/ffn/down``, ``lm_head``. A parent is the
sum of its children, so a path prefix selects a sub-tree. A stack with several kinds of layer
(a local/global pattern) has one group per kind: ``layers[local]/...``, ``layers[global]/...``.
An encoder-decoder has ``encoder/...`` and ``decoder/...`` stacks, with ``cross_attention``
in each decoder layer. An encoder-only model (BERT) has one bidirectional ``layers`` stack and
ends in its head (``pooler/...``, ``mlm/...``, ``classifier``; ``components.heads``), no LM head.

Layer costs are per layer times the layer-count symbol (``L``, ``L_local``, ``L_dec`` ...).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial, reduce
from typing import Any, TypeVar, cast

from costmodel import symbols as sym
from costmodel.components import (
    ATTENTION_KINDS,
    FFN_KINDS,
    disentangled,
    embedding,
    heads,
    position,
    size_symbols,
    stability,
)
from costmodel.components import attention as attn
from costmodel.components.block import RESIDUAL_FLOPS, residual
from costmodel.components.key import TOKEN_TABLE, Key, Role, layer_role
from costmodel.components.loss import cross_entropy, dropout
from costmodel.components.norm import norm
from costmodel.cost import Cost, Dims, Num, plus
from costmodel.spec import Block, LayerKind, Norm, NormPosition, Position, Spec

__all__ = ["RESIDUAL_FLOPS", "Key", "Role", "components", "layer_groups", "numeric_dims", "spec_values",
           "symbolic_dims", "tree"]


@dataclass(frozen=True)
class SubBlock:
    """An attention sub-block of a layer: its name, shape and positions."""

    name: str
    shape: attn.Shape
    rope: bool
    score_bias: bool


def symbolic_dims(spec: Spec, mla: str = "naive", routing: str = "uniform", p_kv: Any = None) -> Dims:
    """Every size a symbol: the formulas as a reader of the papers writes them (`p_kv`: the
    cache's width where it is not p, such as p/2 for an fp8 cache beside bf16)."""
    return Dims(
        B=sym.B, S=sym.S, C=sym.C, S_e=sym.S_e, C_e=sym.C_e, p=sym.p, p_kv=p_kv,
        sizes={n: getattr(sym, n) for n in size_symbols()},
        layers={key: sym.layer_count(*key) for key in layer_groups(spec)},
        mla=mla,
        routing=routing,
    )


def numeric_dims(spec: Spec, shape: dict[str, int], p: int, mla: str = "naive", routing: str = "uniform",
                 p_kv: int | None = None, one_kernel: bool = False) -> Dims:
    """Every size an integer: the spec's sizes, the pass's shape (B, S, C, S_e, C_e) and p.

    A size the spec has none of (no sliding window: w) is 0; no formula of the spec reads it.
    `mla` is the convention latent attention runs in (``components.mla.Convention``); `routing`
    says which experts a sparse layer reads (``components.moe.Routing``); `p_kv` the KV cache's
    bytes per element where it is not p (``costmodel.precision``); `one_kernel` what a pass of
    one-kernel components keeps for backward (``Dims.one_kernel``: the memory model under flash).
    """
    sizes = dict(_kept(_SIZES, spec, lambda: {n: s.value(spec) or 0 for n, s in size_symbols().items()}))
    return Dims(**shape, p=p, p_kv=p_kv, sizes=sizes, layers=dict(layer_groups(spec)), mla=mla,
                routing=routing, one_kernel=one_kernel)


def spec_values(spec: Spec) -> dict[Any, int]:
    """symbol -> the spec's value, for every model-size symbol (phase symbols left free)."""
    values = {getattr(sym, n): v for n, s in size_symbols().items() if (v := s.value(spec)) is not None}
    for key, count in layer_groups(spec).items():
        values[sym.layer_count(*key)] = count
    return values


def layer_groups(spec: Spec) -> dict[tuple[str, str | None], int]:
    """(stack, group) -> number of layers. Group is None when a stack has one kind of layer."""
    if spec.is_encoder_decoder:
        assert spec.n_encoder_layers is not None and spec.n_decoder_layers is not None
        return {("encoder", None): spec.n_encoder_layers, ("decoder", None): spec.n_decoder_layers}
    return {("layers", group): count for group, (_, _, count) in _groups(spec).items()}


_Kept = TypeVar("_Kept")
#: id(spec) -> (the spec, what it gives): a spec is frozen, so its sizes and layer groups are
#: computed once (the time grid reads them every call). Held with the spec: its id stays its own.
_SIZES: dict[int, tuple[Spec, Any]] = {}
_GROUPS: dict[int, tuple[Spec, Any]] = {}


def _kept(table: dict[int, tuple[Spec, Any]], spec: Spec, make: Callable[[], _Kept]) -> _Kept:
    hit = table.get(id(spec))
    if hit is not None and hit[0] is spec:
        return cast(_Kept, hit[1])
    if len(table) > 256:
        table.clear()
    value = make()
    table[id(spec)] = (spec, value)
    return value


def _groups(spec: Spec) -> dict[str | None, tuple[LayerKind, bool, int]]:
    """group name -> (attention kind, sparse FFN?, layers): the group is the attention kind where
    the pattern mixes kinds, and ``dense`` or ``moe`` where a mixture of experts leaves some layers
    dense (``local_moe``); local before global, dense before sparse. Counted, never listed. (Read
    only: the dictionary is the spec's, kept.)"""
    return _kept(_GROUPS, spec, lambda: _count_groups(spec))


def _count_groups(spec: Spec) -> dict[str | None, tuple[LayerKind, bool, int]]:
    counts = spec.layer_group_counts()
    mixed_kinds = len({kind for kind, _ in counts}) > 1
    mixed_ffn = len({moe for _, moe in counts}) > 1
    out: dict[str | None, tuple[LayerKind, bool, int]] = {}
    for (kind, moe), count in sorted(counts.items(), key=lambda kv: (list(LayerKind).index(kv[0][0]),
                                                                     kv[0][1])):
        parts = ([kind.value] if mixed_kinds else []) + (["moe" if moe else "dense"] if mixed_ffn else [])
        out["_".join(parts) or None] = (kind, moe, count)
    return out


def group_names(spec: Spec) -> list[str | None]:
    """The group of each decoder layer, in order: a list of n_layers entries, for the reference
    model's module names only (the formulas count groups with ``layer_groups``)."""
    by_kind = {(kind, moe): name for name, (kind, moe, _) in _groups(spec).items()}
    return [by_kind[(kind, moe)] for kind, moe in zip(spec.layer_kinds(), spec.sparse_layers(), strict=True)]


def group_kinds(spec: Spec, group: str | None) -> tuple[LayerKind, bool]:
    """The attention kind of a decoder layer group and whether its FFN is sparse."""
    kind, moe, _ = _groups(spec)[group]
    return kind, moe


def components(spec: Spec, dims: Dims) -> dict[str, Cost]:
    """The component tree of one forward pass (plus the training-only leaves, flagged), by path."""
    return {key.path: cost for key, cost in tree(spec, dims).items()}


def tree(spec: Spec, dims: Dims) -> dict[Key, Cost]:
    """The component tree of one forward pass (plus the training-only leaves, flagged), by key."""
    B, S, S_e = dims.B, dims.S, dims.S_e
    out: dict[Key, Cost] = {}
    # Encoder and decoder of an encoder-decoder share one embedding table (T5, Vaswani et al.).
    stacks = [(S_e, "encoder"), (S, "decoder")] if spec.is_encoder_decoder else [(S, "layers")]
    out[TOKEN_TABLE] = _sum(
        embedding.tokens(spec, dims, B * n, owns_table=i == 0) for i, (n, _) in enumerate(stacks)
    )
    if spec.position in (Position.learned, Position.sinusoidal):
        out[Key("positions", Role.embedding, block="embedding")] = _sum(
            position.input_positions(spec, dims, B * n, n) for n, _ in stacks)
    if spec.token_types:
        out[Key("token_types", Role.embedding, block="embedding")] = embedding.token_types(dims, B * S)
    if spec.embedding_norm:
        out[Key("norm", Role.norm, block="embedding")] = norm(spec, dims, B * S, dims.d)
    if spec.embedding_dropout_rate > 0:
        out[Key("dropout", Role.dropout, block="embedding")] = _sum(
            dropout(dims, dims.d * n * B) for n, _ in stacks)  # (the batch last: one full pass)
    for _, stack in stacks:
        out.update(_stack(spec, dims, stack))
    if spec.is_encoder:  # no LM head: the head the spec names (BERT's pooler, a task head, none)
        out.update(heads.head(spec, dims))
        return out
    if spec.head_scale:
        out[Key("head_scale", Role.head)] = embedding.head_scale(dims, B * S)
    out[Key("lm_head", Role.head)] = embedding.lm_head(spec, dims, B * S)
    if spec.logit_scale is not None:
        out[Key("logit_scale", Role.head)] = embedding.logit_scale(dims, B * S)
    if spec.final_softcap is not None:
        out[Key("logit_softcap", Role.head)] = embedding.logit_softcap(dims, B * S)
    out[Key("cross_entropy", Role.loss, block="loss")] = cross_entropy(dims, B * S)
    if spec.z_loss > 0:
        out[Key("z_loss", Role.loss, block="loss")] = stability.z_loss(dims, B * S)
    return out


def _stack(spec: Spec, dims: Dims, stack: str) -> dict[Key, Cost]:
    q_len = dims.S_e if stack == "encoder" else dims.S
    out: dict[Key, Cost] = {}
    groups = [(kind, n) for (s, kind), n in dims.layers.items() if s == stack]
    # Groups of one attention kind share its sub-blocks, and (``_layer``'s `built`) their
    # attention and FFN leaves: each is built once per stack (Llama 4's four groups have two of
    # each), the same costs either way, and over arrays (the time grid) the tree's largest work.
    kinds = {kind: _layer_kind(spec, stack, kind) for kind, _ in groups}
    by_kind = {k: _sub_blocks(spec, dims, stack, k) for k in dict.fromkeys(kinds.values())}
    layers = {kind: by_kind[kinds[kind]] for kind, _ in groups}
    built: dict[object, Any] = {}
    if spec.position is Position.disentangled:  # DeBERTa's relative table, once per stack
        for leaf, cost in disentangled.table(spec, dims, dims.B * q_len):
            out[Key(leaf, Role.norm if leaf.endswith("norm") else Role.position, stack)] = cost
    if spec.position in (Position.t5_relative, Position.alibi):
        spans = [subs[0].shape.span for subs in layers.values() if subs[0].score_bias]
        if spans:  # one bias per stack, as wide as the widest layer that uses it
            bias = position.score_bias(spec, dims, q_len, spans[-1])
            out[Key("position_bias", Role.position, stack)] = bias
    for kind, count in groups:
        sparse = stack == "layers" and group_kinds(spec, kind)[1]
        for block, name, cost in _layer(spec, dims, layers[kind], q_len, sparse, built):
            # A component names the parts it holds in its leaves: a sparse FFN's ``experts/up``.
            out[_layer_key(stack, kind, block, name)] = cost.times(count)
    if spec.final_norm:
        out[Key("final_norm", Role.norm, stack)] = norm(spec, dims, dims.B * q_len, dims.d)
    if spec.final_dropout > 0:
        out[Key("final_dropout", Role.dropout, stack)] = dropout(dims, dims.d * q_len * dims.B)
    return out


#: (stack, group, sub-block, name) -> the Key of a layer's leaf: built once, then shared (a Key is
#: frozen; the time grid builds the tree every call, and a Key took 2 us to build).
_KEYS: dict[tuple[str, str | None, str | None, str], Key] = {}


def _layer_key(stack: str, group: str | None, block: str | None, name: str) -> Key:
    """The key of a layer's leaf `name` (a sparse FFN's ``experts/up`` names its part)."""
    hit = _KEYS.get((stack, group, block, name))
    if hit is None:
        if len(_KEYS) > 4096:
            _KEYS.clear()
        part, _, leaf = name.rpartition("/")
        hit = _KEYS[(stack, group, block, name)] = Key(leaf, layer_role(leaf), stack, layer=True, group=group,
                                                       block=block, part=part or None)
    return hit


def _layer_kind(spec: Spec, stack: str, kind: str | None) -> LayerKind:
    """The attention kind of a group of this stack (an encoder-decoder's layers are global)."""
    return group_kinds(spec, kind)[0] if stack == "layers" else LayerKind.global_


def _sub_blocks(spec: Spec, dims: Dims, stack: str, layer_kind: LayerKind) -> list[SubBlock]:
    """The attention sub-blocks of one layer of this stack and attention kind."""
    local = layer_kind is LayerKind.local
    if stack == "encoder":
        shape = attn.bidirectional(dims)
    elif spec.is_encoder:
        shape = attn.encoder_self(dims, window=local)
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


_Built = TypeVar("_Built")


def _layer(spec: Spec, dims: Dims, subs: list[SubBlock], q_len: Num, sparse: bool = False,
           built: dict[object, Any] | None = None) -> list[tuple[str | None, str, Cost]]:
    """One layer: its sub-blocks with norms, dropout and residual adds where the spec puts them.

    pre            x + F(norm(x))                  (GPT-2, LLaMA)
    post           norm(x + F(x))                  (Vaswani et al. 2017)
    sandwich       x + norm(F(norm(x)))            (Gemma 2/3)
    post_sublayer  x + norm(F(x))                  (OLMo 2)
    A parallel block (GPT-J, PaLM) feeds attention and FFN the same input and adds both to the
    residual in one step: x + Attn(norm(x)) + FFN(norm(x)), with one shared norm or one each.
    `built` holds what another group of the stack has built already (a sub-block's leaves by
    the sub-block's identity, an FFN's by its sparseness, the norm): reused, not built again.
    Each leaf comes as (its sub-block, or None for the layer's own; its name; its cost).
    """
    T = dims.B * q_len
    built = {} if built is None else built

    def once(key: object, make: Callable[[], _Built]) -> _Built:
        if key not in built:
            built[key] = make()
        return cast(_Built, built[key])

    pos = spec.norm_position
    pre = pos in (NormPosition.pre, NormPosition.sandwich)
    on_output = pos in (NormPosition.sandwich, NormPosition.post_sublayer)
    attention = ATTENTION_KINDS[spec.attention.kind]
    branches: list[tuple[str, list[tuple[str, Cost]], SubBlock | None]] = [
        (s.name, once(id(s), partial(attention, spec, dims, s.shape, s.rope, s.score_bias)), s) for s in subs]
    # A mixture of experts' dense layers (DeepSeek's first k, Llama 4's interleave) are dense FFNs.
    ffn = FFN_KINDS[spec.ffn.kind if sparse else "dense"]
    branches.append(("ffn", once(("ffn", sparse), lambda: ffn(spec, dims, T)), None))

    def the_norm() -> Cost:
        return once("norm", lambda: norm(spec, dims, T, dims.d))

    def branch(name: str, leaves: list[tuple[str, Cost]], sub: SubBlock | None, own_norm: bool,
               kept: bool = False) -> Iterator[tuple[str | None, str, Cost]]:
        # `kept`: a later branch of a parallel block reads the tensor the first branch already
        # keeps for backward; its first reader (a LayerNorm, or the first linear) keeps no copy.
        if own_norm:
            n = the_norm()
            yield name, "norm", replace(n, saved=n.saved - dims.p * T * dims.d) if kept and (
                spec.norm is Norm.layernorm) else n
        for i, (leaf, cost) in enumerate(leaves):
            if kept and not own_norm and i == 0:
                cost = replace(cost, saved=cost.saved - dims.p * T * dims.d)
            yield name, leaf, cost
        if on_output:
            yield name, "post_norm", the_norm()
        # On the branch output, the attention probabilities and the FFN hidden activations,
        # each at its own rate.
        drop_out = spec.dropout > 0
        drop_probs = sub is not None and spec.attention_dropout_rate > 0
        drop_hidden = sub is None and spec.ffn_dropout > 0
        if drop_out or drop_probs or drop_hidden:
            output = T * dims.d if drop_out else 0
            probs = (dims.h * sub.shape.q_len * sub.shape.span * dims.B
                     if sub is not None and drop_probs else 0)
            hidden = T * dims.f if drop_hidden else 0
            # (no 0 added: over arrays each is a pass)
            yield name, "dropout", dropout(dims, plus(plus(output, probs), hidden))

    out: list[tuple[str | None, str, Cost]] = []
    if spec.block is Block.parallel:
        shared = pre and spec.shared_norm
        if shared:
            out.append((None, "norm", the_norm()))
        for i, (name, leaves, sub) in enumerate(branches):
            out.extend(branch(name, leaves, sub, own_norm=pre and not shared, kept=i > 0))
        n = len(branches)
        out.append((None, "residual", residual(dims, T, n)))
        if pos is NormPosition.post:
            out.append((None, "norm", the_norm()))
        return out
    for name, leaves, sub in branches:
        out.extend(branch(name, leaves, sub, own_norm=pre))
        out.append((name, "residual", residual(dims, T, 1)))
        if pos is NormPosition.post:
            out.append((name, "norm", the_norm()))
    return out


def _sum(costs: Iterable[Cost]) -> Cost:
    return reduce(operator.add, costs)
