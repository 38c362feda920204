"""The logs of a sweep's arrays, for ``timing_grid.GridRates``'s lookups (each a table read in log
space): one ``Logs`` a call. An array that is a number, or a number per row or column, times one
logged before gets its log from that one (a pass and two reductions, not a log of every point);
an outer product's log is the sum of its factors' (``outer``).

Tried and not kept (bench/README.md, sixth pass): a log-log table read over an outer sum a + b
evaluated per segment, exp(fp + s (a_i - x)) x exp(s b_j), exponentials per row and column,
not per point: 1.6x the time of np.interp and np.exp over 10,000 points (finding each point's
segment from the rows' crossings costs a search, a count and a cumulative sum), and 6e-14 off.
"""

from __future__ import annotations

import math

import numpy as np


class Logs:
    """The logs taken in one call, and the arrays logged at full size (the bases of later logs)."""

    def __init__(self) -> None:
        self._logged: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]] = {}

    def outer(self, x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """log x for x = exp(a) x exp(b), an outer product whose factors' logs are a and b."""
        logs: np.ndarray = a + b
        self._logged.setdefault(x.shape, []).append((x, logs))
        return logs

    def new(self, x: np.ndarray) -> np.ndarray:
        """log x (a zero size, not run: the log of 1e-300, below any table's first point)."""
        if not x.min() > 0:
            floored: np.ndarray = np.log(np.maximum(x, 1e-300))
            return floored
        logs = self._multiple(x) if x.size >= 1024 else None  # (a small log costs less than the test)
        if logs is None:
            logs = np.log(x)
            self._logged.setdefault(x.shape, []).append((x, logs))
        return logs

    def _multiple(self, x: np.ndarray) -> np.ndarray | None:
        """log x as log r + log y where x = r y to 1e-15 at every point, y an array of x's shape
        logged before (two passes and two reductions for a log, an eighth of its time here): a
        component's bytes are most often a number times a layer's tokens T = B x S, whose log
        ``GridRates._stacked`` has. The logs differ by at most 1e-15, the times by about as much
        relative (tests/test_timing_grid.py holds them to 1e-12)."""
        n = x.size
        for y, logs in self._logged.get(x.shape, ())[:8]:
            r = x.item(0) / y.item(0)
            if not all(abs(r * y.item(k) - x.item(k)) <= 1e-15 * x.item(k) for k in (-1, n // 2, n // 3)):
                continue
            ratio = x / y  # (one pass: x / y within r (1 +- 1e-15) is x = r y to 1e-15)
            if ratio.min() >= r * (1 - 1e-15) and ratio.max() <= r * (1 + 1e-15):
                out: np.ndarray = logs + math.log(r)
                return out
        return self._row_multiple(x) if x.ndim == 2 else None

    def _row_multiple(self, x: np.ndarray) -> np.ndarray | None:
        """log x as log r + log y where each row (or each column) of x is a number times y's, to
        1e-15 (y of x's shape, logged before): in prefill and training most sizes are a function
        of the seq times one of the batch (a score matrix's bytes are h S x T, T = B x S), so a
        pass, two reductions along the rows and a broadcast add for a log, 100 logs (of r)
        where there were 10,000. To 1e-15 as ``_multiple``."""
        rows, cols = x.shape
        for y, logs in self._logged.get(x.shape, ())[:8]:
            for axis, (a, b) in ((1, ((0, 0), (0, cols - 1))), (0, ((0, 0), (rows - 1, 0)))):
                if not abs(x.item(a) / y.item(a) * y.item(b) - x.item(b)) <= 1e-15 * x.item(b):
                    continue  # (sampled: the first row's, or column's, ends)
                ratio = x / y
                r = ratio[:, :1] if axis == 1 else ratio[:1, :]  # (a view: each row's r, or column's)
                if (ratio.min(axis=axis, keepdims=True) >= r * (1 - 1e-15)).all() and (
                        ratio.max(axis=axis, keepdims=True) <= r * (1 + 1e-15)).all():
                    out: np.ndarray = logs + np.log(r)
                    return out
        return None

