"""What a component is, as structured fields: the contract every consumer selects components by.

A component's path (``layers[local]/attention/softmax``) is its display name and its JSON key;
its ``Key`` is what it is: which stack, whether a leaf of every layer, which layer group,
which sub-block, which part of it, the leaf, and the leaf's role. ``model.tree`` sets the key
where it places a leaf; ``Key.path`` renders the path from the fields, and nothing parses it
back. The attention core is defined once, here (``ATTENTION_CORE``, ``Role.attention_core``).

    embedding/tokens                     stack None       block embedding          role embedding
    layers[local]/attention/softmax      stack layers     layer, group local       role attention core
    decoder/layers/cross_attention/k     stack decoder    layer, block cross_attention
    layers[moe]/ffn/experts/up           stack layers     layer, group moe, block ffn, part experts
    encoder/final_norm, position_bias    the stack's own (layer False): once per stack
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["ATTENTION_BLOCKS", "ATTENTION_CORE", "TOKEN_TABLE", "Key", "Role", "SubBlock", "layer_role"]

#: Where a leaf sits, its path less the leaf: (stack, layer, group, block, part).
SubBlock = tuple[str | None, bool, str | None, str | None, str | None]


class Role(str, Enum):
    """What a leaf does, as a reader of the papers names it."""

    embedding = "embedding"  # a table lookup: the tokens, learned or sinusoidal positions
    position = "position"  # positions applied in the layers: RoPE, a stack's relative-position bias
    projection = "projection"  # a weight matmul of a layer: Q, K, V, out, MLA's down/up, the FFN's
    attention_core = "attention core"  # scores to probabilities times V (``ATTENTION_CORE``)
    sink = "sink"  # attention sinks: a learned logit joined to each softmax row (its own op)
    kv_cache = "kv cache"  # writing the cache
    activation = "activation"  # the FFN's nonlinearity (gated: times the gate)
    norm = "norm"  # a layer's norms, QK-norm, MLA's latent norms, the final norm
    residual = "residual"  # the residual add
    dropout = "dropout"
    router = "router"  # a mixture of experts' router, top-k choice and load-balancing loss
    combine = "combine"  # the routed experts' outputs weighted into their tokens
    head = "head"  # the output side: head scale, LM head, logit scale and soft-cap
    loss = "loss"  # the training objective over the logits: cross-entropy, z-loss
    shared = "shared"  # (memory) a tensor a stack's layers share: causal mask, RoPE tables ...
    checkpoint = "checkpoint"  # (memory) a layer's input, kept by full recompute
    total = "total"  # a sum of components (``analysis.sum_rows``), no leaf of the tree


#: Sub-blocks that are attention: self-attention and an encoder-decoder's cross-attention.
ATTENTION_BLOCKS = ("attention", "cross_attention")

#: The attention core: every leaf of an attention sub-block from the scores QK^T to the
#: probabilities times V. What one flash-attention kernel runs (Dao et al. 2022), what
#: selective recompute recomputes (Korthikanti et al. 2022) and what ring attention (context
#: parallelism) runs against every key. The same leaves for MHA, GQA, MLA, local and global
#: layers, self- and cross-attention.
ATTENTION_CORE = frozenset({"scores", "scale", "position_bias", "mask", "softcap", "softmax", "av"})

#: Roles of the leaves a layer's sub-blocks hold (the components' names) and the block's own.
_LAYER_ROLES: dict[str, Role] = {
    **dict.fromkeys(("q", "k", "v", "out", "q_a", "q_b", "kv_a", "kv_b"), Role.projection),
    **dict.fromkeys(("up", "gate", "down", "shared_gate"), Role.projection),
    **dict.fromkeys(ATTENTION_CORE, Role.attention_core),
    **dict.fromkeys(("norm", "post_norm", "qk_norm", "q_norm", "kv_norm"), Role.norm),
    **dict.fromkeys(("router", "routing", "aux_loss"), Role.router),
    "rope": Role.position,
    **dict.fromkeys(("rel_q", "rel_k", "c2p", "p2c"), Role.position),  # DeBERTa's disentangled terms
    "sinks": Role.sink,
    "kv_cache": Role.kv_cache,
    "act": Role.activation,
    "combine": Role.combine,
    "residual": Role.residual,
    **dict.fromkeys(("dropout", "rel_dropout"), Role.dropout),
}


def layer_role(leaf: str) -> Role:
    """The role of a leaf of a layer (a sub-block's leaves, its norm, dropout, residual)."""
    try:
        return _LAYER_ROLES[leaf]
    except KeyError:
        raise KeyError(f"a layer leaf with no role: {leaf!r} (give it one in components/key.py)") from None


@dataclass(frozen=True)
class Key:
    """One component of the tree, structured.

    `stack`: ``layers`` (a decoder-only model), ``encoder`` or ``decoder``; None for the model's
    own (embedding, head, loss). `layer`: a leaf of every layer of its group (its cost is per
    layer times the group's count), else the stack's own (final norm, position bias). `group`:
    the layer group where a stack has several (``local``, ``dense``, ``moe``, ``local_moe``).
    `block`: the sub-block (``attention``, ``cross_attention``, ``ffn``; ``embedding`` and
    ``loss`` at the top). `part`: within the FFN, ``experts`` (the routed ones) or ``shared``.
    """

    leaf: str
    role: Role
    stack: str | None = None
    layer: bool = False
    group: str | None = None
    block: str | None = None
    part: str | None = None

    @property
    def path(self) -> str:
        """The component's path: its display name and JSON key."""
        return "/".join((*self._where(), *(p for p in (self.block, self.part) if p is not None), self.leaf))

    @property
    def block_path(self) -> str:
        """The path of the layer sub-block it sits in (``layers[local]/attention``, the experts'
        too), or its own path where it sits in none (``layers/norm``, ``final_norm``)."""
        if self.layer and self.block is not None:
            return "/".join((*self._where(), self.block))
        return self.path

    def _where(self) -> list[str]:
        parts = [self.stack] if self.stack in ("encoder", "decoder") else []
        if self.layer:
            parts.append("layers" + (f"[{self.group}]" if self.group is not None else ""))
        return parts

    def __str__(self) -> str:
        return self.path

    @property
    def sub_block(self) -> SubBlock:
        """What the leaf sits in (its path less the leaf): its siblings share it."""
        return (self.stack, self.layer, self.group, self.block, self.part)

    @property
    def in_attention(self) -> bool:
        """A leaf of an attention sub-block (self or cross), its norm and residual included."""
        return self.block in ATTENTION_BLOCKS

    @property
    def attention_core(self) -> bool:
        return self.role is Role.attention_core

    @property
    def routed_expert(self) -> bool:
        """A leaf of a sparse FFN's routed experts (it holds all E experts' weights)."""
        return self.part == "experts"

    @property
    def is_lm_head(self) -> bool:
        """The LM head's weight (weight-only int8/int4 leaves it at the activations' width)."""
        return self.leaf == "lm_head" and self.stack is None

    @property
    def is_router(self) -> bool:
        """A mixture of experts' router (ModelOpt's fp8 leaves it unquantised, ``costmodel.precision``)."""
        return self.leaf == "router"

    @property
    def first_stage(self) -> bool:
        """Before the layers: the embedding (a pipeline's first stage holds it)."""
        return self.stack is None and self.block == "embedding"

    @classmethod
    def total(cls, name: str) -> Key:
        """The key of a sum of components (``analysis.sum_rows``): its name is its path."""
        return cls(name, Role.total)


#: The token embedding table's lookup (every stack's: an encoder-decoder's share one table).
TOKEN_TABLE = Key("tokens", Role.embedding, block="embedding")
