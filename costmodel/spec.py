"""Typed, frozen architecture specs: loaded and validated once, at the edge.

A spec is one YAML file (see docs/spec-format.md). Every default is written in this module
and nowhere else: a field left out of a file takes the default declared on its field below,
and the few defaults derived from other fields (``n_kv_heads``, ``head_dim``, bias on
LayerNorm, ``layer_pattern``) are filled in ``Spec._derive_defaults``.

Errors are one line each, naming the file, the field and the problem (``SpecError``); the CLI
prints that line and exits with code 2.

Long because: every field, default and cross-field check of a spec is declared here and nowhere
else (the sub-models, ``Spec``, ``CHECKS``), and the reading of a mapping or YAML text into one
(``parse_spec``, ``spec_from_dict``) turns pydantic's problems into those one-line errors by
walking the same models.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from enum import Enum
from fractions import Fraction
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from costmodel.errors import SpecError as SpecError  # re-exported: where callers have found it
from costmodel.loading import LoadError, load_yaml, yaml_error


class Architecture(str, Enum):
    decoder = "decoder"
    encoder_decoder = "encoder-decoder"
    encoder = "encoder"  # encoder-only (BERT): bidirectional attention, no KV cache, no decode


class Head(str, Enum):
    """What an encoder-only model ends in (``components.heads``): transformers' ``AutoModel``
    holds ``none`` (ModernBERT, DeBERTa) or BERT's ``pooler``; the task heads are options."""

    none = "none"  # the last hidden state
    pooler = "pooler"  # BertPooler: dense + tanh over [CLS] (``pooler_activation``, ``pooler_norm``)
    mlm = "mlm"  # BertForMaskedLM: transform (dense, GELU, norm) + the tied decoder over every token
    classification = "classification"  # the pooler, then a classifier over n_labels


class PoolerActivation(str, Enum):
    """What the pooler's dense layer is followed by: BertPooler's and RobertaClassificationHead's
    tanh; DeBERTa-v2's ContextPooler runs ``pooler_hidden_act`` and ModernBertPredictionHead
    ``classifier_activation``, both GELU by default (exact, erf)."""

    tanh = "tanh"
    gelu = "gelu"


class Norm(str, Enum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class NormPosition(str, Enum):
    pre = "pre"  # x + F(norm(x)); a final norm after the last layer
    post = "post"  # norm(x + F(x)), the original Transformer; no final norm
    sandwich = "sandwich"  # x + norm(F(norm(x))), Gemma 2/3 ("double" norm)
    post_sublayer = "post_sublayer"  # x + norm(F(x)), OLMo 2's reordered norm


class Activation(str, Enum):
    relu = "relu"
    gelu = "gelu"
    reglu = "reglu"
    geglu = "geglu"
    swiglu = "swiglu"

    @property
    def gated(self) -> bool:
        """GLU variants (Shazeer 2020, "GLU Variants Improve Transformer") use three matrices."""
        return self in (Activation.reglu, Activation.geglu, Activation.swiglu)


class Block(str, Enum):
    serial = "serial"  # attention, then FFN on its output
    parallel = "parallel"  # GPT-J, PaLM: both read the same input, outputs summed


class Position(str, Enum):
    sinusoidal = "sinusoidal"
    learned = "learned"
    rope = "rope"
    t5_relative = "t5_relative"
    alibi = "alibi"
    disentangled = "disentangled"  # DeBERTa's relative positions, through each layer's q and k
    none = "none"

    @property
    def per_layer(self) -> bool:
        """Schemes applied inside every attention layer rather than added to the input."""
        return self in (Position.rope, Position.t5_relative, Position.alibi, Position.disentangled)


class QKNorm(str, Enum):
    none = "none"
    head = "head"  # one norm of width d_h shared by all heads (Gemma 3, Qwen 3)
    full = "full"  # one norm over the whole projection, h*d_h and k*d_h wide (OLMo 2)


class LayerKind(str, Enum):
    local = "local"  # sliding-window attention over the last `window` tokens
    global_ = "global"  # full (causal) attention
    chunked = "chunked"  # chunked local attention within chunks of `attention_chunk` (Llama 4)


PositiveInt = Annotated[StrictInt, Field(gt=0)]
# Floats are as strict as ints: a bool or a numeric string is refused, and so are inf and nan
# (which would reach JSON as Infinity, which is not JSON). An int is a float, as in YAML.
FiniteFloat = Annotated[StrictFloat, AllowInfNan(False)]
PositiveFloat = Annotated[FiniteFloat, Field(gt=0)]
Rate = Annotated[FiniteFloat, Field(ge=0, lt=1)]  # a dropout probability
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]


class Bias(BaseModel):
    """Which parts carry an additive bias (nn.Linear(bias=...), LayerNorm's beta)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    qkv: StrictBool = False
    attn_out: StrictBool = False
    ffn: StrictBool = False
    norm: StrictBool | None = None  # None: LayerNorm has a bias, RMSNorm has none
    lm_head: StrictBool = False
    # An encoder head's dense layers (the pooler's, the masked-LM transform's; ModernBERT's
    # classifier_bias); None: the FFN's (BERT, RoBERTa and DeBERTa bias both).
    head: StrictBool | None = None


class ActiveConvention(str, Enum):
    """What 'active parameters' includes."""

    with_embedding = "with_embedding"  # Mixtral, OLMoE: every parameter but the skipped experts
    without_embedding = "without_embedding"  # DeepSeek-V3, gpt-oss: less the input token table


class Published(BaseModel):
    """The parameter count a source publishes, and how closely ours must match it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    params: str | PositiveInt  # as the source prints it: "175.0B", "124M", or an exact integer
    source: str
    tolerance: Rate | None = None  # relative; None: the rounding
    note: str | None = None  # why a tolerance wider than the rounding is needed
    exact: PositiveInt | None = None  # count of the released implementation, tensor for tensor
    exact_source: str | None = None
    # Mixture of experts: the active parameters per token as published, in the publisher's
    # convention, and how closely ours must match (None: the rounding).
    active: str | StrictInt | None = None
    active_convention: ActiveConvention | None = None
    active_tolerance: Annotated[FiniteFloat, Field(ge=0, lt=1)] | None = None

    @model_validator(mode="after")
    def _active_together(self) -> Published:
        if (self.active is None) != (self.active_convention is None):
            raise ValueError("active_convention: give it with active, and only with active")
        if isinstance(self.active, str):
            parse_count(self.active)
        return self

    @field_validator("params")
    @classmethod
    def _readable(cls, v: str | int) -> str | int:
        if isinstance(v, str):
            parse_count(v)
        return v

    @property
    def value(self) -> float:
        return parse_count(self.params)[0]

    @property
    def allowed_error(self) -> float:
        """Absolute difference allowed: the stated tolerance, or half a unit of the last digit."""
        if self.tolerance is not None:
            return self.tolerance * self.value
        return parse_count(self.params)[1]


# --- kinds: the variants of an element, each a typed sub-model tagged by `kind` ---------------
# A new kind is one sub-model here, added to its union, plus its cost module registered in
# costmodel.components (docs/architecture.md, "Adding a kind").


class DenseFFN(BaseModel):
    """The FFN of every layer: two matrices around an activation, or three for a GLU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["dense"] = "dense"
    activation: Activation
    d_ff: PositiveInt


class MHA(BaseModel):
    """Multi-head attention with k key/value heads: MHA (k = h), GQA, MQA (k = 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["mha"] = "mha"
    n_kv_heads: PositiveInt  # default: n_heads (MHA)
    head_dim: PositiveInt  # default: d_model / n_heads


class MLA(BaseModel):
    """Multi-head latent attention (DeepSeek-V2, 2024), in DeepSeek's config names; the cost is
    ``components.mla``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["mla"] = "mla"
    q_lora_rank: PositiveInt | None = None  # r_q; null: queries projected directly from d_model
    kv_lora_rank: PositiveInt  # r_kv
    qk_nope_head_dim: PositiveInt  # d_n
    qk_rope_head_dim: PositiveInt  # d_r
    v_head_dim: PositiveInt  # d_v

    @field_validator("qk_rope_head_dim")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even: RoPE rotates pairs of dimensions")
        return v

    @property
    def cache_width(self) -> int:
        """Elements cached per token per layer: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def check_in(self, spec: Spec) -> None:
        """What latent attention asks of the rest of the spec."""
        if spec.architecture is Architecture.encoder_decoder:
            raise ValueError("attention: latent attention is supported for decoder-only models")
        if spec.position is not Position.rope:
            raise ValueError(
                f"attention: latent attention carries positions in its decoupled RoPE "
                f"dimensions; position must be rope (got {spec.position.value})"
            )
        if spec.rotary_fraction != 1.0:
            raise ValueError("rotary_fraction: latent attention rotates qk_rope_head_dim, all of it")
        if spec.qk_norm is not QKNorm.none:
            raise ValueError("qk_norm: latent attention normalises its latents, not q and k")


class Scoring(str, Enum):
    """How router logits become gate weights."""

    softmax = "softmax"  # Shazeer 2017, Switch, Mixtral, Qwen-MoE, OLMoE, DeepSeek-V2
    sigmoid = "sigmoid"  # DeepSeek-V3, Llama 4: each expert scored on its own


class MoEFFN(BaseModel):
    """``ffn: {kind: moe, ...}`` (docs/moe.md, "Fields"): a sparse FFN and the layers it replaces."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["moe"] = "moe"
    activation: Activation  # of routed experts, shared experts and dense layers alike
    n_experts: PositiveInt  # E routed experts
    top_k: PositiveInt  # K experts per token
    d_ff_expert: PositiveInt  # f_e, each routed expert's hidden width
    n_shared_experts: NonNegativeInt = 0  # n_s experts every token passes through (DeepSeekMoE)
    d_ff_shared: PositiveInt | None = None  # f_s of each shared expert; default f_e
    shared_expert_gate: StrictBool = False  # sigmoid(x w) scales the shared output (Qwen2-MoE)
    d_ff: PositiveInt | None = None  # width of the dense FFN in the layers that are not sparse
    first_k_dense: NonNegativeInt = 0  # leading dense layers (DeepSeek's first_k_dense_replace)
    moe_every: PositiveInt = 1  # after them, layer i is sparse when (i - first_k_dense + 1) % n == 0
    moe_layers: tuple[NonNegativeInt, ...] | None = None  # or the sparse layers listed (0-based)
    router_bias: StrictBool = False  # a bias on the router logits (gpt-oss)
    expert_bias: StrictBool = False  # a bias on every routed expert's linears (gpt-oss)
    router_dtype: Literal["fp32", "bf16", "fp16"] | None = None  # None: the model's dtype
    scoring: Scoring = Scoring.softmax
    norm_topk: StrictBool = False  # the K chosen weights renormalised to sum to 1
    capacity_factor: PositiveFloat | None = None  # None: dropless
    aux_loss: Annotated[FiniteFloat, Field(ge=0)] = 0.0  # coefficient; > 0 adds Switch's balance loss

    @model_validator(mode="after")
    def _consistent(self) -> MoEFFN:
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k: {self.top_k} experts per token, but only {self.n_experts}")
        if self.n_shared_experts == 0:
            for name in ("d_ff_shared", "shared_expert_gate"):
                if name in self.model_fields_set:
                    raise ValueError(f"{name}: only with n_shared_experts > 0")
        if self.moe_layers is not None:
            for name in ("first_k_dense", "moe_every"):
                if name in self.model_fields_set:
                    raise ValueError(f"{name}: give either moe_layers or {name}, not both")
            if not self.moe_layers:
                raise ValueError("moe_layers: must list at least one layer")
            if len(set(self.moe_layers)) != len(self.moe_layers):
                raise ValueError("moe_layers: a layer is listed twice")
        return self

    @property
    def gated(self) -> bool:
        return self.activation.gated

    @property
    def shared_width(self) -> int:
        """n_s * f_s: the shared experts as one MLP (0 without shared experts)."""
        return self.n_shared_experts * (self.d_ff_shared or self.d_ff_expert)

    def sparse_layers(self, n_layers: int) -> tuple[bool, ...]:
        """For each of `n_layers` layers, whether its FFN is the sparse one."""
        if self.moe_layers is not None:
            chosen = set(self.moe_layers)
            return tuple(i in chosen for i in range(n_layers))
        k, n = self.first_k_dense, self.moe_every
        return tuple(i >= k and (i - k + 1) % n == 0 for i in range(n_layers))

    def sparse_count(self, n_layers: int) -> int:
        """How many of `n_layers` layers are sparse, counted, not listed (a billion layers is fine)."""
        if self.moe_layers is not None:
            return sum(1 for i in set(self.moe_layers) if i < n_layers)
        return max(0, (n_layers - self.first_k_dense) // self.moe_every)

    def check_layers(self, n_layers: int) -> None:
        """The cross-field checks that need the layer count; ValueError naming the field."""
        if self.moe_layers is not None and max(self.moe_layers) >= n_layers:
            raise ValueError(f"moe_layers: layer {max(self.moe_layers)} of a {n_layers}-layer model")
        n_sparse = self.sparse_count(n_layers)
        if not n_sparse:
            raise ValueError(f"first_k_dense: no sparse layer among the {n_layers}")
        if n_sparse < n_layers and self.d_ff is None:
            raise ValueError(f"d_ff: required, since {n_layers - n_sparse} layers are dense")
        if n_sparse == n_layers and self.d_ff is not None:
            raise ValueError("d_ff: every layer is sparse, so no dense FFN uses it")

    def check_in(self, spec: Spec) -> None:
        """What a mixture of experts asks of the rest of the spec, its layers included."""
        if spec.architecture is Architecture.encoder_decoder:
            raise ValueError("ffn: a mixture of experts is supported in decoder-only models")
        if spec.ffn_dropout > 0:
            raise ValueError("ffn_dropout: not supported with a mixture of experts")
        try:
            self.check_layers(spec.decoder_layers)
        except ValueError as e:
            raise ValueError(f"ffn.{e}") from None


FFN = Annotated[Union[DenseFFN, MoEFFN], Field(discriminator="kind")]
Attention = Annotated[Union[MHA, MLA], Field(discriminator="kind")]

#: Old flat fields, still accepted (and written by bundled specs): shorthand -> its union field.
#: They apply to the default kind of that union (dense, mha).
SHORTHANDS: dict[str, str] = {
    "activation": "ffn", "d_ff": "ffn", "n_kv_heads": "attention", "head_dim": "attention",
}
_DEFAULT_KIND = {"ffn": "dense", "attention": "mha"}

#: Fields that describe a spec but change no cost: never an architectural change.
METADATA: tuple[str, ...] = ("name", "family", "year", "description", "source", "published", "ignored_fields")


_COUNT = re.compile(r"^\s*(\d+(?:\.(\d+))?)\s*([KMBT]?)\s*$")
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_count(text: str | int) -> tuple[float, float]:
    """``"6.74B"`` -> (6.74e9, 0.005e9): the value and half a unit of its last printed digit."""
    if isinstance(text, int):
        return float(text), 0.5
    m = _COUNT.match(text) if len(text) < 40 else None
    if not m or not float(m.group(1)):
        raise ValueError(f"published count {text[:40]!r} should look like 6.74B, 124M or 124439808")
    decimals = len(m.group(2) or "")
    scale = _SCALE[m.group(3)]
    return float(m.group(1)) * scale, 0.5 * scale / 10**decimals


class Spec(BaseModel):
    """One transformer architecture, in the names its papers use."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    name: str
    family: str | None = None
    year: StrictInt | None = None
    description: str | None = None
    source: str | dict[str, str] | None = None  # where the numbers come from
    published: Published | None = None
    ignored_fields: tuple[str, ...] = ()  # Hugging Face config fields skipped on import (costmodel.hf)

    architecture: Architecture = Architecture.decoder
    d_model: PositiveInt
    n_layers: PositiveInt | None = None  # decoder-only and encoder-only
    n_encoder_layers: PositiveInt | None = None  # encoder-decoder
    n_decoder_layers: PositiveInt | None = None
    n_heads: PositiveInt
    attention: Attention  # shorthand: n_kv_heads, head_dim (kind mha)
    ffn: FFN  # shorthand: activation, d_ff (kind dense)
    vocab_size: PositiveInt
    max_seq_len: PositiveInt

    norm: Norm
    norm_position: NormPosition = NormPosition.pre
    block: Block = Block.serial
    shared_norm: StrictBool = True  # parallel block: one norm feeds attention and FFN
    bias: Bias = Bias()

    position: Position
    rotary_fraction: Annotated[FiniteFloat, Field(gt=0, le=1)] = 1.0  # RoPE on this share of d_h
    relative_buckets: PositiveInt = 32  # T5 relative attention buckets
    position_offset: Annotated[StrictInt, Field(ge=0)] = 0  # learned table rows past max_seq_len (OPT: 2)
    # DeBERTa (He et al. 2021): relative distances in position_buckets log buckets (0: none,
    # distances clipped at max_relative_positions, default max_seq_len); a 2k x d table, k either.
    position_buckets: NonNegativeInt = 0
    max_relative_positions: PositiveInt | None = None
    token_types: NonNegativeInt = 0  # BERT's segment (token type) embeddings: rows of their table
    embedding_norm: StrictBool = False  # a norm over the summed embeddings (BERT, RoBERTa, DeBERTa)
    tied_embeddings: StrictBool = False
    embedding_scale: StrictBool = False  # token embeddings multiplied by sqrt(d_model)
    head_scale: StrictBool = False  # last hidden state * d_model^-1/2 before the LM head (T5, tied)
    logit_scale: PositiveFloat | None = None  # output logits multiplied by a constant (Cohere)

    qk_norm: QKNorm = QKNorm.none
    attn_softcap: PositiveFloat | None = None
    final_softcap: PositiveFloat | None = None
    z_loss: Annotated[FiniteFloat, Field(ge=0)] = 0.0  # coefficient; > 0 adds the z-loss to training
    dropout: Rate = 0.0  # > 0 adds dropout to training
    # Where a model drops out embeddings or attention probabilities at another rate (or not at
    # all); None: at `dropout`, as GPT-2 and the original Transformer do.
    embedding_dropout: Rate | None = None
    attention_dropout: Rate | None = None
    # Sites only some models drop out (T5 both, OPT's activation_dropout the first).
    ffn_dropout: Rate = 0.0  # on the FFN hidden activations
    final_dropout: Rate = 0.0  # on each stack's final-norm output

    window: PositiveInt | None = None  # sliding-window length w of local layers
    attention_chunk: PositiveInt | None = None  # chunk c of chunked layers (Llama 4: 8192)
    layer_pattern: tuple[LayerKind, ...]  # repeated over the layers; default all local or global
    global_nope: StrictBool = False  # global layers carry no positions (NoPE)
    attention_sinks: StrictBool = False  # one learned softmax logit per head per layer (gpt-oss)
    head: Head = Head.none  # encoder-only: what follows the last layer (components.heads)
    n_labels: PositiveInt = 2  # head: classification: the classifier's outputs (num_labels)
    # The pooler over [CLS] (head: pooler and classification; imported whatever head is counted):
    # its activation, and a norm after it (ModernBertPredictionHead: dense, act, LayerNorm).
    pooler_activation: PoolerActivation = PoolerActivation.tanh
    pooler_norm: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _derive_defaults(cls, data: Any) -> Any:
        """The defaults that depend on other fields; everything else defaults on its field."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for union, kind in _DEFAULT_KIND.items():
            flat = {k: data.pop(k) for k in [k for k, u in SHORTHANDS.items() if u == union] if k in data}
            if flat and union in data:
                raise ValueError(f"{next(iter(flat))}: give {union} or its shorthand fields, not both")
            if union not in data:
                data[union] = {"kind": kind, **flat}
        att = data["attention"]
        heads, width = data.get("n_heads"), data.get("d_model")
        if isinstance(att, dict) and att.get("kind", "mha") == "mha":
            att = data["attention"] = dict(att)
            if "n_kv_heads" not in att and heads is not None:
                att["n_kv_heads"] = heads
            if "head_dim" not in att and _ints(heads, width) and heads > 0 and width > 0:
                if width % heads:
                    raise ValueError(
                        f"head_dim: required, since d_model ({width}) is not divisible by "
                        f"n_heads ({heads})"
                    )
                att["head_dim"] = width // heads
        if "layer_pattern" not in data:
            data["layer_pattern"] = ["local" if data.get("window") is not None else "global"]
        return data

    @field_validator("bias", mode="before")
    @classmethod
    def _bias_shorthand(cls, v: Any) -> Any:
        """``bias: true|false`` sets every linear layer; norms keep their default."""
        if isinstance(v, bool):
            return {part: v for part in ("qkv", "attn_out", "ffn", "lm_head")}
        return v

    @field_validator("layer_pattern", mode="before")
    @classmethod
    def _pattern_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError("should be a list such as [local, local, local, global]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        """The cross-field checks, one per element (``CHECKS``, named as ``components`` names the
        elements), in this order: the first that fails is the error."""
        for check in CHECKS:
            check(self)
        return self

    # Derived views: computed from the fields, never stored twice.

    # The old flat names (``SHORTHANDS``), read-only (docs/spec-format.md, "Fields").
    @property
    def d_ff(self) -> int:
        """The FFN width; of a mixture of experts, its dense layers' width when it has dense
        layers, else each routed expert's (new code reads ``spec.ffn``)."""
        if isinstance(self.ffn, MoEFFN):
            return self.ffn.d_ff or self.ffn.d_ff_expert
        return self.ffn.d_ff

    @property
    def moe(self) -> MoEFFN | None:
        """The sparse FFN, if the spec has one."""
        return self.ffn if isinstance(self.ffn, MoEFFN) else None

    def layer_group_counts(self) -> dict[tuple[LayerKind, bool], int]:
        """(attention kind, sparse FFN?) -> decoder layers, counted arithmetically from the
        pattern and the sparse-layer rule: no list of n_layers entries is ever built."""
        counts: dict[tuple[LayerKind, bool], int] = {
            (kind, False): c for kind, c in self.kind_counts().items()}
        moe, pattern, n_layers = self.moe, self.layer_pattern, self.decoder_layers
        if moe is None:
            return counts
        P = len(pattern)
        sparse_by_slot = [0] * P  # sparse layers at each pattern position
        if moe.moe_layers is not None:
            for i in set(moe.moe_layers):
                if i < n_layers:
                    sparse_by_slot[i % P] += 1
        else:
            # Sparse layers are i = k - 1 + n*j for j = 1 .. J; j mod P fixes i mod P.
            k, n = moe.first_k_dense, moe.moe_every
            J = max(0, (n_layers - k) // n)
            for t in range(P):
                j0 = t if t else P  # the smallest j >= 1 with j = t (mod P)
                if j0 <= J:
                    sparse_by_slot[(k - 1 + n * j0) % P] += (J - j0) // P + 1
        for slot, c in enumerate(sparse_by_slot):
            if c:
                kind = pattern[slot]
                counts[(kind, False)] -= c
                counts[(kind, True)] = counts.get((kind, True), 0) + c
        return {key: c for key, c in counts.items() if c}

    def sparse_layers(self) -> tuple[bool, ...]:
        """For each decoder layer, whether its FFN is the sparse one (all False: a dense FFN)."""
        moe = self.moe
        return moe.sparse_layers(self.decoder_layers) if moe else (False,) * self.decoder_layers

    @property
    def activation(self) -> Activation:
        return self.ffn.activation

    @property
    def n_kv_heads(self) -> int:
        """Latent attention: h, the heads its latent expands into (transformers'
        num_key_value_heads); its cache is not per head (``MLA.cache_width``)."""
        if isinstance(self.attention, MLA):
            return self.n_heads
        return self.attention.n_kv_heads

    @property
    def head_dim(self) -> int:
        """Latent attention: the query/key width of a head, qk_nope_head_dim + qk_rope_head_dim."""
        if isinstance(self.attention, MLA):
            return self.attention.qk_nope_head_dim + self.attention.qk_rope_head_dim
        return self.attention.head_dim

    @property
    def mla(self) -> MLA | None:
        """The latent attention's fields, or None for multi-head attention."""
        return self.attention if isinstance(self.attention, MLA) else None

    @property
    def is_encoder_decoder(self) -> bool:
        return self.architecture is Architecture.encoder_decoder

    @property
    def is_encoder(self) -> bool:
        """Encoder-only (BERT): one bidirectional stack, no KV cache, no decode phase."""
        return self.architecture is Architecture.encoder

    @property
    def relative_span(self) -> int:
        """DeBERTa's k: the relative table has 2k rows, each layer projects them all."""
        return self.position_buckets or self.max_relative_positions or self.max_seq_len

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers if self.is_encoder_decoder else self.n_layers  # type: ignore[return-value]

    @property
    def tied_head(self) -> bool:
        """The token table is also an LM head's weight: ``tied_embeddings`` with an LM head (a
        decoder's, or an encoder's with head: mlm; an encoder's other heads have none)."""
        return self.tied_embeddings and (not self.is_encoder or self.head is Head.mlm)

    @property
    def head_bias(self) -> bool:
        """Whether an encoder head's dense layers carry a bias (``Bias.head``, or the FFN's)."""
        return self.bias.ffn if self.bias.head is None else self.bias.head

    @property
    def norm_bias(self) -> bool:
        return self.norm is Norm.layernorm if self.bias.norm is None else self.bias.norm

    @property
    def position_rows(self) -> int:
        """Rows of a learned position table: the trained context plus any reserved offset."""
        return self.max_seq_len + self.position_offset

    @property
    def embedding_dropout_rate(self) -> float:
        return self.dropout if self.embedding_dropout is None else self.embedding_dropout

    @property
    def attention_dropout_rate(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def rotary_dims(self) -> int:
        """Exact at any head_dim (float arithmetic loses whole dimensions past 2^53); latent
        attention rotates its qk_rope_head_dim."""
        if isinstance(self.attention, MLA):
            return self.attention.qk_rope_head_dim
        return int(_exact(self.rotary_fraction) * self.head_dim)

    @property
    def final_norm(self) -> bool:
        """Post-norm stacks end on a norm already; every other position adds a final one."""
        return self.norm_position is not NormPosition.post

    def layer_kinds(self) -> list[LayerKind]:
        """The kind of each decoder layer: the pattern repeated, cut at the last layer."""
        n = len(self.layer_pattern)
        return [self.layer_pattern[i % n] for i in range(self.decoder_layers)]

    def kind_counts(self) -> dict[LayerKind, int]:
        """Layers of each kind, counted from the pattern: no list of n_layers entries."""
        n, pattern = self.decoder_layers, self.layer_pattern
        full, rest = divmod(n, len(pattern))
        counts = {
            kind: full * pattern.count(kind) + pattern[:rest].count(kind) for kind in LayerKind
        }
        return {kind: c for kind, c in counts.items() if c}



# --- cross-field checks, one per element ----------------------------------------------------------
# Each raises ValueError naming the field (pydantic adds the file); ``Spec._consistent`` runs
# them in ``CHECKS``'s order. The sub-models check what they ask of the spec (``MLA.check_in``,
# ``MoEFFN.check_in``); their own fields are checked on the sub-model.


def _architecture(spec: Spec) -> None:
    """architecture: the layer counts each architecture gives."""
    if spec.architecture is Architecture.encoder_decoder:
        if spec.n_layers is not None:
            raise ValueError(
                "n_layers: an encoder-decoder gives n_encoder_layers and n_decoder_layers"
            )
        for field in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(spec, field) is None:
                raise ValueError(f"{field}: required for an encoder-decoder")
        if spec.window is not None:
            raise ValueError("window: sliding windows are supported for decoder-only and encoder-only models")
        for field in ("token_types", "embedding_norm"):
            if getattr(spec, field):
                raise ValueError(f"{field}: not modelled for an encoder-decoder (one table, two stacks)")
    else:
        if spec.n_layers is None:
            raise ValueError("n_layers: field required")
        for field in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(spec, field) is not None:
                raise ValueError(f"{field}: only for architecture: encoder-decoder")


def _encoder_only(spec: Spec) -> None:
    """What an encoder-only model is (its head) and what only it has (a head, DeBERTa's positions)."""
    if not spec.is_encoder:
        for field in ("head", "n_labels", "pooler_activation", "pooler_norm"):
            if field in spec.model_fields_set:
                raise ValueError(f"{field}: only for architecture: encoder (a decoder ends in its LM head)")
        if spec.bias.head is not None:
            raise ValueError("bias.head: only for architecture: encoder (an encoder head's dense layers)")
        if spec.position is Position.disentangled:
            raise ValueError("position: disentangled attention is supported for encoder-only models")
        return
    if "n_labels" in spec.model_fields_set and spec.head is not Head.classification:
        raise ValueError("n_labels: only for head: classification")
    if spec.position is Position.disentangled and spec.n_kv_heads != spec.n_heads:
        raise ValueError("n_kv_heads: disentangled attention projects its table through k for every "
                         "head (multi-head attention, k = h)")
    refused = {"attention_chunk": "chunked attention", "attention_sinks": "attention sinks",
               "final_softcap": "a logit soft-cap", "z_loss": "the z-loss", "head_scale": "a head scale",
               "logit_scale": "a logit scale"}
    for field, what in refused.items():
        if getattr(spec, field) not in (None, False, 0, 0.0):
            raise ValueError(f"{field}: {what} is not modelled in an encoder-only model")
    if spec.mla is not None or spec.moe is not None:
        raise ValueError(f"{'attention' if spec.mla else 'ffn'}: an encoder-only model has multi-head "
                         "attention and a dense FFN here")


def _attention_heads(spec: Spec) -> None:
    if spec.n_kv_heads > spec.n_heads or spec.n_heads % spec.n_kv_heads:
        raise ValueError(
            f"n_kv_heads: n_heads ({spec.n_heads}) must be a multiple of "
            f"n_kv_heads ({spec.n_kv_heads})"
        )


def _positions(spec: Spec) -> None:
    if spec.position is Position.rope and not isinstance(spec.attention, MLA):
        rotary = _exact(spec.rotary_fraction) * spec.head_dim
        if rotary.denominator != 1 or rotary.numerator % 2:
            raise ValueError(
                f"rotary_fraction: {spec.rotary_fraction} of head_dim {spec.head_dim} is "
                f"{float(rotary):g} dimensions; RoPE rotates an even whole number of them"
            )
    elif spec.rotary_fraction != 1.0:
        raise ValueError("rotary_fraction: only for position: rope")
    if spec.position is not Position.t5_relative and "relative_buckets" in spec.model_fields_set:
        raise ValueError("relative_buckets: only for position: t5_relative")
    if spec.position is not Position.learned and spec.position_offset:
        raise ValueError("position_offset: only for position: learned")
    if spec.position is not Position.disentangled:
        for field in ("position_buckets", "max_relative_positions"):
            if field in spec.model_fields_set:
                raise ValueError(f"{field}: only for position: disentangled")


def _norm(spec: Spec) -> None:
    if spec.norm is Norm.rmsnorm and spec.bias.norm:
        raise ValueError("bias.norm: RMSNorm has no bias")


def _block_layout(spec: Spec) -> None:
    if spec.block is Block.serial and "shared_norm" in spec.model_fields_set:
        raise ValueError("shared_norm: only for block: parallel")


def _layer_kinds(spec: Spec) -> None:
    """The sliding window and chunked attention: the layer kinds and the sizes they need."""
    kinds = set(spec.layer_pattern)
    if not kinds:
        raise ValueError("layer_pattern: must name at least one layer kind")
    if LayerKind.local in kinds and spec.window is None:
        raise ValueError("window: required, since layer_pattern has local layers")
    if spec.window is not None and LayerKind.local not in kinds:
        raise ValueError("layer_pattern: a window is given but no layer is local")
    if LayerKind.chunked in kinds and spec.attention_chunk is None:
        raise ValueError("attention_chunk: required, since layer_pattern has chunked layers")
    if spec.attention_chunk is not None and LayerKind.chunked not in kinds:
        raise ValueError("layer_pattern: an attention_chunk is given but no layer is chunked")
    if spec.attention_chunk is not None and spec.architecture is not Architecture.decoder:
        raise ValueError("attention_chunk: chunked attention is supported for decoder-only models")


def _latent_attention(spec: Spec) -> None:
    if isinstance(spec.attention, MLA):
        spec.attention.check_in(spec)


def _layer_pattern(spec: Spec) -> None:
    """global_nope, and the pattern against the layers."""
    kinds = set(spec.layer_pattern)
    if spec.global_nope:
        if LayerKind.global_ not in kinds:
            raise ValueError("global_nope: layer_pattern has no global layer")
        if LayerKind.local not in kinds and LayerKind.chunked not in kinds:
            raise ValueError(
                "global_nope: every layer is global, so no layer would carry positions; "
                "write position: none instead"
            )
        if not spec.position.per_layer:
            raise ValueError(
                f"global_nope: position {spec.position.value} is added to the input, "
                "not per layer, so it cannot be dropped on global layers"
            )
    if len(spec.layer_pattern) > spec.decoder_layers:
        raise ValueError(
            f"layer_pattern: {len(spec.layer_pattern)} entries for "
            f"{spec.decoder_layers} layers"
        )


def _mixture_of_experts(spec: Spec) -> None:
    if isinstance(spec.ffn, MoEFFN):
        spec.ffn.check_in(spec)


#: ``Spec._consistent``'s checks, in the order they run (the first failure is the error).
CHECKS: tuple[Callable[[Spec], None], ...] = (
    _architecture, _encoder_only, _attention_heads, _positions, _norm, _block_layout, _layer_kinds,
    _latent_attention,
    _layer_pattern, _mixture_of_experts,
)

def _exact(x: float) -> Fraction:
    """A float as the decimal it was written as: 0.4 is 2/5, not 0.40000000000000002."""
    return Fraction(repr(float(x)))


#: Fields in the order a spec file writes them (docs/spec-format.md), the unions by their
#: shorthands where they sit in old files.
FIELD_ORDER: tuple[str, ...] = tuple(
    name for f in Spec.model_fields
    for name in {"attention": ("attention", "n_kv_heads", "head_dim"),
                 "ffn": ("ffn", "d_ff"), "block": ("activation", "block")}.get(f, (f,))
)


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


# --- parsing --------------------------------------------------------------------------------


def parse_spec(text: str, origin: str = "<spec>") -> Spec:
    """Validate a spec given as YAML text; ``origin`` names it in error messages."""
    try:
        data, root = load_yaml(text)
    except (yaml.YAMLError, LoadError) as e:
        raise SpecError(yaml_error(e, origin)) from None
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a spec is a YAML mapping of fields, got {type(data).__name__}")
    return spec_from_dict(data, origin, _key_lines(root))


def spec_from_dict(
    data: dict[str, Any], origin: str = "<spec>", lines: dict[str, int] | None = None
) -> Spec:
    """Validate a mapping of fields (as YAML would give it) into a Spec."""
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_problems(e, data, origin, lines or {})) from None
    except RecursionError:  # a mapping built in Python, nested past any sane depth
        raise SpecError(f"{origin}: nested too deep") from None


def _problems(err: ValidationError, data: dict[str, Any], origin: str, lines: dict[str, int]) -> str:
    """Every validation problem, one line each: `file:line: field: problem`. A derived field
    missing only because the field it derives from is bad is not a second problem."""
    problems = _merge_union_branches(err.errors())
    bad = {str(p["loc"][0]) for p in problems if p["loc"]}
    derived_from = {"head_dim": ("d_model", "n_heads"), "n_kv_heads": ("n_heads",)}

    def derived_only(p: Any) -> bool:
        # A shorthand's field sits in its union (attention.mha.head_dim): the user wrote neither.
        loc = [str(x) for x in p["loc"] if not isinstance(x, int)]
        if len(loc) == 3 and loc[0] in _DEFAULT_KIND and loc[0] not in data:
            loc = loc[2:]
        return len(loc) == 1 and loc[0] not in data and bool(bad.intersection(derived_from.get(loc[0], ())))

    problems = [p for p in problems if not derived_only(p)]
    return "\n".join(_one_line(p, data, origin, lines) for p in problems)


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "tuple"}


def _merge_union_branches(problems: list[Any]) -> list[Any]:
    """pydantic reports a union field once per branch (``params.str``, ``params.int``): keep
    one problem per field, the branch whose type the input had (not a type mismatch)."""
    by_field: dict[tuple[Any, ...], Any] = {}
    for p in problems:
        loc = tuple(p["loc"])
        while len(loc) > 1 and isinstance(loc[-1], str) and (
                loc[-1] in _TYPE_TAGS or "[" in loc[-1] or loc[-1].startswith(("constrained-", "function-"))):
            loc = loc[:-1]
        p = {**p, "loc": loc}
        seen = by_field.get(loc)
        if seen is None or (seen["type"].endswith("_type") and not p["type"].endswith("_type")):
            by_field[loc] = p
    return list(by_field.values())


def _one_line(problem: Any, data: dict[str, Any], origin: str, lines: dict[str, int]) -> str:
    """One validation problem as `file:line: field: problem`."""
    loc = [str(part) for part in problem["loc"] if not isinstance(part, int)]
    msg: str = problem["msg"]
    kind = problem["type"]
    if len(loc) >= 2 and loc[0] in _DEFAULT_KIND:
        if len(loc) >= 3:
            del loc[1]  # the union's tag: ffn.dense.d_ff -> ffn.d_ff
        elif msg.startswith("Value error, ") and ": " in msg:
            # a kind's own cross-field check names its field: ffn.moe + "top_k: ..." -> ffn.top_k
            sub, _, msg = msg[len("Value error, "):].partition(": ")
            loc = [loc[0], sub]
            kind = "value_error_named"
        if loc[0] not in data and loc[-1] in SHORTHANDS:
            loc = loc[1:]  # the user wrote the shorthand: d_ff
    if not loc and msg.startswith("Value error, ") and ": " in msg:
        # Our own cross-field checks name their field first: "n_kv_heads: ...".
        field, _, msg = msg[len("Value error, ") :].partition(": ")
        loc = [field]
    field = ".".join(loc) or "spec"
    if kind == "missing":
        msg = "field required"
    elif kind == "extra_forbidden":
        known = _known_fields(loc, data)
        guess = difflib.get_close_matches(loc[-1], known, n=1)
        msg = "unknown field" + (f" (did you mean {guess[0]}?)" if guess else "")
    elif kind == "union_tag_invalid":
        field = f"{field}.kind"
        expected = problem["ctx"]["expected_tags"].replace(chr(39), "")
        msg = f"unknown kind {problem['ctx']['tag']!r}; expected one of {expected}"
    elif kind == "enum":
        allowed = problem.get("ctx", {}).get("expected", "")
        allowed = allowed.replace("'", "").replace(" or ", ", ")
        msg = f"unknown value {_brief(problem['input'])}; expected one of {allowed}"
    else:
        msg = msg.removeprefix("Value error, ")
        if "input" in problem and kind not in ("model_type",) and not isinstance(problem["input"], dict):
            msg = f"{msg[0].lower()}{msg[1:]} (got {_brief(problem['input'])})"
    line = lines.get(field) or lines.get(loc[0] if loc else "")
    where = f"{origin}:{line}" if line else origin
    return f"{where}: {field[:80]}: {msg}"


def _brief(value: Any) -> str:
    """A short repr of a user's value (a long string or list would flood the line)."""
    text = repr(value) if not isinstance(value, (list,
                                                 tuple)) or len(value) < 20 else f"a list of {len(value)}"
    return text if len(text) <= 80 else text[:60] + "..."


def _known_fields(loc: list[str], data: dict[str, Any]) -> list[str]:
    model: type[BaseModel] = Spec
    for part in loc[:-1]:
        if part not in model.model_fields:
            return list(model.model_fields)
        ann = model.model_fields[part].annotation
        members = [a for a in _members(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not members:
            return list(model.model_fields)
        node = data.get(part) if isinstance(data, dict) else None
        kind = node.get("kind", _DEFAULT_KIND.get(part)) if isinstance(node, dict) else None
        # a union's member by the kind the user wrote (attention: {kind: mla, ...})
        model = next((m for m in members if "kind" in m.model_fields and m.model_fields["kind"].default
                      == kind),
                     members[0])
        data = node if isinstance(node, dict) else {}
    return list(model.model_fields) + (list(SHORTHANDS) if model is Spec else [])


def _members(ann: Any) -> tuple[Any, ...]:
    """The types of an annotation: a union's members (through Annotated), or itself."""
    args = getattr(ann, "__args__", (ann,))
    if getattr(ann, "__metadata__", None) is not None:  # Annotated[Union[...], Field(...)]
        return _members(args[0])
    return args


def _key_lines(root: yaml.Node | None) -> dict[str, int]:
    """Line number (1-based) of every mapping key, by dotted path, for error messages."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                path = f"{prefix}{key.value}"
                lines.setdefault(path, key.start_mark.line + 1)
                if len(lines) < 10_000:
                    walk(value, path + ".")

    if root is not None:
        walk(root, "")
    return lines
