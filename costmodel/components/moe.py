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
from typing import Any

from costmodel.components.ffn import activation
from costmodel.components.scores import SOFTMAX_FLOPS
from costmodel.cost import Cost, Dims, Num, elementwise, gemm, is_array, linear, runs, smin
from costmodel.spec import Activation, ActiveConvention, MoEFFN, Scoring, Spec
from costmodel.symbols import DTYPE_BYTES, ID_BYTES

SIGMOID_FLOPS = 3  # exp(-x), +1, divide
TOPK_FLOPS = 1  # one comparison per score, a single pass keeping the k largest
NORM_TOPK_FLOPS = 2  # per chosen weight: one add into the sum, one divide by it
COMBINE_FLOPS = 2  # per expert output element: times its gate weight, add into the token


class Routing(str, Enum):
    """Which experts a batch reads (a choice of the analysis, not of the architecture)."""

    uniform = "uniform"  # tokens pick experts uniformly at random: E*(1 - (1 - K/E)^T)
    worst = "worst"  # every token's experts distinct: min(E, T*K)


# --- sizes --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExpertDims:
    """E, K, f_e, n_s, f_s (declared by the FFN element): all symbols or all integers."""

    E: Num
    K: Num
    f_e: Num
    n_s: Num
    f_s: Num

    @classmethod
    def of(cls, cfg: MoEFFN) -> ExpertDims:
        return cls(cfg.n_experts, cfg.top_k, cfg.d_ff_expert, cfg.n_shared_experts,
                   cfg.d_ff_shared or cfg.d_ff_expert)

    @classmethod
    def symbolic(cls) -> ExpertDims:
        from costmodel import symbols as sym

        return cls(sym.E, sym.K, sym.f_e, sym.n_s, sym.f_s)

    def values(self, cfg: MoEFFN) -> dict[Any, int]:
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
    if is_array(tokens):  # the time grid (costmodel.runtime.timing_grid): the same expectation in floats
        import numpy

        if K >= E:
            return numpy.where(tokens > 0, float(E), 0.0)
        return -E * numpy.expm1(tokens * math.log1p(-K / E))
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
    if is_array(tokens):  # ceil(a / b) = -(-a // b), exact on integer-valued floats below 2^53
        return -((-factor.numerator * K * tokens) // (factor.denominator * E))
    import sympy

    return sympy.ceiling(sympy.Rational(factor.numerator, factor.denominator) * tokens * K / E)


def experts_read(cfg: MoEFFN, e: ExpertDims, tokens: Num, routing: Routing) -> Num:
    """How many routed experts read their weights in a pass over `tokens` tokens."""
    if cfg.capacity_factor is not None:  # every expert runs its (padded) capacity
        return e.E * runs(tokens)
    if routing is Routing.worst:
        return worst_experts(e.E, e.K, tokens)
    return expected_experts(e.E, e.K, tokens)


def expert_rows(cfg: MoEFFN, e: ExpertDims, tokens: Num) -> Num:
    """Rows the routed experts process in all: T*K dropless, E*C with a capacity."""
    if cfg.capacity_factor is None:
        return tokens * e.K
    return e.E * capacity(cfg.capacity_factor, e.E, e.K, tokens)


def _whole(x: Num) -> Num:
    """An expected byte count rounded to a whole byte (integers stay exact)."""
    if is_array(x):
        import numpy

        return numpy.round(x)  # as round(): halves to even
    return round(x) if isinstance(x, float) else x


# --- costs --------------------------------------------------------------------------------------


def expert_linear(rows: Num, d_in: Num, d_out: Num, bias: bool, p: Num, E: Num, read: Num,
                  saves_input: bool = True) -> Cost:
    """One linear of all E experts: `rows` rows in all, the weights of `read` experts read once.

    ``cost.linear`` for E weight matrices of which only those that receive a token are read;
    for the time model one grouped product of all the rows (the FLOPs of the E products).
    """
    per_expert = d_in * d_out + (d_out if bias else 0)
    weights = _whole(p * per_expert * read)
    # the sizes before the rows: over arrays one pass a product, and the bytes' sizes summed
    # first (``cost.linear``; integers below 2^53: the same floats)
    flops = 2 * d_in * d_out * rows
    moved = (p * (d_in + d_out)) * rows if is_array(rows) else p * (rows * d_in + rows * d_out)
    return Cost(
        params=E * per_expert,
        matmul=flops,
        matmul_eff=flops,
        other=d_out * rows if bias else 0,
        bytes_unfused=moved + weights,
        weights_read=weights,
        gemms=(gemm(1, rows, d_in, d_out),),
        saved=p * d_in * rows if saves_input else 0,
        matrices=E * d_in * d_out,
        factored=E * (d_in + d_out + (d_out if bias else 0)),
    )


def mlp(act: Activation, d: Num, f: Num, bias: bool, p: Num, tokens: Num,
        experts: tuple[Num, Num] | None = None, first_saves: bool = True,
        one_kernel: bool = False) -> list[tuple[str, Cost]]:
    """gate/up/act/down of one FFN of width f over `tokens` rows, or of E experts of width f
    when `experts` = (E, experts read) is given (the leaves and saved tensors of
    ``costmodel.components.ffn``)."""
    def lin(d_in: Num, d_out: Num, saves_input: bool = True) -> Cost:
        if experts is None:
            return linear(tokens, d_in, d_out, bias, p, saves_input)
        return expert_linear(tokens, d_in, d_out, bias, p, *experts, saves_input=saves_input)

    gated = act.gated
    out = []
    if gated:
        out.append(("gate", lin(d, f, saves_input=first_saves)))
    out.append(("up", lin(d, f, saves_input=first_saves and not gated)))
    out.append(("act", activation(act, tokens * f, p, one_kernel)))
    out.append(("down", lin(f, d, saves_input=act is not Activation.relu)))
    return out


def router(cfg: MoEFFN, d: Num, p: Num, e: ExpertDims, tokens: Num) -> list[tuple[str, Cost]]:
    """The router linear d -> E and the routing arithmetic on its T x E logits."""
    p_router = DTYPE_BYTES[cfg.router_dtype] if cfg.router_dtype else p
    logits = tokens * e.E
    score = SOFTMAX_FLOPS if cfg.scoring is Scoring.softmax else SIGMOID_FLOPS
    # score every logit, one top-k pass over the scores, gather the K chosen (ids written once)
    # Kept for backward: the scores (softmax and sigmoid keep their output), the top-k's and the
    # gather's ids, and the renormalisation's two inputs (the K weights and their sum).
    routing = elementwise(logits, score + TOPK_FLOPS, p_router, saves=1) + Cost(
        bytes_unfused=(p_router + ID_BYTES) * tokens * e.K, saved=2 * ID_BYTES * tokens * e.K,
    )
    if cfg.norm_topk:
        routing = routing + elementwise(tokens * e.K, NORM_TOPK_FLOPS, p_router) + Cost(
            saved=p_router * (tokens * e.K + tokens))
    return [("router", linear(tokens, d, e.E, cfg.router_bias, p_router)), ("routing", routing)]


def moe(spec: Spec, dims: Dims, tokens: Num) -> list[tuple[str, Cost]]:
    """The leaves of one sparse FFN sub-block of `spec` (``FFN_KINDS["moe"]``): ``sparse`` over
    the sizes of `dims` (E, K, f_e, n_s, f_s declared by the FFN element) and its routing."""
    cfg = spec.moe
    if cfg is None:
        raise ValueError(f"{spec.name}: ffn: not a mixture of experts")
    e = ExpertDims(dims.E, dims.K, dims.f_e, dims.n_s, dims.f_s)
    return sparse(cfg, dims.d, dims.p, e, tokens, ffn_bias=spec.bias.ffn, routing=Routing(dims.routing),
                  one_kernel=dims.one_kernel)


def sparse(cfg: MoEFFN, d: Num, p: Num, e: ExpertDims, tokens: Num, *, ffn_bias: bool = False,
           routing: Routing = Routing.uniform, one_kernel: bool = False) -> list[tuple[str, Cost]]:
    """The leaves of one sparse FFN sub-block over `tokens` rows (norms and residual are the
    block's): router, routing, experts/*, combine, shared/*, shared_gate, aux_loss (training).

    `ffn_bias` is the spec's bias on dense FFN linears (shared experts follow it);
    `routing` chooses the expected (uniform) or the worst-case number of experts read;
    `one_kernel`: what one-kernel activations keep (``Dims.one_kernel``).
    """
    out = router(cfg, d, p, e, tokens)
    rows = expert_rows(cfg, e, tokens)
    read = experts_read(cfg, e, tokens, routing)
    for leaf, cost in mlp(cfg.activation, d, e.f_e, cfg.expert_bias, p, rows, (e.E, read),
                          one_kernel=one_kernel):
        out.append((f"experts/{leaf}", cost))
    # Every chosen expert's output scaled by its weight and added into its token (index_add),
    # and the shared experts' output added once more.
    # Kept for backward: each assignment's token and slot ids, its weight, the experts' outputs
    # (the weight product keeps them, rows of them with a capacity) and the products (index_add).
    assignments = tokens * e.K
    combine = elementwise(assignments * d, COMBINE_FLOPS, p) + Cost(
        bytes_unfused=p * assignments,
        saved=2 * ID_BYTES * assignments + p * assignments + p * rows * d + p * assignments * d,
    )
    if cfg.n_shared_experts:
        combine = combine + elementwise(tokens * d, 1, p, inputs=2)
    out.append(("combine", combine))
    if cfg.n_shared_experts:
        # The router keeps the block's input already, unless it keeps its own fp32 copy.
        shared = mlp(cfg.activation, d, e.n_s * e.f_s, ffn_bias, p, tokens,
                     first_saves=cfg.router_dtype is not None, one_kernel=one_kernel)
        for leaf, cost in shared:
            out.append((f"shared/{leaf}", cost))
        if cfg.shared_expert_gate:  # sigmoid(x w_g) * shared(x), w_g: d x 1 (Qwen2-MoE)
            gate = linear(tokens, d, 1, False, p, saves_input=False) + elementwise(tokens, SIGMOID_FLOPS, p,
                                                                                   saves=1)
            out.append(("shared_gate", gate + elementwise(tokens * d, 1, p,
                                                          inputs=2) + Cost(saved=p * tokens * d)))
    if cfg.aux_loss > 0:
        out.append(("aux_loss", aux_loss(p, e, tokens,
                                         DTYPE_BYTES[cfg.router_dtype] if cfg.router_dtype else p)))
    return out


def aux_loss(p: Num, e: ExpertDims, tokens: Num, p_scores: Num | None = None) -> Cost:
    """Switch's load-balancing loss alpha * E * sum_i f_i * P_i (Fedus et al. 2021, eq. 4-6).

    P_i: the router probabilities summed over the T tokens (T*E adds, reading T x E);
    f_i: the T*K assignments counted per expert (T*K adds, reading the ids); then E products,
    E adds, and the scaling by alpha * E / T^2 (2). Training only. Kept for backward: the E
    counts f_i, at the scores' width `p_scores` (the gradient of f_i * P_i in P_i is f_i).
    """
    return Cost(
        other=tokens * e.E + tokens * e.K + 2 * e.E + 2,
        bytes_unfused=p * tokens * e.E + ID_BYTES * tokens * e.K + 2 * p * e.E,
        saved=(p if p_scores is None else p_scores) * e.E,
        train_only=True,
    )


# --- parameters ---------------------------------------------------------------------------------


def expert_params(cfg: MoEFFN, d: Num, f_e: Num | None = None) -> Num:
    """Parameters of one routed expert: (3 gated, 2 not) matrices of d x f_e, and their biases."""
    f = cfg.d_ff_expert if f_e is None else f_e
    matrices = 3 if cfg.gated else 2
    biases = ((2 if cfg.gated else 1) * f + d) if cfg.expert_bias else 0
    return matrices * d * f + biases


def inactive_params(cfg: MoEFFN, d: Num, n_sparse: Num) -> Num:
    """Parameters one token skips: the E - K experts it is not routed to, in each sparse layer."""
    return n_sparse * (cfg.n_experts - cfg.top_k) * expert_params(cfg, d)


def active_params(total: int, embedding: int, cfg: MoEFFN, d: int, n_sparse: int,
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


def batch_curve(cfg: MoEFFN, d: int, p: int, batches: list[int],
                routing: Routing = Routing.uniform) -> list[BatchPoint]:
    """How a sparse layer's decode intensity rises with batch (router, experts, shared, combine).

    A dense FFN of the same active parameters reads all of them at any batch, so its intensity
    grows as B; the sparse layer reads ~B*K experts until B*K nears E, so its intensity starts
    from the same value at B = 1 and grows slowly until every expert is read, then as B*K/E.
    """
    e = ExpertDims.of(cfg)
    points = []
    for B in batches:
        leaves = sparse(cfg, d, p, e, B, routing=routing)
        total = Cost()
        for _, cost in leaves:
            if not cost.train_only:
                total = total + cost
        flops = int(total.matmul + total.other)
        weights = int(total.weights_read)
        points.append(BatchPoint(B, float(experts_read(cfg, e, B, routing)), flops, weights, flops / weights))
    return points
