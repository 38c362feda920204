"""Disaggregated prefill and decode: x prefill engines and y decode engines (xPyD), the KV cache
of each request sent from one to the other.

As DistServe (Zhong et al. 2024, OSDI), Splitwise (Patel et al. 2024, ISCA) and the engines
that deploy it (NVIDIA Dynamo, SGLang's ``--disaggregation-mode``, TensorRT-LLM's disaggregated
serving) run it: prefill and decode on separate GPUs, each pool with its own parallel layout
(TP, EP, DP attention: ``deploy.experts``), so that no prefill chunk ever slows a decode step
and each phase runs at the batch it likes. A request is prefilled in the prefill pool, its
cache sent to a decode engine, and decoded there. Counted per attention replica (TP ranks), in
the steady state:

- **Prefill engine** (token budget B, ``--max-num-tokens``): every step is a chunk of B prompt
  tokens (prompts packed, or one prompt cut in chunks), no decoders beside; a prompt of P tokens
  takes B/P of a step: capacity mu = (B / P) / step(0, B) prompts/s. A prompt's own time is its
  ceil(P / B) chunks alone (as ``deploy.engine``'s open loop); arrivals wait the M/D/1 mean
  (Pollaczek-Khinchine) at the capacity.
- **KV transfer**: the prompt's cache at ``--kv-dtype``, as each prefill GPU holds it (its TP
  shard: P x the cache per token on one GPU), each GPU sending its part at once, point to point
  (``collectives.modelled`` p2p: NVLink when the whole deployment sits in one node or NVL72
  rack, the network's figures of the cluster profile otherwise); not overlapped with the
  prefill (TTFT = prefill + its queue + transfer), overlapped with the next prompts (the link
  is a third bound on the rate, 1 / transfer per replica: Mooncake, NIXL's non-blocking sends).
- **Decode engine** (max batch b, ``--batch``): steps of the c running requests only,
  TPOT = step(c, 0) at the mean context (``deploy.step``; no chunk beside, so every step is
  the same and the TPOT percentiles are one number); a request holds a slot for m = E[O] - 1
  steps: c / (m TPOT) requests/s. Its pages hold prompt and output (``engine_memory``).
- **Balance**: the deployment serves the rate the slower pool sustains. Closed loop (the
  concurrency, or each decode engine at its max batch): c = min(concurrency / engines, b, pages);
  if the prefill pool (or the link) sustains less than the decode pool at c, the rate is the
  prefill's and c falls to the fixed point c = rate / engines x m TPOT(c); requests beyond those
  decoding and prefilling wait before prefill (queue / rate, Little: the decode engine
  allocates the pages before the prefill starts, as SGLang's handshake does). Open loop
  (``--rate``): each pool at its share of the rate, overloaded past its capacity.
- tokens/s per GPU = rate x E[O] / (GPUs of both pools); tokens/s per user = 1 / TPOT.

Searched (``search``): every split of the N GPUs into x prefill engines of one layout and y
decode engines of another (x, y >= 1, x g_p + y g_d = N), engine sizes the divisors of a node
and whole multiples of it (up to 36 nodes), each with every budget (prefill) and max batch
(decode); those whose weights leave no page for a request do not fit. Beside the aggregated
deployments (``deploy.search``), in one ranking with a ``mode``.

Not modelled: the layer-by-layer transfer overlapped with the prefill (DistServe's pipelined
send), the transfer's contention with the EP all-to-all on the same NICs, the prefill pool's
own TBO (two-batch overlap) and the decode pool's MTP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from costmodel.deploy import DEFAULT_BATCHES, DEFAULT_TOKENS
from costmodel.deploy.engine import PERCENTILES, Engine, EngineMemory, decode_context, engine_memory, held
from costmodel.deploy.experts import ExpertShard, Placement, layouts, step_times
from costmodel.deploy.experts import label as layout_label
from costmodel.deploy.search import (
    ENGINE,
    Ranked,
    Search,
    Targets,
    _num,
    pareto,
    rank,
    search,
    served,
)
from costmodel.deploy.step import StepTimes
from costmodel.deploy.workload import Workload, fixed
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import modelled
from costmodel.precision import Widths
from costmodel.runtime.timing import Kernels
from costmodel.spec import Spec

ITERATIONS = 60  # fixed-point passes of the decoders' count
MAX_NODES = 36  # engines up to this many nodes (DeepSeek's decode unit: 18 nodes, EP144)
ANY = Targets()


@dataclass(frozen=True)
class Pool:
    """One pool of `engines` engines of TP x EP GPUs each, in the prefill or the decode role."""

    role: str  # prefill or decode
    tp: int
    ep: int
    engines: int
    max_batch: int
    max_tokens: int
    memory: EngineMemory  # per GPU
    placement: Placement | None = None

    @property
    def gpus(self) -> int:
        return self.engines * self.tp * self.ep

    @property
    def label(self) -> str:
        return f"{self.engines}x {layout_label(self.tp, self.ep)}"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "engines": self.engines, "tp": self.tp, "ep": self.ep, "gpus": self.gpus,
                "max_batch": self.max_batch, "max_num_tokens": self.max_tokens,
                "memory_per_gpu": self.memory.to_dict(),
                **({"experts": self.placement.to_dict()} if self.placement is not None else {})}


@dataclass(frozen=True)
class Disaggregated:
    """One xPyD deployment in its steady state (times in seconds; tokens/s)."""

    prefill: Pool
    decode: Pool
    running: float  # requests decoding per decode engine (attention replica)
    ttft: dict[int, float]
    tpot: dict[int, float]
    ttft_mean: float
    tpot_mean: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    stable: bool
    requests_per_s: float  # the whole deployment's
    transfer_s: float  # one mean prompt's cache, prefill to decode
    link: str  # nvlink or network
    bound: str  # which sets the rate: prefill, transfer, decode, or the arrivals (open loop)
    meets: bool = False
    cost_per_million: float | None = None

    @property
    def mode(self) -> str:
        return f"disaggregated {self.prefill.engines}P{self.decode.engines}D"

    @property
    def label(self) -> str:
        return f"P {self.prefill.label} + D {self.decode.label}"

    @property
    def max_batch(self) -> int:
        return self.decode.max_batch

    @property
    def max_tokens(self) -> int:
        return self.prefill.max_tokens

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    def engines(self) -> tuple[tuple[int, int, int, int], ...]:
        """(TP, EP, tokens a step, decoders a step) of the prefill and the decode engines."""
        decoders = max(1, round(self.running))
        return ((self.prefill.tp, self.prefill.ep, self.prefill.max_tokens, 1),
                (self.decode.tp, self.decode.ep, decoders, decoders))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict(),
            "gpus": self.gpus, "running_per_decode_engine": self.running, "stable": self.stable,
            "meets_targets": self.meets, "bound": self.bound, "requests_per_s": _num(self.requests_per_s),
            "kv_transfer_s": _num(self.transfer_s), "kv_link": self.link,
            **served(self),
        }


@dataclass(frozen=True)
class EngineLayout:
    """One engine layout's shard and step-time table, shared by both roles."""

    shard: ExpertShard
    times: StepTimes
    weights_and_page: tuple[int, int]

    @property
    def gpus(self) -> int:
        return self.shard.tp * self.shard.ep


@dataclass(frozen=True)
class PrefillSide:
    """A prefill engine of one layout and budget, per attention replica (module docstring)."""

    layout: EngineLayout
    budget: int
    memory: EngineMemory
    capacity: float  # prompts/s
    own: dict[int, float]  # a q-quantile prompt's prefill alone, seconds
    own_mean: float
    transfer: dict[int, float]  # its cache to the decode engine, seconds
    transfer_mean: float


def engine_layout(shard: ExpertShard, cluster: Cluster, workload: Workload, engine: Engine,
                  tokens: tuple[int, ...], batches: tuple[int, ...]) -> EngineLayout:
    """`shard`'s step-time table for both roles: steps up to the largest budget or max batch,
    decoders at the workload's mean context, its prompts' lengths tabulated as they are."""
    top = max(max(tokens), max(batches))
    share = engine.prefix_sharing
    w_prompts = [workload.prompt.mean * (1 - share), *(workload.prompt.quantile(q / 100) * (1 - share)
                                                       for q in PERCENTILES)]
    prompts = np.array([1.0, *(_whole(p, share) for p in w_prompts)])
    prompts = np.concatenate([prompts, prompts * share]) if share else prompts
    exact = (*map(float, tokens), *(min(max(p, 1.0), float(top)) for p in w_prompts))
    times = step_times(shard, cluster, top, decode_context(workload), prompts, exact)
    return EngineLayout(shard, times, held(shard, engine.block))


def decode_tokens_per_s(layout: EngineLayout, running: float) -> float:
    """Output tokens/s of one decode engine (attention replica) with `running` requests decoding."""
    return running / float(_tpot(layout.times, np.full(1, float(running)))[0])


def engine_sizes(cluster: Cluster, gpus: int) -> list[int]:
    """GPUs per engine: the divisors of a node, and whole nodes up to MAX_NODES, below `gpus`."""
    g = cluster.gpus_per_node
    sizes = [d for d in range(1, g + 1) if g % d == 0] + [k * g for k in range(2, MAX_NODES + 1)]
    return [s for s in sizes if s < gpus]


def transfer_seconds(cluster: Cluster, gpus: int, tokens: float, token_bytes: float) -> float:
    """One prompt's cache of `tokens` tokens, `token_bytes` a token on one GPU, point to point:
    over NVLink when the deployment's `gpus` sit in one node (or rack), the network otherwise."""
    stride = 1 if gpus <= cluster.gpus_per_node else cluster.gpus_per_node
    return modelled(cluster, "p2p", "kv", 2, tokens * token_bytes, stride).time_s


def link_of(cluster: Cluster, gpus: int) -> str:
    return "nvlink" if gpus <= cluster.gpus_per_node else "network"


def _whole(tokens: float, share: float) -> float:
    return tokens / (1 - share)


def _core(times: StepTimes, tokens: float, share: float) -> float:
    """A prompt's attention core with its shared prefix not prefilled again (``deploy.engine``'s rule)."""
    whole = _whole(tokens, share)
    return float(times.prompt_core(np.asarray(whole)) - (times.prompt_core(np.asarray(whole * share))
                                                          if share else 0.0))


def prefill_side(layout: EngineLayout, cluster: Cluster, gpus: int, budget: int, workload: Workload,
                 engine: Engine) -> PrefillSide:
    """A prefill engine of `layout` at token budget `budget` (module docstring)."""
    t, share = layout.times, engine.prefix_sharing
    prompt = workload.prompt.mean * (1 - share)
    packed = budget / max(prompt, 1.0)  # prompts (or parts of one) per full step
    full = float(t.step(np.zeros(1), np.full(1, float(budget)), np.full(1, packed * _core(t, prompt, share)),
                        np.full(1, packed))[0])
    wl = Workload(workload.prompt, fixed(1))
    mem = engine_memory(layout.shard, cluster.hardware.memory_bytes,
                        replace(engine, max_batch=max(1, min(budget, math.ceil(packed))), max_tokens=budget),
                        wl, layout.weights_and_page)

    def alone(tokens: float) -> float:
        tokens = max(tokens, 1.0)
        k = math.ceil(tokens / budget)
        chunk = min(tokens, float(budget))
        return k * float(t.step(np.zeros(1), np.full(1, chunk), np.full(1, _core(t, tokens, share) / k),
                                np.full(1, 1 / k))[0])

    def sent(tokens: float) -> float:
        return transfer_seconds(cluster, gpus, _whole(max(tokens, 1.0), share), t.kv_token_bytes)

    quantiles = {q: workload.prompt.quantile(q / 100) * (1 - share) for q in PERCENTILES}
    return PrefillSide(layout, budget, mem, packed / full, {q: alone(p) for q, p in quantiles.items()},
                       alone(prompt), {q: sent(p) for q, p in quantiles.items()}, sent(prompt))


def _decoders(times: StepTimes, rate: np.ndarray, steps: float, cap: np.ndarray) -> tuple[np.ndarray, ...]:
    """The running count c = rate x m x TPOT(c) per decode engine, the least fixed point from one
    request (TPOT rises with c), held at cap + 1; (c, TPOT(c), whether it settled at or below cap)."""
    c = np.ones(np.shape(rate))
    for _ in range(ITERATIONS):
        c = np.minimum(np.maximum(rate * steps * _tpot(times, c), 1e-9), cap + 1.0)
    tpot = _tpot(times, np.minimum(c, cap))
    settled = (c <= cap) & (np.abs(rate * steps * tpot / np.maximum(np.minimum(c, cap), 1e-12) - 1) < 1e-3)
    return np.minimum(c, cap), tpot, settled


def _tpot(times: StepTimes, c: np.ndarray) -> np.ndarray:
    """A decode step of `c` requests and nothing else."""
    return times.step(c, np.zeros_like(c), np.zeros_like(c), c)


def search_disaggregated(spec: Spec, cluster: Cluster, gpus: int, workload: Workload, engine: Engine,
                         batches: tuple[int, ...], tokens: tuple[int, ...], targets: Targets, dtype: str,
                         widths: Widths, kernels: Kernels, mla: str, price: float | None,
                         redundant: int = 0) -> tuple[list[Disaggregated], int, bool]:
    """Every xPyD deployment of `gpus` GPUs (module docstring): (those whose pools fit, how many
    they are, whether every step came from measured tables)."""
    steps = workload.output.mean - 1
    if steps <= 0:  # one output token: the prefill pool alone would serve it
        return [], 0, True
    found = [engine_layout(ExpertShard(spec, tp, ep, dtype, widths, kernels, mla, engine.cache_read,
                                       engine.kernel_framework, redundant=redundant),
                           cluster, workload, engine, tokens, batches)
             for size in engine_sizes(cluster, gpus) for tp, ep in layouts(spec, cluster, size, redundant)[0]
             if tp * ep == size]
    hw = cluster.hardware
    prefills = [p for lay in found for b in tokens
                if (p := prefill_side(lay, cluster, gpus, b, workload, engine)).memory.fits]
    decodes = []
    for lay in found:
        for b in batches:
            mem = engine_memory(lay.shard, hw.memory_bytes,
                                replace(engine, max_batch=b, max_tokens=b), workload, lay.weights_and_page)
            if mem.fits:
                decodes.append((lay, b, mem))
    rows: list[Disaggregated] = []
    for lay in found:
        mine = [(b, m) for d, b, m in decodes if d is lay]
        if mine:
            rows += _pairs(lay, mine, prefills, gpus, workload, targets, price, steps, link_of(cluster, gpus))
    calibrated = all(lay.times.calibrated for lay in found)
    return rows, len(rows), calibrated


def _pairs(lay: EngineLayout, mine: list[tuple[int, EngineMemory]], prefills: list[PrefillSide], gpus: int,
           workload: Workload, targets: Targets, price: float | None, steps: float,
           link: str) -> list[Disaggregated]:
    """Every split of the GPUs between prefill engines and decode engines of layout `lay`, each max
    batch of `mine`, in arrays: the steady state of each (module docstring)."""
    g_d = lay.gpus
    combos = []  # (prefill side, x engines, y engines, max batch index)
    for p in prefills:
        g_p = p.layout.gpus
        for n_p in range(1, gpus // g_p + 1):
            rest = gpus - n_p * g_p
            if rest > 0 and rest % g_d == 0:
                combos += [(p, n_p, rest // g_d, i) for i in range(len(mine))]
    if not combos:
        return []
    ep_d = lay.shard.ep
    y = np.array([c[2] for c in combos], dtype=float) * ep_d  # decode attention replicas
    x = np.array([c[1] * c[0].layout.shard.ep for c in combos], dtype=float)  # prefill ones
    b = np.array([mine[c[3]][0] for c in combos], dtype=float)
    cap = np.minimum(b, [mine[c[3]][1].max_running for c in combos])
    mu = np.array([c[0].capacity for c in combos])
    xfer = np.array([c[0].transfer_mean for c in combos])
    own = np.array([c[0].own_mean for c in combos])
    prefill_rate = x * mu
    link_rate = x / xfer
    supply = np.minimum(prefill_rate, link_rate)
    times = lay.times
    if workload.rate is not None:
        rate = np.full(len(combos), workload.rate)
        c, tpot, settled = _decoders(times, rate / y, steps, cap)
        rho = rate / prefill_rate
        stable = settled & (rho < 1) & (rate < link_rate)
        queue = np.zeros(len(combos))
        bound = np.full(len(combos), "arrivals")
    else:
        offered = np.full(len(combos), float(workload.concurrency)) if workload.concurrency else y * b
        c = np.minimum(offered / y, cap)
        tpot = _tpot(times, c)
        decode_rate = y * c / (steps * tpot)
        short = supply < decode_rate
        c_short, tpot_short, _ = _decoders(times, supply / y, steps, c)
        c, tpot = np.where(short, c_short, c), np.where(short, tpot_short, tpot)
        rate = np.where(short, supply, decode_rate)
        rho = np.where(short, 0.0, rate / prefill_rate)
        queue = np.maximum(offered - y * c - rate * (own + xfer), 0.0) / rate
        stable = np.ones(len(combos), dtype=bool)
        bound = np.where(short, np.where(link_rate < prefill_rate, "transfer", "prefill"), "decode")
    service = 1 / mu
    md1 = np.where(rho < 1, rho * service / (2 * np.maximum(1 - rho, 1e-12)), np.inf)
    wait = queue + np.where(rho > 0, md1, 0.0)
    out = []
    q = targets.percentile
    for j, (p, xe, ye, i) in enumerate(combos):
        ok = bool(stable[j]) and math.isfinite(wait[j])
        inf = math.inf
        ttft = {k: float(p.own[k] + p.transfer[k] + wait[j]) if ok else inf for k in PERCENTILES}
        tp_j = float(tpot[j])
        per_gpu = float(rate[j]) * workload.output.mean / gpus if ok else 0.0
        meets = ok and (targets.ttft is None or ttft[q] <= targets.ttft) and (
            targets.tpot is None or tp_j <= targets.tpot)
        cost = price / 3600 / per_gpu * 1e6 if price is not None and per_gpu > 0 else None
        pre = Pool("prefill", p.layout.shard.tp, p.layout.shard.ep, xe, max(1, math.ceil(p.budget / max(
            workload.prompt.mean, 1.0))), p.budget, p.memory, p.layout.shard.placement)
        dec = Pool("decode", lay.shard.tp, ep_d, ye, mine[i][0], mine[i][0], mine[i][1], lay.shard.placement)
        out.append(Disaggregated(pre, dec, float(c[j]), ttft, dict.fromkeys(PERCENTILES, tp_j),
                                 float(p.own_mean + p.transfer_mean + wait[j]) if ok else inf, tp_j, per_gpu,
                                 1 / tp_j, ok, float(rate[j]), p.transfer_mean, link, str(bound[j]), meets,
                                 cost))
    return out


def search_all(spec: Spec, cluster: Cluster, gpus: int, workload: Workload, engine: Engine = ENGINE,
               batches: tuple[int, ...] = DEFAULT_BATCHES, tokens: tuple[int, ...] = DEFAULT_TOKENS,
               targets: Targets = ANY, dtype: str = "bf16", widths: Widths = Widths(),
               kernels: Kernels | None = None, mla: str | None = None, price: float | None = None,
               redundant: int = 0) -> Search:
    """The aggregated deployments of ``deploy.search`` and every disaggregated xPyD one beside
    them, in one ranking and one Pareto front (module docstring)."""
    import time

    start = time.perf_counter()
    agg = search(spec, cluster, gpus, workload, engine, batches, tokens, targets, dtype, widths, kernels, mla,
                 price, redundant)
    rows, n, calibrated = search_disaggregated(spec, cluster, gpus, workload, engine, batches, tokens,
                                               targets, dtype, widths, agg.kernels, agg.mla, price, redundant)
    both: list[Ranked] = [*agg.deployments, *rows]
    notes = (*agg.notes, "disaggregated: TTFT = prefill + its queue + the KV transfer "
             f"({link_of(cluster, gpus)}); TPOT: decode steps with no prefill chunk beside")
    return replace(agg, deployments=rank(both), front=pareto(both), evaluated=agg.evaluated + n,
                   calibrated=agg.calibrated and calibrated, seconds=time.perf_counter() - start, notes=notes,
                   modes=("aggregated", "disaggregated"))
