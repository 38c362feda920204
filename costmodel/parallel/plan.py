"""Search every valid layout of a training step, drop those that do not fit, rank by step time.

The space (for N GPUs, a global batch G, L layers, h heads): TP over the divisors of h within
one node (TP crosses nodes only in a cluster whose NVLink domain is larger), PP over the divisors
of L and of L + 2, each PP > 1 with and without the embedding and head as chunks of their own
(``Layout.edge_chunks``), DP = N / (TP x PP x CP), micro-batches dividing G / DP, interleaving v
over the divisors of the units (L, or L + 2 with edge chunks) / PP (when the micro-batches
divide into PP), recompute none / selective / full, sequence parallelism on and off (with
TP > 1), ZeRO 0-3 (with DP > 1), and for a mixture of experts EP over the divisors of the expert
count that divide DP x CP; an engine (``StepModel.engine``) keeps to what it can run. Each
micro-batch shape (TP, b, CP) is analysed once and shared by every layout using it, so a layout
costs a few arithmetic operations and collective formulas: thousands a second
(bench/plan_speed.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import gcd, isqrt
from typing import Any

from costmodel.parallel.layout import Layout, LayoutError, Recompute, check, experts
from costmodel.parallel.step import Step, StepModel

MAX_MICRO_BATCH = 4096  # sequences per micro-batch tried at most


def divisors(n: int, most: int | None = None) -> list[int]:
    """The divisors of n (at most `most`), ascending, in O(min(sqrt n, most)) steps: a global
    batch of 1e11 is not scanned one by one."""
    top = n if most is None else min(n, most)
    if top <= isqrt(n):
        return [d for d in range(1, top + 1) if n % d == 0]
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    large = [n // d for d in reversed(small) if n // d != d]
    return [d for d in small + large if d <= top]


@dataclass(frozen=True)
class Plan:
    ranked: tuple[Step, ...]  # fitting layouts, fastest first
    considered: int  # valid layouts evaluated
    dropped: int  # valid layouts that do not fit
    unfit: tuple[Step, ...] = ()  # their steps, least memory first, when asked for (``plan(unfit=True)``)

    def best(self) -> Step | None:
        return self.ranked[0] if self.ranked else None


def _pipelines(L: int, gpus: int, tp: int, cp: int, edges: bool) -> list[tuple[int, bool]]:
    """(PP, edge chunks) to try: PP over the divisors of L, and of L + 2 where Megatron-Core's
    edge chunks can run (``Layout.edge_chunks``: Llama 3 405B's 126 layers on PP 16); both
    values of edge chunks for every PP > 1 (at most one stage per layer)."""
    pps = sorted(set(divisors(L)) | (set(divisors(L + 2)) if edges else set()))
    out: list[tuple[int, bool]] = []
    for pp in pps:
        if pp > L or gpus % (tp * pp * cp):
            continue
        out.append((pp, False))
        if edges and pp > 1:
            out.append((pp, True))
    return out


def layouts(model: StepModel, gpus: int, global_batch: int, cps: tuple[int, ...] = (1,),
            max_micro_batch: int = 16, zero: tuple[int, ...] = (0, 1, 2, 3)) -> Iterator[Layout]:
    """Every layout `check` accepts for this spec, GPU count and global batch, within what the
    model's engine can run (``Engine``: interleaving, edge chunks, SP, selective recompute, ZeRO)."""
    spec, eng = model.spec, model.engine
    L = spec.n_layers or 0
    node = model.cluster.gpus_per_node
    moe = experts(spec)
    recomputes = [rc for rc in Recompute if eng is None or eng.selective or rc is not Recompute.selective]
    sps = (False, True) if eng is None or eng.sequence_parallel else (False,)
    interleaves = eng is None or eng.interleave
    for tp in divisors(min(gpus, node)):
        if spec.n_heads % tp or spec.d_ff % tp or (spec.n_kv_heads % tp and tp % spec.n_kv_heads):
            continue
        for cp in cps:
            for pp, edges in _pipelines(L, gpus, tp, cp, eng is None or eng.edge_chunks):
                if eng is not None and not eng.unequal_stages and L % pp:
                    continue
                dp = gpus // (tp * pp * cp)
                if global_batch % dp:
                    continue
                units = L + 2 if edges else L
                eps = divisors(gcd(moe[0], dp * cp)) if moe else [1]
                per_rank = global_batch // dp
                most = zero if eng is None else tuple(z for z in zero
                                                      if z <= (eng.zero_with_pp if pp > 1 else eng.zero))
                for b in divisors(per_rank, max_micro_batch):
                    m = per_rank // b
                    vs = [1] + ([v for v in divisors(units // pp)[1:] if v <= 8]
                                if pp > 1 and m % pp == 0 and units % pp == 0 and interleaves else [])
                    for v in vs:
                        for rc in recomputes:
                            for sp in (sps if tp > 1 else (False,)):
                                for z in (most if dp * cp > 1 else (0,)):
                                    for ep in eps:
                                        yield Layout(global_batch, b, tp, pp, dp, cp, ep, v, sp, rc, z, edges)


def plan(model: StepModel, gpus: int, global_batch: int, top: int | None = None, unfit: bool = False,
         **space: Any) -> Plan:
    """The fitting layouts, fastest first (the `top`); with `unfit`, the steps of those that do
    not fit too (a chart of memory against time draws both), which costs a step each."""
    bad = [cp for cp in space.get("cps", ()) if cp < 1]
    if bad:
        raise LayoutError(f"--cp: context-parallel sizes must be at least 1 (got {bad[0]})")
    if not 1 <= space.get("max_micro_batch", 1) <= MAX_MICRO_BATCH:  # the divisor scan is bounded by it
        raise LayoutError(f"--max-micro-batch: must be 1 to {MAX_MICRO_BATCH:,} "
                          f"(got {space['max_micro_batch']})")
    ranked: list[Step] = []
    over: list[Step] = []
    considered = dropped = 0
    for layout in layouts(model, gpus, global_batch, **space):
        try:
            check(layout, model.spec, gpus, model.seq)
            if model.engine is not None:
                model.engine.check(layout, model.spec)
        except LayoutError:
            continue
        considered += 1
        first, last = model.memory(layout)  # cheaper than the step: most layouts stop here
        if max(first.total, last.total) > model.hw.memory_bytes and not unfit:
            dropped += 1
            continue
        step = model.step(layout, checked=True, memory=(first, last))
        if not step.fits:  # a middle stage holds the most (unequal stages, edge chunks)
            dropped += 1
            over.append(step)
            continue
        ranked.append(step)
    ranked.sort(key=lambda s: s.step_time_s)
    over.sort(key=lambda s: (s.per_gpu.total, s.step_time_s))
    return Plan(tuple(ranked[:top] if top else ranked), considered, dropped, tuple(over) if unfit else ())
