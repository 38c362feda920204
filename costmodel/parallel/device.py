"""What one GPU does with its share: the time and memory models the parallel step asks.

INTEGRATION POINT (docs/parallel.md, "Integration notes"). The parallel model asks four questions
of the single-device models, and only through the functions below:

- ``component_seconds(analysis, hw)``: seconds per component of one GPU's pass (a TP shard's
  analysis, phase ``train``: forward + backward). Stands in for the calibrated time model (issue 13).
- ``optimizer_seconds(params, recipe, hw)``: the optimizer step over `params` on one GPU.
- ``activation_bytes_per_layer(spec, ...)``: bytes one layer keeps for backward on one GPU, for a
  micro-batch, under TP, SP and a recompute mode. Stands in for the memory model (issue 12).
- ``Recipe``: bytes per parameter of weights, gradients and optimizer states.

The stand-ins here are deliberately simple and say where their numbers come from: a roofline with
Calculon's published A100 efficiency buckets (Isaev et al. 2023, as quoted in DESIGN.md) for time,
and Korthikanti et al. 2022's per-layer formula for activations.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.analysis import Analysis
from costmodel.hardware import Hardware
from costmodel.parallel.layout import Recompute
from costmodel.spec import Spec


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter held by one replica (before ZeRO shards them)."""

    name: str = "fp16-mixed (Megatron)"
    weight_bytes: int = 2  # fp16/bf16 weights
    grad_bytes: int = 4  # fp32 main gradients (Megatron accumulates in fp32)
    optimizer_bytes: int = 12  # fp32 master weights, Adam m and v
    # The update reads master, m, v and the gradient and writes master, m, v and the weight.
    update_bytes: int = 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2

    @property
    def state_bytes(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes


MEGATRON = Recipe()  # 18 bytes per parameter, as Korthikanti et al. 2022 Figure 1 counts
ZERO = Recipe("bf16-mixed (ZeRO)", 2, 2, 12, 4 + 4 + 4 + 2 + 4 + 4 + 4 + 2)  # 16 bytes (Rajbhandari et al.)

# --- time: the stand-in (swap for the calibrated model) -----------------------------------------

# Calculon's A100 tables as DESIGN.md quotes them: matmul efficiency by GFLOP per kernel and memory
# efficiency by bytes per kernel, (threshold, efficiency) from the largest down.
MATMUL_EFFICIENCY = ((128e9, 0.95), (16e9, 0.9), (1e9, 0.6), (0.0, 0.1))
MEMORY_EFFICIENCY = ((100e6, 0.9), (10e6, 0.75), (1e6, 0.6), (0.0, 0.3))


def _bucket(x: float, table: tuple[tuple[float, float], ...]) -> float:
    return next(eff for threshold, eff in table if x >= threshold)


def _kernels(a: Analysis, path: str) -> int:
    """How many equal kernels a row stands for: passes (forward + 2 backward) x layers."""
    from costmodel import model

    passes = 3 if a.phase == "train" else 1
    if path.startswith("layers"):
        kind = path[len("layers["):path.index("]")] if path.startswith("layers[") else None
        return passes * model.layer_groups(a.spec)[("layers", kind)]
    return passes


def component_seconds(a: Analysis, hw: Hardware) -> dict[str, float]:
    """Seconds per component: each row's kernels at the efficiency their size reaches.

    A training pass keeps no KV cache: its ``kv_cache`` rows are left out."""
    peak, bw = hw.peak(a.dtype), hw.memory_bandwidth
    vector_peak = hw.peak_flops.get("fp32", peak)
    out: dict[str, float] = {}
    for r in a.rows:
        if a.phase == "train" and r.path.endswith("kv_cache"):
            continue
        n = _kernels(a, r.path)
        t_mm = r.flops_matmul / (peak * _bucket(r.flops_matmul / n, MATMUL_EFFICIENCY)) if r.flops_matmul else 0.0
        t_mem = r.bytes_unfused / (bw * _bucket(r.bytes_unfused / n, MEMORY_EFFICIENCY)) if r.bytes_unfused else 0.0
        out[r.path] = max(t_mm, r.flops_other / vector_peak, t_mem)
    return out


def optimizer_seconds(params: float, recipe: Recipe, hw: Hardware) -> float:
    """The Adam update is memory-bound: its bytes at the large-transfer memory efficiency."""
    nbytes = params * recipe.update_bytes
    return nbytes / (hw.memory_bandwidth * _bucket(nbytes, MEMORY_EFFICIENCY))


# --- memory: the stand-in (swap for the memory model) -------------------------------------------


def activation_bytes_per_layer(
    spec: Spec, micro_batch: int, seq: int, tp: int, sequence_parallel: bool, recompute: Recompute
) -> float:
    """Bytes one transformer layer keeps for backward on one GPU (16-bit activations).

    Korthikanti et al. 2022, section 4 and Table 2: sbh(10 + 24/t + 5as/(ht)) with tensor
    parallelism, sbh/t (34 + 5as/h) with sequence parallelism too; selective recompute drops the
    5as/h term (the attention core); full recompute keeps the layer input, 2sbh (split over t with
    sequence parallelism). The 34 assumes a GeLU MLP of 4h, LayerNorm and dropout.
    """
    s, b, h, a, t = seq, micro_batch, spec.d_model, spec.n_heads, tp
    sbh = s * b * h
    if recompute is Recompute.full:
        return 2 * sbh / (t if sequence_parallel else 1)
    core = 0.0 if recompute is Recompute.selective else 5 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + core)
    return sbh * (10 + 24 / t + core / t)
