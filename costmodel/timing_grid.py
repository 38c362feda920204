"""The calibrated time model over many shapes at once (numpy): ``costmodel.timing`` vectorised.

The component tree is evaluated once with numpy arrays for B and the sequence lengths (the
formulas are the same code: ``cost.smin``/``smax``/``half`` take arrays), and every lookup of
the efficiency tables is an array operation. ``predict_grid`` gives the same times as
``timing.predict`` point by point (tests/test_timing.py), about a million points a second
(bench/time_sweep_speed.py). numpy is imported here, never by ``analyze``.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel import model
from costmodel.efficiency import Efficiency, FlopsTable, MatmulTable, MemoryTable
from costmodel.hardware import Hardware
from costmodel.phases import PHASES
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES
from costmodel.timing import (FLASH_LEAVES, Kernels, _in_attention, backward_gemms, dropout_parents, gemm_outputs,
                              layer_count, weight_gradients)


def _position(grid: list[float], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``efficiency._position``: (i, t) in log space, clamped."""
    g = np.log(np.asarray(grid, dtype=float))
    if len(g) == 1:
        return np.zeros(np.shape(x), dtype=int), np.zeros(np.shape(x))
    lx = np.log(np.maximum(np.asarray(x, dtype=float), 1e-300))
    # np.minimum/maximum, not np.clip: clip looks up the dtype's limits on every call
    i = np.minimum(np.maximum(np.searchsorted(g, lx, side="right") - 1, 0), len(g) - 2)
    t = np.minimum(np.maximum((lx - g[i]) / (g[i + 1] - g[i]), 0.0), 1.0)
    return i, t


def size_eff(grid: list[float], efficiency: list[float], interpolation: str, x) -> np.ndarray:
    """Vectorised ``efficiency._lookup``: one size table at every x."""
    if interpolation == "step":
        i = np.maximum(np.searchsorted(np.asarray(grid, dtype=float), x, side="right") - 1, 0)
        return np.asarray(efficiency, dtype=float)[i]
    return np.exp(np.interp(np.log(np.maximum(x, 1e-300)), np.log(grid), np.log(efficiency)))


def matmul_eff(table: MatmulTable | FlopsTable, M, N, K) -> np.ndarray:
    if isinstance(table, FlopsTable):
        return size_eff(table.flops, table.efficiency, table.interpolation, 2.0 * np.asarray(M, dtype=float) * N * K)
    if np.ndim(N) == 0 and np.ndim(K) == 0:
        # A weight's N and K are fixed: collapse the table to a curve over the M grid (the
        # interpolation is multilinear, so doing N, K first gives the same values), then 1-D.
        curve = [math.log(table(m, float(N), float(K))) for m in table.M]
        return np.exp(np.interp(np.log(np.maximum(np.asarray(M, dtype=float), 1e-300)), np.log(table.M), curve))
    e = np.log(np.asarray(table.efficiency, dtype=float))
    (i, ti), (j, tj), (k, tk) = _position(table.M, M), _position(table.N, N), _position(table.K, K)
    if e.shape[0] == 1:
        i, ti = np.zeros_like(i), np.zeros_like(ti)
    total = 0.0
    for di, wi in ((0, 1 - ti), (1, ti)):
        ii = np.minimum(i + di, e.shape[0] - 1)
        for dj, wj in ((0, 1 - tj), (1, tj)):
            jj = np.minimum(j + dj, e.shape[1] - 1)
            for dk, wk in ((0, 1 - tk), (1, tk)):
                kk = np.minimum(k + dk, e.shape[2] - 1)
                total = total + wi * wj * wk * e[ii, jj, kk]
    return np.exp(total)


def memory_eff(table: MemoryTable, nbytes) -> np.ndarray:
    return size_eff(table.bytes, table.efficiency, table.interpolation, nbytes)


def first_touch(eff: Efficiency, outputs) -> np.ndarray | float:
    """Vectorised ``timing.first_touch_s``: (ops, bytes of one output) pairs, bytes arrays."""
    table = eff.first_touch
    if table is None:
        return 0.0
    grid, rate = np.asarray(table.bytes, dtype=float), np.asarray([0.0, *table.s_per_byte])
    total: np.ndarray | float = 0.0
    for n, nbytes in outputs:
        if n:
            x = np.asarray(nbytes, dtype=float)
            total = total + n * x * rate[np.searchsorted(grid, x, side="right")]
    return total


def predict_grid(spec: Spec, phase: str, batch: np.ndarray, seq: np.ndarray, hw: Hardware, dtype: str = "bf16",
                 kernels: Kernels = Kernels(), enc_seq: np.ndarray | None = None) -> np.ndarray:
    """Calibrated seconds of `phase` at every (batch, seq) (broadcast together), as ``predict``.

    Needs a profile with tables for `dtype` (``Hardware.tables_for``)."""
    if not hw.tables_for(dtype):
        from costmodel.analysis import AnalysisError
        from costmodel.timing import no_tables_note

        raise AnalysisError(no_tables_note(hw, dtype))
    eff = hw.efficiency
    assert eff is not None
    ph = PHASES[phase]
    # Not broadcast up front: a quantity that depends on one axis stays that axis's size.
    B, seq = np.asarray(batch, dtype=np.int64), np.asarray(seq, dtype=np.int64)
    enc = np.asarray(enc_seq if enc_seq is not None else seq, dtype=np.int64) if spec.is_encoder_decoder else 0
    shape = ph.shape(B, seq, enc)
    p = DTYPE_BYTES[dtype]
    costs = model.components(spec, model.numeric_dims(spec, shape, p))
    groups = model.layer_groups(spec)
    peak, bw, floor = hw.peak(dtype), hw.memory_bandwidth, eff.floor_s
    table = eff.matmul[dtype]
    total = np.zeros(np.broadcast_shapes(B.shape, seq.shape))
    dropped = dropout_parents(path for path, cost in costs.items() if not (cost.train_only and not ph.training))
    for path, cost in costs.items():
        if cost.train_only and not ph.training:
            continue
        q = ph.quantities(cost)
        leaf = path.rsplit("/", 1)[-1]
        layers = layer_count(groups, path)
        flash = kernels.flash_attention and leaf in FLASH_LEAVES and _in_attention(path)
        if cost.gemms:
            gemms = [g for c in cost.gemms for g in (backward_gemms(*c) if ph.training else (c,))]
            t = 0.0
            for count, M, K, N in gemms:
                work = 2.0 * np.asarray(count) * M * K * N
                t = t + np.where(work > 0, work / (peak * matmul_eff(table, M, N, K)), 0.0)
            if flash:
                dense = np.asarray(q["flops_matmul"], dtype=float)
                t = t * np.where(dense > 0, q["flops_matmul_effective"] / np.maximum(dense, 1), 1.0)
            ops = layers * len(gemms) // len(cost.gemms)
            if not flash and not table.sees_bytes:  # no less than its bytes (timing.predict)
                moved = np.asarray(q["bytes_unfused"], dtype=float)
                t = np.maximum(t, np.where(moved > 0, moved / (bw * memory_eff(eff.memory, moved / ops)), 0.0))
            busy = np.asarray(q["flops_matmul"] + q["flops_other"] + q["bytes_unfused"]) > 0
            fresh = first_touch(eff, gemm_outputs(gemms, layers, p))
            total += np.where(busy, np.maximum(t, ops * floor) + fresh, 0.0)  # a pass that does not run: 0
            continue
        share = kernels.share(path, dropped)
        nbytes = share * np.asarray(q["bytes_unfused"], dtype=float)
        if share == 0:
            continue
        ops = layers * (3 if ph.training else 1)
        busy = (nbytes + np.asarray(q["flops_matmul"] + q["flops_other"], dtype=float)) > 0
        fresh: np.ndarray | float = 0.0
        if ph.training:
            extra_ops, extra_bytes, outputs = weight_gradients(spec, path, q["params"], layers, p)
            ops, nbytes = ops + extra_ops, nbytes + extra_bytes
            fresh = first_touch(eff, outputs)
        t = np.where(nbytes > 0, nbytes / (bw * memory_eff(eff.memory, nbytes / ops)), 0.0)
        total += np.where(busy, np.maximum(t, ops * floor) + fresh, 0.0)
    return total

