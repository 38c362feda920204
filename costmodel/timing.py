"""Time as it runs: each component's time from its exact FLOPs and bytes and the efficiency its
shape reaches on the device.

The roofline (``costmodel.hardware``) charges every operator the peak FLOP/s of one large
matmul and the bandwidth of one large copy; skinny decode matmuls, small GEMMs and elementwise
ops reach much less. Here, as in the per-operator models of Calculon (Isaev et al. 2023,
efficiency tables by operation size), LLMCompass (Zhang et al. 2024) and GenZ (Bambhaniya et
al. 2024), each component of a phase is timed on its own:

- a **matmul** component (its ``Cost.gemms``: count x (M x K) @ (K x N)) takes, per product,
  2MKN / (peak[dtype] x e_mm(M, N, K)), with e_mm the profile's matmul table; a training step
  adds the two backward products of each, dA = dC B^T (M x N @ N x K) and dB = A^T dC
  (K x M @ M x N), looked up at their own shapes;
- a **memory** component (norms, activations, softmax, residual adds, cache writes, lookups)
  moves its unfused bytes (from the analysis, so a change of dtype or byte convention reaches
  the time) at bandwidth x e_mem(bytes per op); its FLOPs are not timed: they are a few per
  element, below any device's ridge point;
- a training step writes every weight's gradient: a matmul's is the output of its dB product;
  any other weight (embedding tables, norm gains, biases) gets a dense gradient, zero-filled and
  then written (torch's ``embedding_dense_backward`` scatters into a V x d table of zeros):
  2 x params x p more bytes on that component;
- every op takes at least the floor (launch and dispatch): a component of n ops takes at least
  n x floor_s; n is the number of layers it spans (x 3 in a training step: forward, and the
  backward's two ops).

**Overlap assumption**: ops run one after another (one stream, eager execution), so a phase's
time is the sum of its components' times; within one op, compute and memory traffic overlap
fully (the efficiency tables measure whole ops, so they include whatever the kernel overlaps).

Kernel assumptions (``Kernels``):
- ``flash_attention``: scores, scale, bias, mask, soft-cap, softmax and AV run as one kernel
  (Dao et al. 2022): the score matrix is never written, the elementwise steps cost nothing,
  and the two matmuls execute only the unmasked pairs (``flops_matmul_effective``);
- ``fused``: norms, activations, residual adds, RoPE, scales and dropout are fused into the
  neighbouring matmuls (their bytes never reach memory: the fused byte count's setting); the
  embedding lookup, KV-cache writes and the loss still move their bytes.

A profile without tables for the dtype falls back to the roofline, and the prediction says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from costmodel import model
from costmodel.analysis import Analysis
from costmodel.hardware import Hardware, roofline
from costmodel.phases import PHASES

#: Leaves of an attention sub-block that one flash-attention kernel runs.
FLASH_LEAVES = {"scores", "scale", "position_bias", "mask", "softcap", "softmax", "av", "attention_dropout"}
#: Leaves that move their bytes even when everything fusible is fused.
UNFUSIBLE = {"tokens", "positions", "kv_cache", "cross_entropy", "z_loss"}


@dataclass(frozen=True)
class Kernels:
    """What the kernels are assumed to fuse."""

    flash_attention: bool = False
    fused: bool = False

    def to_dict(self) -> dict[str, bool]:
        return {"flash_attention": self.flash_attention, "fused": self.fused}


@dataclass(frozen=True)
class ComponentTime:
    """One component's predicted time and what it was predicted from."""

    path: str
    kind: str  # "matmul", "memory", "fused" (folded into another kernel)
    ops: int  # kernels it launches in this phase
    flops: int
    bytes: int
    time_s: float
    roofline_s: float  # max(flops / peak, bytes / bandwidth): its lower bound
    efficiency: float  # roofline_s / time_s (1: at the roof)


@dataclass(frozen=True)
class Prediction:
    """A phase's predicted time on a device, component by component, beside the roofline."""

    hardware: str
    dtype: str
    phase: str
    kernels: Kernels
    calibrated: bool  # False: the profile has no tables; times are the roofline
    rows: tuple[ComponentTime, ...]
    roofline_s: float  # max(F / peak, unfused bytes / bandwidth) of the whole phase
    roofline_fused_s: float  # the same against the fused lower bound on bytes
    note: str | None = None
    floor_s: float = field(default=0.0)

    @property
    def time_s(self) -> float:
        return sum(r.time_s for r in self.rows) if self.calibrated else self.roofline_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware, "dtype": self.dtype, "phase": self.phase,
            "calibrated": self.calibrated, "note": self.note, "kernels": self.kernels.to_dict(),
            "overlap": "serial: components add; compute and memory overlap within an op",
            "time_s": self.time_s, "roofline_s": self.roofline_s,
            "roofline_fused_s": self.roofline_fused_s,
            "components": [{"path": r.path, "kind": r.kind, "ops": r.ops, "flops": r.flops,
                            "bytes": r.bytes, "time_s": r.time_s, "roofline_s": r.roofline_s,
                            "efficiency": r.efficiency} for r in self.rows],
        }


def no_tables_note(hw: Hardware, dtype: str) -> str:
    return (f"{hw.name} has no efficiency tables for {dtype}: times are the roofline lower bound "
            "(run `costmodel calibrate` on the device for calibrated times)")


def layer_count(groups: dict, path: str) -> int:
    """Layers a component spans: its group's count (``layers[local]/ffn/up``: L_local), else 1.
    `groups` is ``model.layer_groups(spec)``."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        name, _, kind = part.partition("[")
        if name == "layers":
            stack = parts[i - 1] if i > 0 else "layers"
            return groups.get((stack, kind.rstrip("]") or None), 1)
    return 1


def gemm_time(count: float, M: float, K: float, N: float, peak: float, table) -> float:
    """count products of (M x K) @ (K x N) at the table's efficiency for the shape."""
    if count == 0 or M == 0 or K == 0 or N == 0:
        return 0.0
    return count * 2 * M * K * N / (peak * table(M, N, K))


def backward_gemms(count: int, M: int, K: int, N: int) -> tuple[tuple[int, int, int, int], ...]:
    """The forward product and its two backward products: dA = dC B^T, dB = A^T dC."""
    return ((count, M, K, N), (count, M, N, K), (count, K, M, N))


def predict(a: Analysis, hw: Hardware, kernels: Kernels = Kernels()) -> Prediction:
    """The calibrated time of `a`'s phase on `hw` (the roofline when `hw` has no tables)."""
    dtype, total = a.dtype, a.total()
    peak, bw = hw.peak(dtype), hw.memory_bandwidth
    line = roofline(total.flops, total.bytes_unfused, hw, dtype)
    fused_line = roofline(total.flops, total.bytes_fused, hw, dtype)
    training = PHASES[a.phase].training
    calibrated = hw.tables_for(dtype)
    eff = hw.efficiency
    # The gemm shapes of the analysis's own pass: latent attention's convention changes kv_b's.
    costs = model.components(a.spec, model.numeric_dims(a.spec, a.shape, a.bytes_per_element, a.mla, a.routing))
    rows = []
    groups = model.layer_groups(a.spec)
    for row in a.rows:
        if row.flops == 0 and row.bytes_unfused == 0:
            continue
        cost = costs[row.path]
        leaf = row.path.rsplit("/", 1)[-1]
        layers = layer_count(groups, row.path)
        lower = max(row.flops / peak, row.bytes_unfused / bw)
        if not calibrated or eff is None:
            rows.append(ComponentTime(row.path, "matmul" if cost.gemms else "memory", layers,
                                      row.flops, row.bytes_unfused, lower, lower, 1.0))
            continue
        flash = kernels.flash_attention and leaf in FLASH_LEAVES and _in_attention(row.path)
        if cost.gemms:
            table = eff.matmul[dtype]
            gemms = [g for c in cost.gemms for g in (backward_gemms(*c) if training else (c,))]
            t = sum(gemm_time(*g, peak, table) for g in gemms)
            if flash and row.flops_matmul:  # only the unmasked pairs are executed
                t *= row.flops_matmul_effective / row.flops_matmul
            ops = layers * len(gemms) // len(cost.gemms)
            t = max(t, ops * eff.floor_s)
            rows.append(ComponentTime(row.path, "matmul", ops, row.flops, row.bytes_unfused, t, lower,
                                      lower / t if t else 1.0))
            continue
        if flash or (kernels.fused and leaf not in UNFUSIBLE):
            rows.append(ComponentTime(row.path, "fused", 0, row.flops, 0, 0.0, 0.0, 1.0))
            continue
        ops = layers * (3 if training else 1)
        moved = row.bytes_unfused + (gradient_bytes(row.params, a.bytes_per_element) if training else 0)
        per_op = moved / ops
        t = max(ops * eff.floor_s, moved / (bw * eff.memory(per_op)) if per_op else 0.0)
        rows.append(ComponentTime(row.path, "memory", ops, row.flops, moved, t, lower,
                                  lower / t if t else 1.0))
    return Prediction(
        hardware=hw.name, dtype=dtype, phase=a.phase, kernels=kernels, calibrated=calibrated,
        rows=tuple(rows), roofline_s=line.time_s, roofline_fused_s=fused_line.time_s,
        note=None if calibrated else no_tables_note(hw, dtype),
        floor_s=eff.floor_s if eff is not None else 0.0,
    )


def gradient_bytes(params, p: int):
    """A non-matmul weight's gradient in a training step: zero-filled, then written."""
    return 2 * params * p


def _in_attention(path: str) -> bool:
    return any(part in ("attention", "cross_attention") for part in path.split("/")[:-1])
