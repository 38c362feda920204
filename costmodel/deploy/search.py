"""Every aggregated deployment of N GPUs, ranked under latency targets.

A deployment is a parallel layout of one replica, how many replicas, and the engine's settings:

- **TP** within a node (a divisor of the GPUs per node that the spec's heads and FFN split by;
  ``parallel.layout.check``); **EP** for a mixture-of-experts spec, dividing the routed experts
  or not (wide EP: ``deploy.experts``, the slowest rank holding ceil((E + R) / EP) of E experts
  and R redundant ones); the TP x EP GPUs are EP attention replicas of TP ranks each (DP
  attention, as ``parallel.serve`` decodes them); **replicas** = N / (TP x EP), each serving its
  share of the requests (data parallel). Disaggregated prefill and decode pools beside these:
  ``deploy.disagg``. Pipeline parallelism is not searched (docs/serving.md, "What is left").
- the engine's **max batch** (``--batch``, a list) and **token budget** (``--max-num-tokens``,
  a list), each pair with max batch <= budget.

Each is timed in its steady state (``deploy.engine``); those whose weights and activations leave
no page for one request do not fit and are dropped. The **targets** (``--ttft``, ``--tpot``)
are met at a percentile (``--percentile``, default p90: nine requests in ten see a time at or
below it). Deployments meeting them are ranked by output tokens/s per GPU; the **Pareto front**
is of output tokens/s per GPU against tokens/s per user (1 / mean TPOT, aiconfigurator's
axis): no other deployment is better on both. The **cost** of a million output tokens at
``--price`` dollars per GPU-hour is price / 3600 / (tokens/s per GPU) x 10^6. When none meets
the targets the closest are those with the least max(TTFT / target, TPOT / target).

Vectorised: one step-time table per parallel layout (``deploy.step``: a few array calls of the
time model), then every engine setting of that layout in a few numpy passes
(bench/deploy_speed.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from costmodel.analysis import require_decode
from costmodel.deploy import DEFAULT_BATCHES, DEFAULT_TOKENS
from costmodel.deploy.engine import (
    PERCENTILES,
    Engine,
    EngineMemory,
    Loop,
    closed_loop,
    decode_context,
    engine_memory,
    held,
    open_loop,
    shape_of,
)
from costmodel.deploy.experts import ExpertShard, Placement, check_redundant, step_times
from costmodel.deploy.experts import label as layout_label
from costmodel.deploy.experts import layouts as expert_layouts
from costmodel.deploy.step import step_reads
from costmodel.deploy.workload import Workload
from costmodel.devices.kernels import Reads
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import Cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS, default_kernels, default_mla
from costmodel.runtime.timing import Kernels
from costmodel.spec import Spec

ENGINE = Engine()  # vLLM's defaults (deploy.engine)
SHOWN = 10  # ranked deployments a table shows (JSON has them all)


@dataclass(frozen=True)
class Targets:
    ttft: float | None = None  # seconds
    tpot: float | None = None
    percentile: int = 90

    def check(self) -> None:
        for name, v in (("--ttft", self.ttft), ("--tpot", self.tpot)):
            if v is not None and not (math.isfinite(v) and 0 < v <= 1e6):
                raise AnalysisError(f"{name}: must be a finite number of seconds above 0 (got {v:g})")
        if self.percentile not in PERCENTILES:
            raise AnalysisError(f"--percentile: one of {', '.join(map(str, PERCENTILES))} "
                                f"(got {self.percentile})")

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_s": self.ttft, "tpot_s": self.tpot, "percentile": self.percentile}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def served(d: Any) -> dict[str, Any]:
    """What a deployment serves, in JSON (aggregated or disaggregated alike): its latencies at each
    percentile and mean, tokens/s per GPU and per user, the cost (None where overloaded)."""
    return {
        "ttft_s": {f"p{q}": _num(v) for q, v in d.ttft.items()} | {"mean": _num(d.ttft_mean)},
        "tpot_s": {f"p{q}": _num(v) for q, v in d.tpot.items()} | {"mean": _num(d.tpot_mean)},
        "output_tokens_per_s_per_gpu": _num(d.tokens_per_s_per_gpu),
        "output_tokens_per_s_per_user": _num(d.tokens_per_s_per_user),
        "cost_per_million_output_tokens": d.cost_per_million,
    }


class Ranked(Protocol):
    """What the ranking, the front and the tables read of a deployment: aggregated
    (``Deployment``) or disaggregated (``deploy.disagg.Disaggregated``)."""

    @property
    def mode(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def running(self) -> float: ...
    @property
    def ttft(self) -> dict[int, float]: ...
    @property
    def tpot(self) -> dict[int, float]: ...
    @property
    def tokens_per_s_per_gpu(self) -> float: ...
    @property
    def tokens_per_s_per_user(self) -> float: ...
    @property
    def stable(self) -> bool: ...
    @property
    def meets(self) -> bool: ...
    @property
    def cost_per_million(self) -> float | None: ...
    def engines(self) -> tuple[tuple[int, int, int, int], ...]: ...
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Deployment:
    """One deployment in its steady state (times in seconds; per GPU and per user in tokens/s)."""

    tp: int
    ep: int
    replicas: int
    max_batch: int
    max_tokens: int
    concurrency: float  # requests in flight per engine (attention replica), running and queued
    running: float
    memory: EngineMemory  # per GPU
    ttft: dict[int, float]
    tpot: dict[int, float]
    ttft_mean: float
    tpot_mean: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    stable: bool
    meets: bool = False
    cost_per_million: float | None = None
    placement: Placement | None = None  # the experts over the EP ranks (``deploy.experts``)

    @property
    def mode(self) -> str:
        return "aggregated"

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.ep

    @property
    def label(self) -> str:
        return layout_label(self.tp, self.ep) + f" x{self.replicas}"

    def engines(self) -> tuple[tuple[int, int, int, int], ...]:
        """(TP, EP, tokens a step, decoders a step) of each engine kind: what its reads are of."""
        return ((self.tp, self.ep, self.max_tokens, max(1, round(self.running))),)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "tp": self.tp, "ep": self.ep, "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "max_batch": self.max_batch, "max_num_tokens": self.max_tokens,
            "concurrency_per_engine": self.concurrency, "running_per_engine": self.running,
            "stable": self.stable, "meets_targets": self.meets,
            **served(self),
            "memory_per_gpu": self.memory.to_dict(),
            **({"experts": self.placement.to_dict()} if self.placement is not None else {}),
        }


@dataclass(frozen=True)
class Search:
    spec: Spec
    cluster: Cluster
    gpus: int
    workload: Workload
    engine: Engine  # its block, memory fraction and prefix sharing (max batch and budget: each row's)
    targets: Targets
    dtype: str
    widths: Widths
    kernels: Kernels
    mla: str
    deployments: tuple[Ranked, ...]  # every one that fits, best first
    front: tuple[Ranked, ...]  # the Pareto front, most tokens/s per GPU first
    layouts: tuple[str, ...]  # the parallel layouts tried
    skipped: tuple[str, ...]  # layouts that cannot run, and why
    evaluated: int  # deployments timed (fitting or not)
    calibrated: bool
    price: float | None = None
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    redundant: int = 0  # redundant experts (``deploy.experts``)
    modes: tuple[str, ...] = ("aggregated",)  # what was searched: aggregated, disaggregated

    @property
    def meeting(self) -> tuple[Ranked, ...]:
        return tuple(d for d in self.deployments if d.meets)

    @property
    def shown(self) -> tuple[Ranked, ...]:
        """What a table shows: the best `SHOWN` meeting the targets, else the closest."""
        return self.meeting[:SHOWN] if self.meeting else self.closest()

    def reads(self) -> Reads:
        """What the times of the deployments shown read of the device's measured tables
        (``deploy.step.step_reads``): each engine layout once, at the most tokens and decoders a
        step of it holds among them. Worked out when shown, never during the search."""
        most: dict[tuple[int, int], tuple[int, int]] = {}
        for d in self.shown:
            for tp, ep, tokens, decoders in d.engines():
                old = most.get((tp, ep), (0, 0))
                most[(tp, ep)] = (max(old[0], tokens), max(old[1], decoders))
        context, prompt = decode_context(self.workload), self.workload.prompt.mean
        return Reads.union(
            step_reads(ExpertShard(self.spec, tp, ep, self.dtype, self.widths, self.kernels, self.mla,
                                   self.engine.cache_read, self.engine.kernel_framework,
                                   redundant=self.redundant),
                       self.cluster, tokens, decoders, context, prompt)
            for (tp, ep), (tokens, decoders) in most.items())

    def closest(self, n: int = 5) -> tuple[Ranked, ...]:
        """The deployments nearest the targets: the least max(TTFT / target, TPOT / target)."""
        q, t = self.targets.percentile, self.targets
        def gap(d: Ranked) -> float:
            parts = [d.ttft[q] / t.ttft if t.ttft else 0.0, d.tpot[q] / t.tpot if t.tpot else 0.0]
            return max(parts) if d.stable else math.inf
        return tuple(sorted(self.deployments, key=gap)[:n])

    def unmet(self) -> str | None:
        """Why no deployment can serve as asked (one line), None when one can."""
        if not self.deployments:
            return (f"{self.spec.name} fits in no deployment of {self.gpus} {self.cluster.hardware.name} "
                    f"GPUs at these engine settings")
        if not self.meeting:
            q = self.targets.percentile
            t = self.targets
            want = [f"{name} p{q} <= {v:g} s" for name, v in (("TTFT", t.ttft), ("TPOT", t.tpot))
                    if v is not None]
            return f"no deployment meets {' and '.join(want) or 'the targets'}; the closest are shown"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name, "cluster": self.cluster.name, "hardware": self.cluster.hardware.name,
            "gpus": self.gpus, "dtype": self.dtype, "weights_dtype": self.widths.weights or self.dtype,
            "kv_dtype": self.widths.kv or self.dtype, "kernels": self.kernels.to_dict(),
            **({"mla_convention": self.mla} if self.spec.mla is not None else {}),
            "calibrated": self.calibrated, "workload": self.workload.to_dict(),
            # the engine's settings but each row's max batch and budget
            "engine": {k: v for k, v in self.engine.to_dict().items()
                       if k not in ("max_batch", "max_num_tokens")},
            "targets": self.targets.to_dict(), "price_per_gpu_hour": self.price,
            "modes": list(self.modes), "redundant_experts": self.redundant,
            "layouts": list(self.layouts), "skipped": list(self.skipped),
            "evaluated": self.evaluated, "fitting": len(self.deployments), "meeting": len(self.meeting),
            "ranked": [d.to_dict() for d in self.meeting],
            "front": [d.to_dict() for d in self.front],
            "closest": [d.to_dict() for d in self.closest()] if not self.meeting else [],
            "notes": list(self.notes), **self.reads().to_dict(),
        }


def layouts(spec: Spec, cluster: Cluster, gpus: int, redundant: int = 0
            ) -> tuple[list[tuple[int, int]], list[str]]:
    """(tp, ep) of every replica layout of `gpus` GPUs (``deploy.experts.layouts``: EP dividing
    the experts or not), and why others cannot run."""
    return expert_layouts(spec, cluster, gpus, redundant)


def search(spec: Spec, cluster: Cluster, gpus: int, workload: Workload, engine: Engine = ENGINE,
           batches: tuple[int, ...] = DEFAULT_BATCHES, tokens: tuple[int, ...] = DEFAULT_TOKENS,
           targets: Targets = Targets(), dtype: str = "bf16", widths: Widths = Widths(),
           kernels: Kernels | None = None, mla: str | None = None, price: float | None = None,
           redundant: int = 0) -> Search:
    """Every aggregated deployment of `gpus` GPUs of `cluster` serving `workload`, in its steady
    state, ranked under `targets` (module docstring); `redundant` expert slots beside the routed
    experts on the EP ranks (``deploy.experts``)."""
    require_decode(spec, "a deployment")
    import time

    start = time.perf_counter()
    if not 1 <= gpus <= 1 << 20:
        raise AnalysisError(f"--gpus: must be at least 1 (got {gpus})")
    if price is not None and not (math.isfinite(price) and 0 < price <= 1e6):
        raise AnalysisError(f"--price: must be a finite number of dollars per GPU-hour above 0 "
                            f"(got {price:g})")
    workload.check(spec)
    check_redundant(spec, redundant)
    engine.check()
    targets.check()
    widths.check()
    for b in batches:
        replace(engine, max_batch=b, max_tokens=max(tokens)).check()
    for t in tokens:
        replace(engine, max_batch=1, max_tokens=t).check()
    hw = cluster.hardware
    hw.peak(dtype)
    kernels = kernels if kernels is not None else KERNELS[default_kernels(hw, "serve")]
    mla = mla if mla is not None else default_mla(hw)
    found, skipped = layouts(spec, cluster, gpus, redundant)
    if not found:
        raise AnalysisError(f"--gpus: no TP/EP layout of {gpus} GPUs runs {spec.name} on {cluster.name}"
                            + (f" ({skipped[0]})" if skipped else ""))
    rows: list[Deployment] = []
    evaluated = 0
    calibrated = True
    for tp, ep in found:
        shard = ExpertShard(spec, tp, ep, dtype, widths, kernels, mla, engine.cache_read,
                            engine.kernel_framework, redundant=redundant)
        got, n, cal = _layout(shard, cluster, gpus, workload, engine, batches, tokens, targets, price)
        rows += got
        evaluated += n
        calibrated = calibrated and cal
    notes = (f"TTFT and TPOT at p{targets.percentile} for the targets; tokens/s per user = 1 / mean TPOT",)
    return Search(spec, cluster, gpus, workload, engine, targets, dtype, widths, kernels, mla, rank(rows),
                  pareto(rows), tuple(layout_label(t, e) for t, e in found),
                  tuple(skipped), evaluated, calibrated, price, time.perf_counter() - start, notes, redundant)


def rank(rows: Sequence[Ranked]) -> tuple[Ranked, ...]:
    """Those meeting the targets first, then by output tokens/s per GPU (overloaded ones last)."""
    return tuple(sorted(rows, key=lambda d: (not d.meets, -d.tokens_per_s_per_gpu if d.stable else math.inf)))


def _layout(shard: ExpertShard, cluster: Cluster, gpus: int, workload: Workload, engine: Engine,
            batches: tuple[int, ...], tokens: tuple[int, ...], targets: Targets,
            price: float | None) -> tuple[list[Deployment], int, bool]:
    """Every engine setting of one parallel layout: (those that fit, how many tried, calibrated)."""
    pairs = [(b, t) for t in tokens for b in batches if b <= t]
    counted = held(shard, engine.block)
    mems = [engine_memory(shard, cluster.hardware.memory_bytes, replace(engine, max_batch=b, max_tokens=t),
                          workload, counted)
            for b, t in pairs]
    keep = [i for i, m in enumerate(mems) if m.fits]
    if not keep:
        return [], len(pairs), True
    replicas = gpus // (shard.tp * shard.ep)
    engines = replicas * shard.ep  # attention replicas in all
    b = np.array([pairs[i][0] for i in keep], dtype=float)
    budget = np.array([pairs[i][1] for i in keep], dtype=float)
    cap = np.minimum(b, [mems[i].max_running for i in keep])
    w = shape_of(workload, engine)
    s = engine.prefix_sharing
    prompts = np.array([1.0, w.prompt / (1 - s), *(v / (1 - s) for v in w.quantile_prompts.values())])
    prompts = np.concatenate([prompts, prompts * s]) if s else prompts
    exact = (*tokens, *(min(max(p, 1.0), max(tokens)) for p in (w.prompt, *w.quantile_prompts.values())))
    times = step_times(shard, cluster, int(budget.max() + b.max()), decode_context(workload), prompts, exact)
    if workload.rate is not None:
        loop = open_loop(times, np.full(len(keep), workload.rate / engines), cap, budget, w)
        offered = loop.running
    else:
        offered = np.full(len(keep), workload.concurrency / engines) if workload.concurrency else b
        loop = closed_loop(times, offered, cap, budget, w)
    out = [_row(shard, replicas, pairs[i], mems[i], loop, j, offered[j], w.output, targets, price)
           for j, i in enumerate(keep)]
    return out, len(pairs), times.calibrated


def _row(shard: ExpertShard, replicas: int, pair: tuple[int, int], memory: EngineMemory, loop: Loop, j: int,
         offered: float, output: float, targets: Targets, price: float | None) -> Deployment:
    q = targets.percentile
    stable = bool(loop.stable[j])
    inf = math.inf
    ttft = {p: float(v[j]) if stable else inf for p, v in loop.ttft.items()}
    tpot = {p: float(v[j]) if stable else inf for p, v in loop.tpot_at.items()}
    per_gpu = float(loop.requests_per_s[j]) * output / shard.tp
    meets = stable and (targets.ttft is None or ttft[q] <= targets.ttft) and (
        targets.tpot is None or tpot[q] <= targets.tpot)
    cost = price / 3600 / per_gpu * 1e6 if price is not None and per_gpu > 0 else None
    return Deployment(shard.tp, shard.ep, replicas, pair[0], pair[1], float(offered), float(loop.running[j]),
                      memory, ttft, tpot, float(loop.ttft_mean[j]) if stable else inf, float(loop.tpot[j]),
                      per_gpu, 1 / float(loop.tpot[j]), stable, meets, cost, shard.placement)


def pareto(rows: Sequence[Ranked]) -> tuple[Ranked, ...]:
    """The deployments no other beats on both tokens/s per GPU and tokens/s per user, most
    tokens/s per GPU first."""
    front: list[Ranked] = []
    best_user = -math.inf
    for d in sorted((d for d in rows if d.stable), key=lambda d: (-d.tokens_per_s_per_gpu,
                                                                  -d.tokens_per_s_per_user)):
        if d.tokens_per_s_per_user > best_user:
            front.append(d)
            best_user = d.tokens_per_s_per_user
    return tuple(front)
