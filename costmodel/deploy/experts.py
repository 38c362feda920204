"""Wide expert parallelism as deployed: EP that does not divide the experts, redundant experts,
EP across nodes and racks, and the attention data-parallel across the EP ranks.

**Placement** (``Placement``). E routed experts and R redundant ones (replicas of the hottest
experts, DeepSeek's Expert Parallelism Load Balancer, EPLB: github.com/deepseek-ai/EPLB; the
DeepSeek-V3 technical report, arXiv:2412.19437, section 3.4: "redundant experts ... duplicate
high-load experts and deploy them redundantly") fill E + R slots over EP ranks. A rank holds
ceil((E + R) / EP) or floor((E + R) / EP) of them; the slowest rank, holding the most, sets the
step (every rank waits for it at the combine all-to-all). With the router's load spread evenly
over the slots (what EPLB places replicas for: a hot expert's load split over its copies), the
slowest rank's share of the routed token copies is ceil((E + R) / EP) / (E + R), ``load`` times
the mean 1 / EP. Deployments this follows:

- DeepSeek's own (open-infra-index, 2025-02, "Day 6: DeepSeek-V3/R1 Inference System
  Overview"): prefill EP32 over 4 nodes with 32 redundant experts, 9 routed experts per GPU
  ((256 + 32) / 32); decode EP144 over 18 nodes with 32 redundant, 2 per GPU ((256 + 32) / 144).
- SGLang's (LMSYS blog, 2025-05-05, "Deploying DeepSeek with PD Disaggregation and Large-scale
  Expert Parallelism on 96 H100 GPUs"): prefill EP32 on 4 nodes, decode EP72 on 9 nodes; "with
  the original 256 experts, parallelism sizes are restricted to powers of two. EPLB's use of 288
  experts enables ... parallelism sizes of 12 or 72."
- 72 GPUs of one GB200 NVL72 rack over 256 experts: 4 on 40 ranks and 3 on 32 without
  redundancy (load 4 x 72 / 256 = 1.125: the slowest rank 12.5% above the mean); with 32
  redundant, 4 on every rank (load 1).

A uniform router is assumed: the imbalance a real router's skew leaves (the blog's
"balancedness", which EPLB raises but never to 1) is not modelled, so redundant experts here
only even out the uneven split; their cost is the memory of the extra slots.

**The step** on the slowest rank (``step_times``): its shard holds ceil((E + R) / EP) experts
(its weights, in memory and read once a step); its routed experts run ``load`` x the mean
token copies (their time at load x T tokens); it receives ``load`` x the mean dispatch and
sends as much back at the combine (the all-to-all of ``load`` x top_k x T x d). The all-to-all
runs over the link the EP group spans (``collectives.collective``: NVLink inside a node or an
NVL72 rack, the network across nodes), as ``parallel.serve`` counts it.

**DP attention**: the TP x EP GPUs of a layout are EP attention replicas of TP ranks each
(``parallel.serve``'s model, as DeepSeek-V3 and SGLang's ``--enable-dp-attention`` serve): TP1
x EP is pure data-parallel attention, the experts split over all EP ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from costmodel.components.key import Key
from costmodel.deploy.step import Shard, StepTimes, _times
from costmodel.deploy.step import step_times as _step_times
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import collective
from costmodel.parallel.layout import Layout, LayoutError, check, experts
from costmodel.parallel.serve import moe_layers
from costmodel.parallel.shard import shard_spec
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES

MAX_REDUNDANT = 1 << 16


@dataclass(frozen=True)
class Placement:
    """E routed experts and R redundant copies over EP ranks (module docstring)."""

    experts: int
    ep: int
    redundant: int = 0

    @property
    def slots(self) -> int:
        return self.experts + self.redundant

    @property
    def per_rank(self) -> int:
        """Expert slots on the fullest rank: its weights, and what it reads."""
        return -(-self.slots // self.ep)

    @property
    def load(self) -> float:
        """The fullest rank's routed token copies over the mean (1 when the slots split evenly)."""
        return self.per_rank * self.ep / self.slots

    @property
    def even(self) -> bool:
        return self.slots % self.ep == 0

    def to_dict(self) -> dict[str, Any]:
        return {"routed_experts": self.experts, "redundant_experts": self.redundant, "ep": self.ep,
                "experts_per_gpu_max": self.per_rank, "experts_per_gpu_min": self.slots // self.ep,
                "load_of_slowest_rank": self.load}


def check_redundant(spec: Spec, redundant: int) -> None:
    """One line naming ``--redundant-experts`` for a count `spec` cannot take."""
    if not 0 <= redundant <= MAX_REDUNDANT:
        raise AnalysisError(f"--redundant-experts: must be at least 0 (got {redundant})")
    if redundant and not experts(spec):
        raise AnalysisError(f"--redundant-experts: {spec.name} has no routed experts to replicate")


@dataclass(frozen=True)
class ExpertShard(Shard):
    """One GPU of the slowest EP rank: the TP shard holding ceil((E + R) / EP) expert slots."""

    redundant: int = 0

    @property
    def placement(self) -> Placement | None:
        moe = experts(self.spec)
        return Placement(moe[0], self.ep, self.redundant) if moe and self.ep > 1 else None

    @property
    def local(self) -> Spec:
        s = shard_spec(self.spec, self.tp)
        p = self.placement
        if p is not None:
            s = s.model_copy(update={"ffn": s.ffn.model_copy(update={"n_experts": p.per_rank})})
        return s


def _routed(key: Key) -> bool:
    return key.routed_expert


def step_times(shard: Shard, cluster: Cluster, top: int, context: float, prompts: np.ndarray,
               exact: tuple[float, ...] = ()) -> StepTimes:
    """``deploy.step.step_times`` on the slowest EP rank (module docstring): where the slots do
    not split evenly, its routed experts at ``load`` x the tokens and its all-to-alls ``load``
    x as large."""
    t = _step_times(shard, cluster, top, context, prompts, exact)
    p = shard.placement if isinstance(shard, ExpertShard) else None
    if p is None or p.load == 1.0:
        return t
    tokens = t.grid[1:]
    one = np.ones(1)
    mean = _times(shard, cluster, "prefill", one, tokens, _routed)
    slow = _times(shard, cluster, "prefill", one, np.round(tokens * p.load), _routed)
    body = t.body + np.concatenate([[0.0], np.ravel(slow - mean)])
    return replace(t, body=body, comm=t.comm + (p.load - 1) * _all_to_alls(shard, cluster, t.grid))


def _all_to_alls(shard: Shard, cluster: Cluster, grid: np.ndarray) -> np.ndarray:
    """Seconds of a step's dispatch and combine at each token count (``step.comm_times``' EP part)."""
    moe = experts(shard.spec)
    assert moe
    width = shard.spec.d_model * DTYPE_BYTES[shard.dtype]
    return np.array([2 * moe_layers(shard.spec) * collective(cluster, "all_to_all", "ep", shard.ep,
                                                             moe[1] * t * width, stride=shard.tp).time_s
                     if t > 0 else 0.0 for t in grid])


def layouts(spec: Spec, cluster: Cluster, gpus: int, redundant: int = 0
            ) -> tuple[list[tuple[int, int]], list[str]]:
    """(tp, ep) of every replica layout of `gpus` GPUs: TP a divisor of the node's GPUs that
    the spec's heads and FFN split by; for a mixture of experts every EP with TP x EP dividing
    `gpus` and at most one rank per expert slot (E + R), evenly or not; and why others cannot run."""
    moe = experts(spec)
    g = cluster.gpus_per_node
    out, skipped = [], []
    for tp in range(1, min(g, gpus) + 1):
        if g % tp or gpus % tp:
            continue
        try:
            check(Layout(global_batch=1, tp=tp), spec)
        except LayoutError as e:
            skipped.append(f"TP{tp}: {e}")
            continue
        slots = moe[0] + redundant if moe else 1
        out += [(tp, ep) for ep in range(1, min(gpus // tp, slots) + 1) if (gpus // tp) % ep == 0]
    return out, skipped


def label(tp: int, ep: int) -> str:
    return f"TP{tp}" + (f" EP{ep}" if ep > 1 else "")

