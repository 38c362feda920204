"""What an analysis means on a device: the roofline (Williams, Waterman & Patterson 2009,
"Roofline"), attention's share of it, and the largest batch that fits.

Roofline: a pass of F FLOPs moving M bytes takes at least max(F / peak, M / bandwidth). It is
compute-bound when its intensity F / M exceeds the ridge point peak / bandwidth. M is the fused
lower bound of ``analysis`` (weights and KV cache once), so the time is a lower bound too, and
the bound says which roof it sits under.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.analysis import Analysis, AnalysisError, Row, sum_rows
from costmodel.devices.hardware import Hardware, hardware_dict


@dataclass(frozen=True)
class Roofline:
    compute_s: float  # FLOPs / peak
    memory_s: float  # bytes / bandwidth
    intensity: float  # FLOPs / bytes
    ridge: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def roofline(flops: float, nbytes: float, hw: Hardware, dtype: str) -> Roofline:
    return Roofline(flops / hw.peak(dtype), nbytes / hw.memory_bandwidth, flops / nbytes, hw.ridge(dtype))



def attention_total(a: Analysis) -> Row:
    """Sum over every attention sub-block of every layer group (``Key.in_attention``: self- and
    cross-attention, ``layers[local]/attention/scores``, ``decoder/layers/cross_attention/k``).
    The sub-block holds its norm and residual add (as the tree groups them); a stack-wide
    relative-position bias (T5) is not inside it."""
    return sum_rows((r for r in a.rows if r.key.in_attention), "attention")


def roofline_of(row: Row, hw: Hardware, dtype: str) -> Roofline:
    """The roofline of one row (a component, or a total) against its fused bytes."""
    return roofline(row.flops, row.bytes_fused, hw, dtype)


def roofline_dict(r: Roofline) -> dict[str, Any]:
    return {
        "compute_s": r.compute_s,
        "memory_s": r.memory_s,
        "time_s": r.time_s,
        "bound": r.bound,
        "intensity": r.intensity,
        "ridge": r.ridge,
    }


def roofline_json(row: Row, hw: Hardware, dtype: str) -> dict[str, Any]:
    """The `roofline` object of `analyze --format json`: the device and where the row sits."""
    return {"hardware": hardware_dict(hw, dtype), **roofline_dict(roofline_of(row, hw, dtype))}


@dataclass(frozen=True)
class Fit:
    """The largest batch whose weights and KV cache fit in device memory.

    Counted: every weight once (params x p) and the KV cache after the pass at the analysis's
    context (linear in B: kv(B) = B x kv(1)). Left out: activations and workspace of the pass
    (in prefill, the score matrices of one layer), the framework's reserve, fragmentation, and
    optimizer state (no training here).
    """

    max_batch: int  # 0: the weights alone do not fit
    weights_bytes: int
    kv_bytes_per_sequence: int
    memory_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return {"max_batch": self.max_batch, "weights_bytes": self.weights_bytes,
                "kv_bytes_per_sequence": self.kv_bytes_per_sequence, "memory_bytes": self.memory_bytes}


def fit(a: Analysis, hw: Hardware) -> Fit:
    """Largest B with weights + B x (KV cache of one sequence) <= device memory."""
    per_sequence = a.total().kv_cache // a.batch  # the cache is B times one sequence's
    if per_sequence == 0:
        raise AnalysisError(f"fit: the {a.phase} phase keeps no KV cache")
    free = hw.memory_bytes - a.bytes_weights
    if free < per_sequence:
        return Fit(0, a.bytes_weights, per_sequence, hw.memory_bytes)
    return Fit(int(free // per_sequence), a.bytes_weights, per_sequence, hw.memory_bytes)
