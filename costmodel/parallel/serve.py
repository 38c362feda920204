"""Decode at scale: one output token per sequence on TP (and EP) ranks, and what crosses the wire.

Per decode step, a TP rank runs the spec's shard (``step.shard_spec``) over B new tokens against
C cached ones, then all-reduces the attention and FFN outputs of every layer: 2 all-reduces of
B x d elements per layer (Shoeybi et al. 2019), which at decode sizes are latency-bound. A
mixture-of-experts layer on EP ranks sends each token's top_k copies to the experts' ranks and
back: a dispatch and a combine all-to-all of top_k x B x d elements. Nothing overlaps:

    TPOT = compute of one rank's shard + L x (2 all-reduce) + L_moe x (2 all-to-all)

Memory per GPU: the shard's weights and KV cache (key/value heads split over TP, or one per rank
when there are fewer heads than ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.analysis import analyze
from costmodel.parallel import device
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import Collective, collective
from costmodel.parallel.layout import Layout, LayoutError, check, experts
from costmodel.parallel.step import shard_spec
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
            "tpot_s": self.tpot_s, "compute_s": self.compute_s, "comm_s": self.comm_s,
            "comm_bytes_per_gpu": self.comm_bytes, "tokens_per_s": self.tokens_per_s,
            "comm": {"by_collective": {f"{c.group}/{c.kind}": {"calls": n, "bytes_sent": n * c.bytes_sent,
                                                                "time_s": n * c.time_s, "ranks": c.ranks, "link": c.link}
                                       for c, n in self.calls}},
            "memory": {"per_gpu": {"weights": int(self.weights_bytes), "kv_cache": int(self.kv_cache_bytes),
                                   "total": int(self.memory_bytes)}, "device_bytes": int(self.cluster.hardware.memory_bytes)},
            "fits": self.fits,
        }


def moe_layers(spec: Spec) -> int:
    """Sparse layers of a mixture-of-experts spec (the ``ffn: {kind: moe}`` of SCHEMA.md)."""
    ffn = getattr(spec, "ffn", None)
    if ffn is None or getattr(ffn, "kind", None) != "moe":
        return 0
    L = spec.n_layers or 0
    first, every = int(getattr(ffn, "first_k_dense", 0)), int(getattr(ffn, "moe_every", 1))
    return len([i for i in range(first, L) if (i - first) % every == 0])


def decode(spec: Spec, cluster: Cluster, tp: int, batch: int, context: int, ep: int = 1,
           dtype: str = "bf16") -> Decode:
    """One decode step of `batch` sequences with `context` tokens cached, on TP x EP GPUs."""
    if batch < 1 or context < 1:
        raise LayoutError(f"--batch and --context: must be at least 1 (got {batch}, {context})")
    check(Layout(global_batch=ep, tp=tp, dp=ep, ep=ep), spec)
    hw = cluster.hardware
    hw.peak(dtype)
    a = analyze(shard_spec(spec, tp), "decode", batch=batch, seq=context, dtype=dtype)
    compute = sum(device.component_seconds(a, hw).values())
    p = DTYPE_BYTES[dtype]
    x = batch * spec.d_model * p
    L = spec.n_layers or 0
    calls: list[tuple[Collective, int]] = [(collective(cluster, "all_reduce", "tp", tp, x), 2 * L)]
    moe = experts(spec)
    weights = a.total().params * p
    if moe and ep > 1:
        calls.append((collective(cluster, "all_to_all", "ep", ep, moe[1] * x, stride=tp), 2 * moe_layers(spec)))
    return Decode(spec, cluster, tp, ep, batch, context, dtype, compute, tuple(calls), weights, a.total().kv_cache)
