"""The mixture-of-experts FFN: a router sends each token to top_k of E expert FFNs.

Shazeer et al. 2017, "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts
Layer": a gating network scores E experts per token and only the top k run, so parameters grow
with E while the work per token grows with k. Fedus et al. 2021, "Switch Transformers" (top-1
routing, the expert capacity C = capacity_factor * tokens * k / E with overflow tokens dropped,
and the auxiliary load-balancing loss alpha * E * sum_i f_i * P_i). Jiang et al. 2024, "Mixtral
of Experts" (8 SwiGLU experts, top-2, every layer sparse, dropless). Dai et al. 2024,
"DeepSeekMoE" (many fine-grained experts plus n_s shared experts every token passes through,
the first layers dense). Later variants the fields below cover: a bias on the router logits
and on every expert linear (gpt-oss), a router kept in fp32 (DeepSeek-V2/V3), a sigmoid
gate on the shared expert (Qwen2-MoE), sigmoid scoring (DeepSeek-V3, Llama 4), sparse layers
interleaved with dense ones (Llama 4 Maverick: every second layer).

Per sparse layer over T = B*S tokens (E experts of width f_e, K = top_k, n_s shared of f_s):

  router    T x d @ d x E                      2*T*d*E FLOPs, d*E params (+E bias)
  routing   score (softmax or sigmoid), top-k, renormalise: elementwise on T x E
  experts   dropless: T*K rows through (2 or 3) matrices of d x f_e; E*(2 or 3)*d*f_e params
            capacity c: every expert runs C = ceil(c*T*K/E) rows (padded, Switch/GShard)
  combine   each expert output times its gate weight, summed into the token: 2*T*K*d
  shared    a dense FFN of width n_s*f_s over all T tokens (DeepSeekMoE: the n_s shared
            experts are one wide MLP, as the released code builds them)
  aux_loss  training only: f_i (tokens sent to expert i) and P_i (mean router probability)

Bytes. Every routed expert that receives at least one token reads its weights once. With T
tokens routed uniformly at random (each picks K distinct experts), expert i receives none with
probability (1 - K/E)^T, so the expected number of experts read is

  E_read(T) = E * (1 - (1 - K/E)^T)                                           (uniform)

which is T*K for T*K << E and tends to E as T grows; the worst case (every token's experts
distinct from every other's) is min(E, T*K). In decode T = B: one token per sequence, so a
small batch reads ~B*K experts' weights for B*K expert-tokens of work, and the FFN's intensity
stays near a dense layer's at batch 1 until B*K approaches E; past that, every expert is read
and intensity grows with B at slope K/E of a dense layer's (``batch_curve``).

Active parameters (the parameters one token's forward pass touches): the total less the
(E - K) experts it skips in every sparse layer. Publishers differ on the input embedding:
Mixtral (12.9B) and OLMoE (1.3B) count the whole token table; DeepSeek-V3 (37B) and gpt-oss
(5.1B, 3.6B; its model card: "not counting the embedding, but counting the unembedding")
leave it out. ``ActiveConvention`` names both; results state which one they show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from costmodel.components.attention import SOFTMAX_FLOPS
from costmodel.components.ffn import ACTIVATION_FLOPS, GATE_FLOPS
from costmodel.cost import Cost, Num, elementwise, linear, runs, smin
from costmodel.spec import Activation
from costmodel.symbols import DTYPE_BYTES, ID_BYTES

PositiveInt = Annotated[StrictInt, Field(gt=0)]
Count = Annotated[StrictInt, Field(ge=0)]

SIGMOID_FLOPS = 3  # exp(-x), +1, divide
TOPK_FLOPS = 1  # one comparison per score, a single pass keeping the k largest
NORM_TOPK_FLOPS = 2  # per chosen weight: one add into the sum, one divide by it
COMBINE_FLOPS = 2  # per expert output element: times its gate weight, add into the token


class Scoring(str, Enum):
    """How router logits become gate weights."""

    softmax = "softmax"  # Shazeer 2017, Switch, Mixtral, Qwen-MoE, OLMoE, DeepSeek-V2
    sigmoid = "sigmoid"  # DeepSeek-V3, Llama 4: each expert scored on its own


class Routing(str, Enum):
    """Which experts a batch reads (a choice of the analysis, not of the architecture)."""

    uniform = "uniform"  # tokens pick experts uniformly at random: E*(1 - (1 - K/E)^T)
    worst = "worst"  # every token's experts distinct: min(E, T*K)


class ActiveConvention(str, Enum):
    """What 'active parameters' includes."""

    with_embedding = "with_embedding"  # Mixtral, OLMoE: every parameter but the skipped experts
    without_embedding = "without_embedding"  # DeepSeek-V3, gpt-oss: less the input token table


class MoE(BaseModel):
    """``ffn: {kind: moe, ...}`` (../notes/SCHEMA.md): a sparse FFN and the layers it replaces."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["moe"] = "moe"
    activation: Activation  # of routed experts, shared experts and dense layers alike
    n_experts: PositiveInt  # E routed experts
    top_k: PositiveInt  # K experts per token
    d_ff_expert: PositiveInt  # f_e, each routed expert's hidden width
    n_shared_experts: Count = 0  # n_s experts every token passes through (DeepSeekMoE)
    d_ff_shared: PositiveInt | None = None  # f_s of each shared expert; default f_e
    shared_expert_gate: StrictBool = False  # sigmoid(x w) scales the shared output (Qwen2-MoE)
    d_ff: PositiveInt | None = None  # width of the dense FFN in the layers that are not sparse
    first_k_dense: Count = 0  # leading dense layers (DeepSeek's first_k_dense_replace)
    moe_every: PositiveInt = 1  # after them, layer i is sparse when (i - first_k_dense + 1) % n == 0
    moe_layers: tuple[Count, ...] | None = None  # or the sparse layers listed (0-based)
    router_bias: StrictBool = False  # a bias on the router logits (gpt-oss)
    expert_bias: StrictBool = False  # a bias on every routed expert's linears (gpt-oss)
    router_dtype: Literal["fp32", "bf16", "fp16"] | None = None  # None: the model's dtype
    scoring: Scoring = Scoring.softmax
    norm_topk: StrictBool = False  # the K chosen weights renormalised to sum to 1
    capacity_factor: Annotated[float, Field(gt=0)] | None = None  # None: dropless
    aux_loss: Annotated[float, Field(ge=0)] = 0.0  # coefficient; > 0 adds Switch's balance loss

    @model_validator(mode="after")
    def _consistent(self) -> MoE:
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

    def check_layers(self, n_layers: int) -> None:
        """The cross-field checks that need the layer count; ValueError naming the field."""
        if self.moe_layers is not None and max(self.moe_layers) >= n_layers:
            raise ValueError(f"moe_layers: layer {max(self.moe_layers)} of a {n_layers}-layer model")
        sparse = self.sparse_layers(n_layers)
        if not any(sparse):
            raise ValueError(f"first_k_dense: no sparse layer among the {n_layers}")
        if not all(sparse) and self.d_ff is None:
            raise ValueError(f"d_ff: required, since {sparse.count(False)} layers are dense")
        if all(sparse) and self.d_ff is not None:
            raise ValueError("d_ff: every layer is sparse, so no dense FFN uses it")


# --- sizes --------------------------------------------------------------------------------------

#: The symbols of a sparse layer, in the form of ``costmodel.symbols.ALPHABET``.
_SIZE = dict(integer=True, positive=True)
SYMBOLS: dict[str, tuple[dict[str, bool], str]] = {
    "E": (_SIZE, "routed experts per sparse layer"),
    "K": (_SIZE, "experts each token is routed to (top_k)"),
    "f_e": (_SIZE, "hidden width of each routed expert"),
    "n_s": (_SIZE, "shared experts"),
    "f_s": (_SIZE, "hidden width of each shared expert"),
}


@dataclass(frozen=True)
class ExpertDims:
    """E, K, f_e, n_s, f_s: all symbols or all integers (as ``costmodel.cost.Dims``)."""

    E: Num
    K: Num
    f_e: Num
    n_s: Num
    f_s: Num

    @classmethod
    def of(cls, cfg: MoE) -> ExpertDims:
        return cls(cfg.n_experts, cfg.top_k, cfg.d_ff_expert, cfg.n_shared_experts,
                   cfg.d_ff_shared or cfg.d_ff_expert)

    @classmethod
    def symbolic(cls) -> ExpertDims:
        import sympy

        return cls(*(sympy.Symbol(name, **SYMBOLS[name][0]) for name in ("E", "K", "f_e", "n_s", "f_s")))

    def values(self, cfg: MoE) -> dict[Any, int]:
        """symbol -> the spec's value (self symbolic)."""
        return dict(zip((self.E, self.K, self.f_e, self.n_s, self.f_s),
                        (cfg.n_experts, cfg.top_k, cfg.d_ff_expert, cfg.n_shared_experts,
                         cfg.d_ff_shared or cfg.d_ff_expert), strict=True))


def _ints(*xs: Any) -> bool:
    return all(isinstance(x, int) for x in xs)


_EXACT_BITS = 1 << 16  # below this, the expectation in exact rationals (T = 1 gives K exactly)


def expected_experts(E: Num, K: Num, tokens: Num) -> Num:
    """E * (1 - (1 - K/E)^T): experts that receive at least one of T uniformly routed tokens.

    Each token picks K distinct experts of E uniformly, so a given expert is missed by one
    token with probability 1 - K/E and by all T (independently) with (1 - K/E)^T. Integers in,
    a float out (an expectation); symbols in, the sympy expression.
    """
    if _ints(E, K, tokens):
        if tokens == 0:
            return 0.0
        if K >= E:
            return float(E)
        if tokens * E.bit_length() <= _EXACT_BITS:  # exactly (E^T - (E-K)^T) / E^(T-1)
            return float(Fraction(E**tokens - (E - K) ** tokens, E ** (tokens - 1)))
        return -E * math.expm1(tokens * math.log1p(-K / E))
    import sympy

    E, K = sympy.sympify(E), sympy.sympify(K)
    return E * (1 - (1 - K / E) ** tokens)


def worst_experts(E: Num, K: Num, tokens: Num) -> Num:
    """min(E, T*K): the most experts T tokens of K picks each can reach."""
    return smin(E, tokens * K)


def capacity(capacity_factor: float, E: Num, K: Num, tokens: Num) -> Num:
    """Switch's expert capacity ceil(capacity_factor * T * K / E): the rows every expert runs."""
    factor = Fraction(str(capacity_factor))  # 1.25 exactly, not its binary neighbour
    if _ints(E, K, tokens):
        return math.ceil(factor * tokens * K / E)
    import sympy

    return sympy.ceiling(sympy.Rational(factor.numerator, factor.denominator) * tokens * K / E)


def experts_read(cfg: MoE, e: ExpertDims, tokens: Num, routing: Routing) -> Num:
    """How many routed experts read their weights in a pass over `tokens` tokens."""
    if cfg.capacity_factor is not None:  # every expert runs its (padded) capacity
        return e.E * runs(tokens)
    if routing is Routing.worst:
        return worst_experts(e.E, e.K, tokens)
    return expected_experts(e.E, e.K, tokens)


def expert_rows(cfg: MoE, e: ExpertDims, tokens: Num) -> Num:
    """Rows the routed experts process in all: T*K dropless, E*C with a capacity."""
    if cfg.capacity_factor is None:
        return tokens * e.K
    return e.E * capacity(cfg.capacity_factor, e.E, e.K, tokens)


def _whole(x: Num) -> Num:
    """An expected byte count rounded to a whole byte (integers stay exact)."""
    return round(x) if isinstance(x, float) else x


# --- costs --------------------------------------------------------------------------------------


def expert_linear(rows: Num, d_in: Num, d_out: Num, bias: bool, p: Num, E: Num, read: Num) -> Cost:
    """One linear of all E experts: `rows` rows in all, the weights of `read` experts read once.

    ``cost.linear`` for E weight matrices of which only those that receive a token are read.
    """
    per_expert = d_in * d_out + (d_out if bias else 0)
    weights = _whole(p * per_expert * read)
    return Cost(
        params=E * per_expert,
        matmul=2 * rows * d_in * d_out,
        matmul_eff=2 * rows * d_in * d_out,
        other=rows * d_out if bias else 0,
        bytes=p * (rows * d_in + rows * d_out) + weights,
        weights_read=weights,
    )


def mlp(activation: Activation, d: Num, f: Num, bias: bool, p: Num, tokens: Num,
        experts: tuple[Num, Num] | None = None) -> list[tuple[str, Cost]]:
    """gate/up/act/down of one FFN of width f over `tokens` rows, or of E experts of width f
    when `experts` = (E, experts read) is given (the leaves of ``costmodel.components.ffn``)."""
    def lin(d_in: Num, d_out: Num) -> Cost:
        if experts is None:
            return linear(tokens, d_in, d_out, bias, p)
        return expert_linear(tokens, d_in, d_out, bias, p, *experts)

    hidden = tokens * f
    act = elementwise(hidden, ACTIVATION_FLOPS[activation], p)
    out = []
    if activation.gated:
        out.append(("gate", lin(d, f)))
        act = act + elementwise(hidden, GATE_FLOPS, p, inputs=2)
    out.append(("up", lin(d, f)))
    out.append(("act", act))
    out.append(("down", lin(f, d)))
    return out


def router(cfg: MoE, d: Num, p: Num, e: ExpertDims, tokens: Num) -> list[tuple[str, Cost]]:
    """The router linear d -> E and the routing arithmetic on its T x E logits."""
    p_router = DTYPE_BYTES[cfg.router_dtype] if cfg.router_dtype else p
    logits = tokens * e.E
    score = SOFTMAX_FLOPS if cfg.scoring is Scoring.softmax else SIGMOID_FLOPS
    # score every logit, one top-k pass over the scores, gather the K chosen (ids written once)
    routing = elementwise(logits, score + TOPK_FLOPS, p_router) + Cost(
        bytes=(p_router + ID_BYTES) * tokens * e.K
    )
    if cfg.norm_topk:
        routing = routing + elementwise(tokens * e.K, NORM_TOPK_FLOPS, p_router)
    return [("router", linear(tokens, d, e.E, cfg.router_bias, p_router)), ("routing", routing)]


def moe(cfg: MoE, d: Num, p: Num, e: ExpertDims, tokens: Num, *, ffn_bias: bool = False,
        routing: Routing = Routing.uniform) -> list[tuple[str, Cost]]:
    """The leaves of one sparse FFN sub-block over `tokens` rows (norms and residual are the
    block's): router, routing, experts/*, combine, shared/*, shared_gate, aux_loss (training).

    `ffn_bias` is the spec's bias on dense FFN linears (shared experts follow it);
    `routing` chooses the expected (uniform) or the worst-case number of experts read.
    """
    out = router(cfg, d, p, e, tokens)
    rows = expert_rows(cfg, e, tokens)
    read = experts_read(cfg, e, tokens, routing)
    for leaf, cost in mlp(cfg.activation, d, e.f_e, cfg.expert_bias, p, rows, (e.E, read)):
        out.append((f"experts/{leaf}", cost))
    # Every chosen expert's output scaled by its weight and added into its token (index_add),
    # and the shared experts' output added once more.
    combine = elementwise(tokens * e.K * d, COMBINE_FLOPS, p) + Cost(bytes=p * tokens * e.K)
    if cfg.n_shared_experts:
        combine = combine + elementwise(tokens * d, 1, p, inputs=2)
    out.append(("combine", combine))
    if cfg.n_shared_experts:
        for leaf, cost in mlp(cfg.activation, d, e.n_s * e.f_s, ffn_bias, p, tokens):
            out.append((f"shared/{leaf}", cost))
        if cfg.shared_expert_gate:  # sigmoid(x w_g) * shared(x), w_g: d x 1 (Qwen2-MoE)
            gate = linear(tokens, d, 1, False, p) + elementwise(tokens, SIGMOID_FLOPS, p)
            out.append(("shared_gate", gate + elementwise(tokens * d, 1, p, inputs=2)))
    if cfg.aux_loss > 0:
        out.append(("aux_loss", aux_loss(p, e, tokens)))
    return out


def aux_loss(p: Num, e: ExpertDims, tokens: Num) -> Cost:
    """Switch's load-balancing loss alpha * E * sum_i f_i * P_i (Fedus et al. 2021, eq. 4-6).

    P_i: the router probabilities summed over the T tokens (T*E adds, reading T x E);
    f_i: the T*K assignments counted per expert (T*K adds, reading the ids); then E products,
    E adds, and the scaling by alpha * E / T^2 (2). Training only.
    """
    return Cost(
        other=tokens * e.E + tokens * e.K + 2 * e.E + 2,
        bytes=p * tokens * e.E + ID_BYTES * tokens * e.K + 2 * p * e.E,
        train_only=True,
    )


# --- parameters ---------------------------------------------------------------------------------


def expert_params(cfg: MoE, d: Num, f_e: Num | None = None) -> Num:
    """Parameters of one routed expert: (3 gated, 2 not) matrices of d x f_e, and their biases."""
    f = cfg.d_ff_expert if f_e is None else f_e
    matrices = 3 if cfg.gated else 2
    biases = ((2 if cfg.gated else 1) * f + d) if cfg.expert_bias else 0
    return matrices * d * f + biases


def inactive_params(cfg: MoE, d: Num, n_sparse: Num) -> Num:
    """Parameters one token skips: the E - K experts it is not routed to, in each sparse layer."""
    return n_sparse * (cfg.n_experts - cfg.top_k) * expert_params(cfg, d)


def active_params(total: int, embedding: int, cfg: MoE, d: int, n_sparse: int,
                  convention: ActiveConvention) -> int:
    """Active parameters per token in one convention, from a model's total and input-embedding
    parameters (a tied table counts as the input embedding and stays in both conventions)."""
    active = total - inactive_params(cfg, d, n_sparse)
    return active - embedding if convention is ActiveConvention.without_embedding else active


# --- decode intensity against batch -------------------------------------------------------------


@dataclass(frozen=True)
class BatchPoint:
    """One sparse FFN layer in one decode step of B sequences (one new token each)."""

    batch: int
    experts_read: float
    flops: int
    weight_bytes: int
    intensity: float  # FLOPs per byte of weights read: the fused bound of a decode FFN


def batch_curve(cfg: MoE, d: int, p: int, batches: list[int],
                routing: Routing = Routing.uniform) -> list[BatchPoint]:
    """How a sparse layer's decode intensity rises with batch (router, experts, shared, combine).

    A dense FFN of the same active parameters reads all of them at any batch, so its intensity
    grows as B; the sparse layer reads ~B*K experts until B*K nears E, so its intensity starts
    from the same value at B = 1 and grows slowly until every expert is read, then as B*K/E.
    """
    e = ExpertDims.of(cfg)
    points = []
    for B in batches:
        leaves = moe(cfg, d, p, e, B, routing=routing)
        total = Cost()
        for _, cost in leaves:
            if not cost.train_only:
                total = total + cost
        flops = int(total.matmul + total.other)
        weights = int(total.weights_read)
        points.append(BatchPoint(B, float(experts_read(cfg, e, B, routing)), flops, weights, flops / weights))
    return points
