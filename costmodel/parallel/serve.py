"""Decode at scale: one output token per sequence on TP (and EP) ranks, and what crosses the wire.

Per decode step, a TP rank runs the spec's shard (``step.shard_spec``) over its new tokens
against C cached ones, then all-reduces the attention and FFN outputs of every layer: 2
all-reduces of B x d elements per layer (Shoeybi et al. 2019), which at decode sizes are
latency-bound.

Expert parallelism (GShard, Lepikhin et al. 2020; as DeepSeek-V3 is served, DeepSeek-AI 2024,
section 3.4, with the attention data-parallel): the TP x EP GPUs are EP attention replicas of
TP ranks each, and the E routed experts are split over the EP ranks. Each replica decodes B/EP
of the B sequences; in a sparse layer every rank sends each of its tokens' top_k copies to
the ranks holding those experts (the dispatch all-to-all, top_k x B/EP x d elements, (EP-1)/EP
of it off the GPU with the experts spread evenly) and gets the expert outputs back (the
combine, the same again). Each rank's experts see B x top_k / EP token copies; the shard is
analysed with E/EP experts and B/EP tokens of top_k picks each, which reads the local experts a
uniform router touches (1 - top_k EP/E)^(B/EP) in place of (1 - top_k/E)^B for an idle expert:
equal to first order in top_k/E. Wide EP (E/EP below top_k: DeepSeek-V3's 256 experts on 64
ranks, Mixtral's 8 on 8) is served as deployed: a token's top_k copies go to several ranks; the
shard then reads all E/EP of its experts where a uniform router over the whole batch reads
E/EP (1 - (1 - top_k/E)^B) on average: an upper bound (deepseek-v3, EP 64, B 64: 4 where 3.48).
The shared experts and the dense layers run on every replica
for its own tokens. A dispatch of each token once per destination rank (DeepEP) or a router
limited to a few groups of experts would send less; not modelled. Nothing overlaps:

    TPOT = compute of one rank's shard + L x (2 all-reduce) + L_moe x (2 all-to-all)

Memory per GPU: the shard's weights (its E/EP experts) and the KV cache of its B/EP sequences
(key/value heads split over TP, or one per rank when there are fewer heads than ranks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costmodel.analysis import analyze, require_decode
from costmodel.components.key import Role
from costmodel.devices.kernels import ErrorBand, Reads
from costmodel.parallel import device
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import Collective, collective
from costmodel.parallel.collectives import reads as collective_reads
from costmodel.parallel.layout import Layout, LayoutError, check, experts
from costmodel.parallel.shard import shard_spec
from costmodel.precision import Widths, weight_bytes_of
from costmodel.runtime.kernels import KERNELS, default_kernels, default_mla, is_default
from costmodel.runtime.kernels import to_dict as kernels_dict
from costmodel.runtime.timing import Kernels
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES


@dataclass(frozen=True)
class Decode:
    spec: Spec
    cluster: Cluster
    tp: int
    ep: int
    batch: int
    context: int
    dtype: str
    compute_s: float
    calls: tuple[tuple[Collective, int], ...]  # (call, calls per token step)
    weights_bytes: float  # per GPU
    kv_cache_bytes: float  # per GPU
    widths: Widths = Widths()  # the weights' and the cache's (costmodel.precision)
    kernels: Kernels = KERNELS["flash"]  # what the compute assumes (runtime.kernels)
    mla: str = "naive"  # the convention latent attention runs in (components.mla)
    compute_reads: Reads = Reads()  # what the compute read of the measured kernel tables

    @property
    def reads(self) -> Reads:
        """What the step's time read of the device's measured tables, compute and collectives
        (``devices.kernels.Reads``): the error bands and the op classes extrapolated."""
        return Reads.union([self.compute_reads, collective_reads(self.cluster, (c for c, _ in self.calls))])

    @property
    def errors(self) -> Mapping[str, tuple[ErrorBand, ...]]:
        return self.reads.errors

    @property
    def extrapolated(self) -> tuple[str, ...]:
        return self.reads.extrapolated

    @property
    def comm_s(self) -> float:
        return sum(c.time_s * n for c, n in self.calls)

    @property
    def comm_bytes(self) -> float:
        """Bytes each GPU sends per decode step."""
        return sum(c.bytes_sent * n for c, n in self.calls)

    @property
    def tpot_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second across the batch (one replica of TP x EP GPUs)."""
        return self.batch / self.tpot_s

    @property
    def memory_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.cluster.hardware.memory_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name, "cluster": self.cluster.name, "tp": self.tp, "ep": self.ep,
            "gpus": self.tp * self.ep, "batch": self.batch, "context": self.context, "dtype": self.dtype,
            "weights_dtype": self.widths.weights or self.dtype, "kv_dtype": self.widths.kv or self.dtype,
            "kernels": kernels_dict(self.kernels, is_default(self.kernels, self.cluster.hardware)),
            **({"mla_convention": self.mla} if self.spec.mla is not None else {}),
            "tpot_s": self.tpot_s, "compute_s": self.compute_s, "comm_s": self.comm_s,
            "comm_bytes_per_gpu": self.comm_bytes, "tokens_per_s": self.tokens_per_s,
            "comm": {"by_collective": {f"{c.group}/{c.kind}": {"calls": n, "bytes_sent": n * c.bytes_sent,
                                                                "time_s": n * c.time_s, "ranks": c.ranks,
                                                                "link": c.link, "basis": c.basis}
                                       for c, n in self.calls}},
            "memory": {"per_gpu": {"weights": int(self.weights_bytes), "kv_cache": int(self.kv_cache_bytes),
                                   "total": int(self.memory_bytes)},
                       "device_bytes": int(self.cluster.hardware.memory_bytes)},
            "fits": self.fits, **self.reads.to_dict(),
        }


def moe_layers(spec: Spec) -> int:
    """Sparse layers of a mixture-of-experts spec, by the spec's own rule (``MoEFFN.sparse_count``:
    first_k_dense, moe_every or the listed moe_layers), the one ``analyze`` counts by."""
    moe = spec.moe
    return moe.sparse_count(spec.decoder_layers) if moe is not None else 0


def router_bytes(params: int, widths: Widths, dtype: str) -> int:
    """Bytes of `params` router weights (all matrix) as the shard's own router holds them:
    ``precision``'s rule (an FP8 checkpoint keeps its routers in bf16)."""
    return weight_bytes_of(params, params, widths.weights or dtype, DTYPE_BYTES[dtype], widths.group_size,
                           router=True)


def decode(spec: Spec, cluster: Cluster, tp: int, batch: int, context: int, ep: int = 1,
           dtype: str = "bf16", mla: str | None = None, widths: Widths = Widths(),
           kernels: Kernels | None = None) -> Decode:
    """One decode step of `batch` sequences with `context` tokens cached, on TP x EP GPUs
    (`mla`: how latent attention runs, ``analyze``'s convention; weights and cache at `widths`,
    ``costmodel.precision``; `kernels`: what the compute assumes). Without `mla` or `kernels`,
    what the cluster's GPUs run (``runtime.kernels``: absorbed latent attention, flash)."""
    require_decode(spec, "serving on TP/EP")
    if batch < 1 or context < 1:
        raise LayoutError(f"--batch and --seq: must be at least 1 (got {batch}, {context})")
    if ep < 1:  # the layout below puts EP in DP's place, whose message would name --dp
        raise LayoutError(f"--ep: must be at least 1 (got {ep})")
    moe = experts(spec)
    if moe and ep > 1 and moe[0] % ep:  # wide EP's uneven placement is deploy's (deploy.experts)
        raise LayoutError(f"--ep: {ep} does not divide the {moe[0]} experts of {spec.name}; `costmodel "
                          "deploy` serves an EP that does not (its fullest rank sets the step)")
    check(Layout(global_batch=ep, tp=tp, dp=ep, ep=ep), spec)
    shard = shard_spec(spec, tp)
    local = batch
    if moe and ep > 1:
        if batch % ep:
            raise LayoutError(f"--batch: {batch} sequences do not split over the {ep} expert-parallel "
                              "attention replicas")
        local = batch // ep
        shard = shard.model_copy(update={"ffn": shard.ffn.model_copy(update={"n_experts": moe[0] // ep})})
    hw = cluster.hardware
    hw.peak(dtype)
    kernels = kernels if kernels is not None else KERNELS[default_kernels(hw, "serve")]
    mla = mla if mla is not None else default_mla(hw)
    a = analyze(shard, "decode", batch=local, seq=context, dtype=dtype, mla=mla, **widths.options())
    secs, reads = device.component_times(a, hw, kernels)
    p = DTYPE_BYTES[dtype]
    replicated = 0  # bytes of the routers' other (EP - 1) / EP, held on every replica
    if local != batch:
        # Every replica scores its tokens against all E experts: the router and the top-k over
        # E/EP experts in the shard cost EP times that (linear in the number of experts).
        for r in a.rows:
            if r.key.role is Role.router:
                secs[r.key] = secs.get(r.key, 0.0) * ep
                replicated += router_bytes(r.params, widths, dtype) * (ep - 1)
    compute = sum(secs.values())
    x = local * spec.d_model * p
    L = spec.n_layers or 0
    calls: list[tuple[Collective, int]] = [(collective(cluster, "all_reduce", "tp", tp, x), 2 * L)]
    weights = a.bytes_weights + replicated
    if moe and ep > 1:
        calls.append((collective(cluster, "all_to_all", "ep", ep, moe[1] * x, stride=tp),
                      2 * moe_layers(spec)))
    return Decode(spec, cluster, tp, ep, batch, context, dtype, compute, tuple(calls), weights,
                  a.total().kv_cache, widths, kernels, mla, reads)
