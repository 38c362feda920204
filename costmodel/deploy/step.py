"""The time of one engine step of continuous batching: decode tokens and a prefill chunk together.

An engine step (Orca, Yu et al. 2022: iteration-level scheduling; Sarathi-Serve, Agrawal et al.
2024: chunked prefill piggybacked on decode steps) runs, on one attention replica (TP ranks):

- ``n`` decoding requests, one new token each, attending to their cached contexts;
- ``p`` prompt tokens of a prefill chunk (at most the step's token budget left after the
  decode tokens), attending to their prompt so far.

All ``T = n + p`` tokens pass through the linear layers as one batch, so the weights are read
once per step, not once for the decode part and once for the prefill part. The step's time is
then, each part from the existing time model (``runtime.timing``, on the measured tables where
the profile has them, ``predict_grid``'s array form):

    step(n, p) = body(T) + head(rows) + core_decode(n, C) + (p / P) core_prefill(P)
                 + TP all-reduce(T) + EP all-to-all(T)

- ``body(T)``: every component but the attention core and the head, of a prefill of T tokens
  (its products have M = T, its elementwise ops T rows; the cache writes T tokens);
- ``head(rows)``: the LM head over the rows that sample a token, the ``n`` decoders and the
  chunk when it is its prompt's last (1/k of a chunk for a prompt in k chunks);
- ``core_decode(n, C)``: the attention core of a decode step of ``n`` sequences at the mean
  context ``C`` their steps attend to (the cache read at ``--kv-dtype``);
- a chunk's attention: its share ``p / P`` of the whole prompt's prefill core (a prompt of P
  tokens in chunks does the same query-key pairs as in one pass; the chunks' kernels at their
  own shapes are not modelled);
- the collectives: 2 all-reduces of T x d per layer over TP (Shoeybi et al. 2019), and with EP
  the dispatch and combine all-to-alls of top_k x T x d per sparse layer, as
  ``parallel.serve`` counts them for decode (``collectives.collective``: NCCL's measured tables
  inside a node).

Each part is tabulated once per deployment on a grid of token counts and read by linear
interpolation, so that thousands of steps cost a few numpy passes. The sum is held at or above
the physics floor of the step (``timing.physics_floor``: the weights read once plus the cache
read, at full bandwidth; its FLOPs at peak); each component already is, and a linear
interpolation of values above a convex floor stays above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from costmodel.analysis import Analysis, analyze
from costmodel.components.key import Key, Role
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import Reads
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import collective
from costmodel.parallel.collectives import reads as collective_reads
from costmodel.parallel.layout import experts
from costmodel.parallel.serve import moe_layers
from costmodel.parallel.shard import shard_spec
from costmodel.precision import Widths
from costmodel.runtime.step_grid import on_tables, step_grid
from costmodel.runtime.timing import Kernels, physics_floor, predict
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES

GRID_POINTS = 48  # token counts each part is tabulated at, geometric from 1 to the largest step


def _body(key: Key) -> bool:
    return not key.attention_core and key.role is not Role.head


def _head(key: Key) -> bool:
    return key.role is Role.head


def _core(key: Key) -> bool:
    return key.attention_core


def _router(key: Key) -> bool:
    return key.role is Role.router


@dataclass(frozen=True)
class Shard:
    """One GPU's slice of a replica: the spec's TP shard, its E/EP routed experts."""

    spec: Spec
    tp: int
    ep: int
    dtype: str
    widths: Widths
    kernels: Kernels
    mla: str
    # "table": the decode core as the measured table has it; "bf16-rate": an fp8 cache read at the
    # bandwidth the bf16 table's kernel reaches (half its time; docs/serving.md, "Checked against
    # measurements": the tables' fp8-cache decode kernel, vLLM's FA3, gains 16% from half the bytes)
    cache_read: str = "table"
    # the serving framework whose own MoE and MLA tables the step reads (specs/kernels/<gpu>/
    # moe.<framework>.json, ``devices.kernels``); None: the folder's defaults (vLLM's MoE, SGLang's MLA)
    kernel_framework: str | None = None

    @property
    def kv_width(self) -> str:
        return self.widths.kv or self.dtype

    @property
    def local(self) -> Spec:
        s = shard_spec(self.spec, self.tp)
        moe = experts(self.spec)
        if moe and self.ep > 1:
            s = s.model_copy(update={"ffn": s.ffn.model_copy(update={"n_experts": moe[0] // self.ep})})
        return s

    def device(self, cluster: Cluster) -> Hardware:
        """The cluster's GPU as this shard's engine reads its measured tables (``kernel_framework``;
        the MoE rows measured at its EP and TP where they exist, ``Hardware.with_experts``)."""
        return cluster.hardware.with_framework(self.kernel_framework).with_experts(self.ep, self.tp)

    def analyze(self, phase: str, batch: int, seq: int) -> Analysis:
        return analyze(self.local, phase, batch=batch, seq=seq, dtype=self.dtype, mla=self.mla,
                       **self.widths.options())


def _times(shard: Shard, cluster: Cluster, phase: str, batch: np.ndarray, seq: np.ndarray,
           select: Callable[[Key], bool]) -> np.ndarray:
    """Seconds of the selected components of `phase` at every (batch, seq): the array model where
    the profile has tables for the dtype and the widths are the dtype's (``predict_grid``), else
    ``predict`` point by point (its rows: calibrated, or each component's roofline)."""
    hw = shard.device(cluster)
    local = shard.local
    if on_tables(hw, shard.dtype, shard.widths):
        return step_grid(local, phase, batch, seq, hw, shard.dtype, shard.widths, shard.kernels, shard.mla,
                         select)
    b, s = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(seq, dtype=float))
    out = np.zeros(b.shape)
    for i, (bi, si) in enumerate(zip(b.ravel(), s.ravel(), strict=True)):
        p = predict(shard.analyze(phase, int(bi), int(si)), hw, shard.kernels)
        out.flat[i] = sum(r.time_s for r in p.rows if select(r.key))
    return out


@dataclass(frozen=True)
class StepTimes:
    """One attention replica's step-time parts, tabulated (module docstring)."""

    grid: np.ndarray  # token counts, 0 first
    body: np.ndarray
    head: np.ndarray
    comm: np.ndarray
    core_decode: np.ndarray  # at `grid` decoding sequences, each at `context`
    context: float  # the mean context a decode step attends to
    prompts: np.ndarray  # prompt lengths (tokens prefilled, prefix sharing left out)
    core_prefill: np.ndarray  # one whole prompt's attention core at each of `prompts`
    weights_bytes: float  # one GPU's weights, read once a step
    kv_token_bytes: float  # one cached token's keys and values on one GPU
    flops_per_token: float  # the body's FLOPs per token (the physics floor's)
    peak: float
    bandwidth: float
    calibrated: bool

    def part(self, values: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(np.interp(tokens, self.grid, values))

    def prompt_core(self, prompt: np.ndarray) -> np.ndarray:
        """A whole prompt's attention core, read between the tabulated prompt lengths."""
        return np.asarray(np.interp(prompt, self.prompts, self.core_prefill))

    def step(self, n: np.ndarray, p: np.ndarray, core: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Seconds of steps of `n` decoding requests and `p` prefill tokens whose attention core
        is `core` seconds, sampling `rows` tokens (arrays, broadcast together)."""
        tokens = n + p
        t = (self.part(self.body, tokens) + self.part(self.head, rows) + self.part(self.core_decode, n)
             + core + self.part(self.comm, tokens))
        # ``timing.physics_floor``'s rule, over arrays: FLOPs at peak or bytes at full bandwidth
        least = np.maximum(tokens * self.flops_per_token / self.peak,
                           (self.weights_bytes + n * self.context * self.kv_token_bytes) / self.bandwidth)
        return np.asarray(np.maximum(t, least))

    def floor(self, n: float, p: float) -> float:
        """The physics floor of one step (``timing.physics_floor``): its FLOPs at peak, or the
        weights read once and the cache read at full bandwidth."""
        return physics_floor((n + p) * self.flops_per_token,
                             self.weights_bytes + n * self.context * self.kv_token_bytes,
                             self.peak, self.bandwidth)


def step_times(shard: Shard, cluster: Cluster, top: int, context: float, prompts: np.ndarray,
               exact: tuple[float, ...] = ()) -> StepTimes:
    """The step-time parts of `shard` on `cluster`, for steps of up to `top` tokens, decoders at
    `context` tokens, and prompts of the lengths `prompts` (each at least 1); `exact`: token
    counts tabulated as they are (a whole prompt in one chunk, a budget), not interpolated."""
    points = np.concatenate([[0.0], np.round(np.geomspace(1, max(top, 2), GRID_POINTS)),
                             np.round([x for x in exact if 1 <= x <= top])])
    grid = np.unique(points)
    tokens = grid[1:]
    one = np.ones(1)
    body = _times(shard, cluster, "prefill", one, tokens, _body)
    head = _times(shard, cluster, "prefill", one, tokens, _head)
    if shard.ep > 1 and experts(shard.spec):
        # Every replica scores its tokens against all E experts: the router over E/EP experts
        # in the shard costs EP times that (``parallel.serve.decode``).
        body = body + (shard.ep - 1) * _times(shard, cluster, "prefill", one, tokens, _router)
    seq = max(1, int(round(context)) - 1)  # decode at C cached attends to C + 1
    core_decode = _times(shard, cluster, "decode", tokens, np.full(1, float(seq)), _core)
    if shard.cache_read == "bf16-rate" and shard.kv_width == "fp8" and shard.spec.mla is None:
        wide = Shard(shard.spec, shard.tp, shard.ep, "bf16", Widths(), shard.kernels, shard.mla,
                     kernel_framework=shard.kernel_framework)
        half = 0.5 * _times(wide, cluster, "decode", tokens, np.full(1, float(seq)), _core)
        core_decode = np.minimum(core_decode, half)
    prompts = np.unique(np.maximum(1.0, np.round(prompts)))
    core_prefill = _times(shard, cluster, "prefill", one, prompts, _core)
    one_token = shard.analyze("prefill", 1, 1)
    hw = cluster.hardware
    return StepTimes(
        grid, _zero_first(body), _zero_first(head), comm_times(shard, cluster, grid),
        _zero_first(core_decode), context, prompts, core_prefill,
        float(one_token.bytes_weights), float(shard.analyze("prefill", 1, 16).total().kv_cache) / 16,
        float(sum(r.flops for r in one_token.rows if _body(r.key))), gemm_peak(hw, shard.dtype, shard.widths),
        hw.memory_bandwidth, bool(hw.tables_for(shard.dtype)) and not shard.widths.differs(shard.dtype))


def gemm_peak(hw: Hardware, dtype: str, widths: Widths) -> float:
    """The fastest peak a step's GEMMs run at, the physics floor's: `dtype`'s, or the weights' where
    their width has a peak of its own and a higher one (nvfp4's linear layers at the fp4 peak under
    bf16 activations: ``timing.block_rates``)."""
    held = widths.weights
    return max(hw.peak(dtype), hw.peak(held) if held and hw.has_peak(held) else 0.0)


def _zero_first(values: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.ravel(values)])


def comm_times(shard: Shard, cluster: Cluster, grid: np.ndarray) -> np.ndarray:
    """Seconds of a step's collectives at each token count of `grid` (``parallel.serve``'s:
    2 all-reduces of T x d per layer over TP, 2 all-to-alls of top_k x T x d per sparse layer
    over EP, ranks `tp` apart)."""
    spec = shard.spec
    p = DTYPE_BYTES[shard.dtype]
    L = spec.n_layers or 0
    moe = experts(spec)
    out = np.zeros(len(grid))
    for i, t in enumerate(grid):
        if t <= 0:
            continue
        x = t * spec.d_model * p
        if shard.tp > 1:
            out[i] += 2 * L * collective(cluster, "all_reduce", "tp", shard.tp, x).time_s
        if moe and shard.ep > 1:
            out[i] += 2 * moe_layers(spec) * collective(cluster, "all_to_all", "ep", shard.ep, moe[1] * x,
                                                        stride=shard.tp).time_s
    return out


def step_reads(shard: Shard, cluster: Cluster, tokens: int, decoders: int, context: float,
               prompt: float) -> Reads:
    """What an engine step of `tokens` tokens read of the device's measured tables
    (``devices.kernels.Reads``: the error bands of its op classes and those it read past the
    tables): the body and head as a prefill of `tokens` tokens in prompts of `prompt`, the decode
    core of `decoders` sequences at `context`, one prompt's core, and the step's TP and EP
    collectives at `tokens`. The one-shape model (``predict``), once per layout shown, as train's
    ``Step.reads``: the search's arrays record no reads."""
    hw = shard.device(cluster)
    # the step's tokens as prompts (a prefill of one sequence of them could pass the spec's context)
    length = max(1, round(prompt))
    shapes = (("prefill", -(-tokens // length), length), ("decode", decoders, round(context) - 1),
              ("prefill", 1, length))
    preds = [predict(shard.analyze(phase, max(1, b), max(1, s)), hw, shard.kernels) for phase, b, s in shapes]
    x = max(1, tokens) * shard.spec.d_model * DTYPE_BYTES[shard.dtype]
    moe = experts(shard.spec)
    calls = [*([collective(cluster, "all_reduce", "tp", shard.tp, x)] if shard.tp > 1 else []),
             *([collective(cluster, "all_to_all", "ep", shard.ep, moe[1] * x, stride=shard.tp)]
               if moe and shard.ep > 1 else [])]
    return Reads.union([*(Reads(p.errors, p.extrapolated) for p in preds), collective_reads(cluster, calls)])
