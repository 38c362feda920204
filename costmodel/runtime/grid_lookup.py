"""The numpy lookups of the table kinds ``runtime.timing_grid`` reads over arrays: a step table's
values by comparisons, a size table's arrays and envelope, one axis's interpolation weights,
and a shape table's log envelope, built once per table.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from costmodel.devices.efficiency import FlopsTable, MatmulTable, MemoryTable, _position

#: A step table of at most this many sizes is read by comparisons (faster than a search).
_COMPARE = 4


def step(grid: list[float], values: list[float], x: np.ndarray) -> np.ndarray:
    """values[number of grid points <= x] (values has one more entry than grid, for below it).

    Grid points where the value does not change are dropped first (the same function): a
    first-touch table is 0 up to the allocator's threshold, then one rate, so one comparison."""
    kept = [k for k in range(len(grid)) if values[k + 1] != values[k]]
    points = [grid[k] for k in kept]
    steps = np.asarray([values[0], *(values[k + 1] for k in kept)], dtype=float)
    if len(points) == 1:
        out: np.ndarray = np.where(x >= points[0], steps[1], steps[0])
        return out
    if len(points) <= _COMPARE:
        i = np.zeros(x.shape, dtype=np.intp)
        for g in points:
            i += x >= g
        return steps.take(i)
    return steps.take(np.searchsorted(np.asarray(points, dtype=float), x, side="right"))


@functools.cache
def table_arrays(grid: tuple[float, ...], efficiency: tuple[float, ...],
                  above: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A size table as arrays indexed by the number of grid points <= x: the grid, the step
    values (the first below the grid) and ``above``."""
    return (np.asarray(grid, dtype=float), np.asarray((efficiency[0], *efficiency), dtype=float),
            np.asarray(above, dtype=float))


def above(table: FlopsTable | MemoryTable) -> list[float] | None:
    """A size table's ``above`` where its envelope differs from it, else None."""
    return None if table.time_rises else table.above


def axis_weights(grid: list[int], x: Any) -> np.ndarray:
    """Each grid point's weight at x in ``MatmulTable.__call__``'s interpolation along one axis
    (one point: weight 1 wherever x is)."""
    w = np.zeros(len(grid))
    i, t = _position(grid, x) if len(grid) > 1 else (0, 0.0)
    w[i] = 1 - t
    if t:
        w[i + 1] = t
    return w


#: table id -> (the table, log of its envelope): a measured table has 35,816 points, and a sweep
#: builds a ``GridRates`` a call (the table is held, so its id stays its own).
_LOG_ENVELOPES: dict[int, tuple[MatmulTable, np.ndarray]] = {}


def log_envelope(table: MatmulTable) -> np.ndarray:
    hit = _LOG_ENVELOPES.get(id(table))
    if hit is None or hit[0] is not table:
        if len(_LOG_ENVELOPES) > 64:
            _LOG_ENVELOPES.clear()
        hit = _LOG_ENVELOPES[id(table)] = (table, np.log(np.asarray(table.envelope, dtype=float)))
    return hit[1]


