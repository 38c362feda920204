"""The numpy lookups of the table kinds ``runtime.timing_grid`` reads over arrays: a step table's
values by comparisons, a size table's arrays and envelope, a shape table read at its number axes
(``at_numbers``) and interpolated over its array axes (``positions``, ``interpolate``: separable
over (seq, 1) and (1, batch) axes), a shape table's log envelope, built once per table, and a
log-log size table's envelope as a log-log table (``log_envelope_table``); ``prepared``: what
a sweep reads of one profile whatever its points, built once and kept.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from costmodel.devices.efficiency import Efficiency, FlopsTable, MatmulTable, MemoryTable, _lookup, _position

#: A step table of at most this many sizes is read by comparisons (faster than a search).
_COMPARE = 4


def step(grid: list[float], values: list[float], x: np.ndarray) -> np.ndarray:
    """values[number of grid points <= x] (values has one more entry than grid, for below it).

    Grid points where the value does not change are dropped first (the same function): a
    first-touch table is 0 up to the allocator's threshold, then one rate, so one comparison."""
    return step_at(*steps_of(tuple(grid), tuple(values)), x)


def step_at(points: np.ndarray, steps: np.ndarray, x: np.ndarray,
            by_exponent: np.ndarray | None = None) -> np.ndarray:
    """``step`` of a table already as ``steps_of`` gives it (`by_exponent`: its ``exponent_steps``,
    where the caller keeps them)."""
    if len(points) == 1:
        if steps[0] == 0:  # (0 below the grid, a first-touch table: a cast and a multiply, half
            # np.where's time; the same values)
            out: np.ndarray = (x >= points[0]).astype(float)
            out *= steps[1]
            return out
        out = np.where(x >= points[0], steps[1], steps[0])
        return out
    if len(points) <= _COMPARE:
        i = np.zeros(x.shape, dtype=np.intp)
        for g in points:
            i += x >= g
        return steps.take(i)
    if by_exponent is None:
        by_exponent = exponent_steps(points, steps)
    if by_exponent is not None and x.dtype == np.float64:
        # the sign and the biased exponent of each x (floor(log2 x)): a negative x's arithmetic
        # shift is its 12 bits less 4096, which take wraps to the same entry (no mask pass)
        got: np.ndarray = by_exponent.take(x.view(np.int64) >> 52)
        return got
    return steps.take(points.searchsorted(x, side="right"))  # (the method: no wrapper)


def exponent_steps(points: np.ndarray, steps: np.ndarray) -> np.ndarray | None:
    """``step_at``'s values by each x's float64 exponent, or None (``_by_exponent``)."""
    return _by_exponent(points.tobytes(), steps.tobytes())


@functools.lru_cache(maxsize=64)
def _by_exponent(points: bytes, steps: bytes) -> np.ndarray | None:
    """``step_at``'s values by x's sign and biased exponent (x's float64 bits >> 52), where every
    grid point is a power of two (calibrate's first-touch sizes, 1 to 256 MiB): the grid points
    <= x are those <= 2^floor(log2 x), so a shift and a gather give what a binary search does
    (a third of its time at 10,000 points); 0, subnormal and negative x below the grid, inf
    and nan past it. None for another grid."""
    grid, values = np.frombuffer(points), np.frombuffer(steps)
    if not all(g > 0 and math.frexp(g)[0] == 0.5 and g >= 2.0 ** -1022 for g in grid):
        return None
    e = np.arange(4096)
    low = np.ldexp(1.0, np.clip(e, 1, 2046) - 1023)  # the least x of each exponent
    out = values[grid.searchsorted(low, side="right")]
    out[e == 0] = values[0]  # zero and subnormals
    out[e == 2047] = values[-1]  # inf and nan
    out[e >= 2048] = values[0]  # negative: the sign bit
    return out


@functools.lru_cache(maxsize=256)
def steps_of(grid: tuple[float, ...], values: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``step``'s grid points where the value changes, and the values (the first below the grid)."""
    kept = [k for k in range(len(grid)) if values[k + 1] != values[k]]
    return (np.asarray([grid[k] for k in kept], dtype=float),
            np.asarray([values[0], *(values[k + 1] for k in kept)], dtype=float))


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


def at_numbers(log_table: np.ndarray, grids: tuple[list[int], ...], xs: tuple[Any, ...]) -> np.ndarray:
    """The log table read at its number axes (None in `xs`: an array axis, kept): on each, the
    two grid points around x, weighted as ``MatmulTable.__call__`` weighs them (log space), or
    the one point where x sits on it or past an end (an axis of one point: that point)."""
    index: list[Any] = []
    pairs: list[tuple[int, float]] = []  # (axis in the sliced table, weight of the upper point)
    kept = 0
    for grid, x in zip(grids, xs, strict=True):
        if x is None:
            index.append(slice(None))
            kept += 1
            continue
        i, t = _position(grid, x) if len(grid) > 1 else (0, 0.0)
        if t in (0.0, 1.0):  # on a grid point (or held at an end): that point, no multiply
            index.append(i + int(t))
            continue
        index.append(slice(i, i + 2))
        pairs.append((kept, t))
        kept += 1
    out: np.ndarray = log_table[tuple(index)]
    for axis, t in reversed(pairs):  # from the last axis, so the earlier ones keep their place
        lower, upper = np.take(out, 0, axis=axis), np.take(out, 1, axis=axis)
        out = lower * (1 - t) + upper * t
    return out


def positions(lx: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, t) of each point on a log grid: between grid[i] and grid[i + 1], a fraction t of the
    way (clamped to the ends as ``np.interp`` holds them: t = 0 below, t = 1 at the top)."""
    f = np.interp(lx, grid, _indices(len(grid)))
    i = f.astype(np.intp)
    np.minimum(i, len(grid) - 2, out=i)
    f -= i
    return i, f


@functools.lru_cache(maxsize=16)
def _indices(n: int) -> np.ndarray:
    """0.0, 1.0, ... n - 1 (read only: ``positions``, each call)."""
    out = np.arange(n, dtype=float)
    out.flags.writeable = False
    return out


def interpolate(values: np.ndarray, free: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Multilinear interpolation of `values` (one axis per entry of `free`: the axis's grid and
    the coordinates, arrays that broadcast together) at every point, both in log space
    (``interpolate_at`` at their ``positions``)."""
    return interpolate_at(values, [positions(lx, grid) for grid, lx in free])


def interpolate_at(values: np.ndarray, where: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """``interpolate`` at the points' (i, t) on each axis of `values` (``positions``).

    Separable: the axes whose coordinates have one shape are read together (their corners),
    the group that leaves the least to read first, so a (seq, 1) axis is reduced over 100
    seqs before a (seq, batch) or (1, batch) one makes the result full size: a few passes over
    the points, not a few per corner (the attention core's products: stacked M over (seq,
    batch) or (1, batch), N and K over seq)."""
    ndim = max(i.ndim for i, _ in where)
    groups: dict[tuple[int, ...], list[int]] = {}
    for axis, (i, t) in enumerate(where):
        if i.ndim < ndim:  # each axis's points in the points' ndim
            where[axis] = i, t = i.reshape((1,) * (ndim - i.ndim) + i.shape), t.reshape(i.shape)
        groups.setdefault(i.shape, []).append(axis)
    # `out`: C-ordered, the points' axes (`points`, ndim of them) then the grid axes not read yet
    out = np.ascontiguousarray(values).reshape((1,) * ndim + values.shape)
    points, left = (1,) * ndim, list(range(len(where)))
    while groups:
        # the group that leaves the least to read next: a (seq, 1) pair of axes over a table's
        # (M, N, K) before a (1, batch) M, so the points grow once the grid is narrow
        shape = next(iter(groups)) if len(groups) == 1 else min(groups, key=lambda s: math.prod(
            _broadcast(points, s)) * math.prod(out.shape[ndim + k] for k in range(len(left))
                                                 if left[k] not in groups[s]))
        axes = groups.pop(shape)
        sizes = out.shape
        strides = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
        rest = [k for k in range(len(left)) if left[k] not in axes]
        # flat index of each point's (lower) corner: its points' offset and the axes' lower indices
        base: Any = 0
        for d, n in enumerate(points):
            if n > 1:
                base = base + np.arange(0, n * strides[d], strides[d]).reshape((n,) + (1,) * (ndim - d - 1))
        for axis in axes:
            stride = strides[ndim + left.index(axis)]
            base = base + (where[axis][0] * stride if stride > 1 else where[axis][0])
        trail = (1,) * len(rest)
        if rest:  # the grid axes still to read, after the points' axes
            tail: Any = np.zeros((), np.intp)
            for r, k in enumerate(rest):
                tail = tail + np.arange(0, sizes[ndim + k] * strides[ndim + k], strides[ndim + k]).reshape(
                    (-1,) + (1,) * (len(rest) - r - 1))
            base = base.reshape(base.shape + trail) + tail
        steps = [(strides[ndim + left.index(axis)], where[axis][1].reshape(where[axis][1].shape + trail)
                  if trail else where[axis][1]) for axis in axes]
        out = _read(out.ravel(), base, steps, 0, 0)
        points = _broadcast(points, shape)
        left = [left[k] for k in rest]
    result: np.ndarray = out
    return result


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of two shapes of one length whose sizes are equal or 1."""
    return tuple(x if x != 1 else y for x, y in zip(a, b, strict=True))


def _read(flat: np.ndarray, base: np.ndarray, steps: list[tuple[int, np.ndarray]], offset: int,
          a: int) -> np.ndarray:
    """``interpolate``'s group of axes from the a-th on (steps: each axis's stride and weights),
    one after another: lo + t (hi - lo), in place (two gathers and three passes an axis)."""
    if a == len(steps):
        gathered: np.ndarray = flat.take(base + offset if offset else base)
        return gathered
    stride, t = steps[a]
    lo, hi = _read(flat, base, steps, offset, a + 1), _read(flat, base, steps, offset + stride, a + 1)
    hi -= lo
    hi *= t
    hi += lo
    return hi


def log_envelope_table(grid: list[float], efficiency: list[float],
                       above: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """A log-log size table on its time envelope (``efficiency._lookup``: max(e(x), x above[i]),
    i the grid points <= x) as a log-log table itself: (log sizes, log efficiency), read by one
    ``np.interp`` (held at both ends) as the table is where its time rises (``time_rises``).

    In log size u, e is linear between grid points (constant past the ends) and x above[i] is
    u + log above[i] with i constant there, so their maximum is linear between the grid points
    and the one point of each interval where the two lines cross (below the grid too: above[0]
    is a bigger point's rate; above the grid above[n] = 0, nothing faster). At each of these
    points the value is ``_lookup``'s own; the envelope is continuous at the grid points (at
    g_j both sides give max(e_j, g_j above[j + 1])), so the interpolation is the envelope, to
    the rounding of the crossing's abscissa."""
    lg, le = [math.log(g) for g in grid], [math.log(e) for e in efficiency]
    points: list[tuple[float, float]] = []  # (u, x) with x = e^u, the grid's own sizes exactly
    for j in range(-1, len(grid) - 1):  # the interval below grid[j + 1] (j = -1: below the grid)
        if j >= 0:
            points.append((lg[j], grid[j]))
        if not above[j + 1]:
            continue
        s = 0.0 if j < 0 else (le[j + 1] - le[j]) / (lg[j + 1] - lg[j])
        if s == 1:  # parallel lines: no crossing inside
            continue
        # le[j] + s (u - lg[j]) = u + log above[j + 1] (below the grid: le[0] = u + log above[0])
        la = math.log(above[j + 1])
        u = le[0] - la if j < 0 else (la - le[j] + s * lg[j]) / (s - 1)
        if (j < 0 or lg[j] < u) and u < lg[j + 1]:
            points.append((u, math.exp(u)))
    points.append((lg[-1], grid[-1]))
    log_e = [math.log(_lookup(grid, efficiency, x, "log", above)) for _, x in points]
    return np.asarray([u for u, _ in points]), np.asarray(log_e)


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


class Prepared:
    """What ``timing_grid.GridRates`` reads of one profile's tables at one dtype, peak and bandwidth,
    whatever the points: built once and kept (``prepared``), as ``grid_lookup.log_envelope``
    keeps a table's envelope, so a sweep's call pays for its points and its tree, not for
    re-deriving the profile (logs of the grids, the memory table's arrays per op count, a shape
    table read at a product's number axes)."""

    def __init__(self, eff: Efficiency, peak: float, bandwidth: float, dtype: str) -> None:
        self.eff = eff  # held: its id stays its own while this lives
        table = eff.matmul[dtype]
        self.log_table: np.ndarray = np.empty(0)
        self.grids: tuple[list[int], ...] = ()
        self.axes: tuple[np.ndarray, ...] = ()
        if isinstance(table, MatmulTable):  # log seconds per FLOP: -log(peak x efficiency)
            self.log_table = -(log_envelope(table) + math.log(peak))
            self.grids = (table.M, table.N, table.K)
            self.axes = tuple(np.log(np.asarray(g, dtype=float)) for g in self.grids)
        self.least_memory = min(eff.memory.efficiency)
        # a log-log memory table on its envelope (the table itself where its time rises): log
        # bytes, log seconds per byte
        memory = eff.memory
        self.memory_log: tuple[np.ndarray, np.ndarray] | None = None
        if memory.interpolation == "log" and len(memory.bytes) > 1:
            log_bytes, log_e = ((np.log(np.asarray(memory.bytes, dtype=float)),
                                 np.log(np.asarray(memory.efficiency, dtype=float))) if memory.time_rises
                                else log_envelope_table(memory.bytes, memory.efficiency, memory.above))
            self.memory_log = log_bytes, -(log_e + math.log(bandwidth))
        fresh = eff.first_touch  # the least size with a first-touch cost
        self.fresh_from = next((b for b, r in zip(fresh.bytes, fresh.s_per_byte, strict=True) if r),
                               None) if fresh else None
        self.bandwidth = bandwidth
        self.envelopes: dict[int, tuple[np.ndarray, ...]] = {}  # ``memory_steps``
        self.curves: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}  # ``GridRates._curve``
        # (ids of two of ``curves``, kept there) -> the two stacked: ``pair``
        self.pairs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        # n -> steps (``steps_of``) and their ``exponent_steps``: ``GridRates._fresh_steps``
        self.fresh: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        # (ops, factors of one's bytes, all numbers) -> seconds: ``GridRates.first_touch``
        self.fresh_numbers: dict[tuple[Any, ...], float] = {}

    def pair(self, a: np.ndarray, slopes_a: np.ndarray, b: np.ndarray,
             slopes_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Two curves of ``curves`` stacked (a weight's forward and dA curves over M), and their
        slopes: one gather reads both (``GridRates._weight_seconds``)."""
        key = (id(a), id(b))
        hit = self.pairs.get(key)
        if hit is None:
            hit = self.pairs[key] = (np.stack([a, b]), np.stack([slopes_a, slopes_b]))
        return hit

    def memory_steps(self, ops: int) -> tuple[np.ndarray, ...]:
        """A step memory table for `ops` ops (``GridRates._memory_steps``): its grid x ops, seconds
        per byte of each step (the first below the grid), ops / (bandwidth x above[i]) (inf: none
        faster)."""
        hit = self.envelopes.get(ops)
        if hit is None:
            table, bw = self.eff.memory, self.bandwidth
            e = table.efficiency
            hit = self.envelopes[ops] = (
                np.asarray(table.bytes, dtype=float) * ops,
                np.asarray([1 / (bw * v) for v in (e[0], *e)]),
                np.asarray([ops / (bw * r) if r else math.inf for r in table.above]))
        return hit


#: (id of the Efficiency, dtype, peak, bandwidth) -> its ``Prepared``
_PROFILES: dict[tuple[int, str, float, float], Prepared] = {}


def prepared(eff: Efficiency, peak: float, bandwidth: float, dtype: str) -> Prepared:
    key = (id(eff), dtype, peak, bandwidth)
    hit = _PROFILES.get(key)
    if hit is None or hit.eff is not eff:
        if len(_PROFILES) > 64:
            _PROFILES.clear()
        hit = _PROFILES[key] = Prepared(eff, peak, bandwidth, dtype)
    return hit


@functools.lru_cache(maxsize=4)
def _ones(shape: tuple[int, ...]) -> np.ndarray:
    """Ones of `shape`, read only (``Partial.spread``: a few sweep shapes kept)."""
    ones = np.ones(shape)
    ones.flags.writeable = False
    return ones


class Partial:
    """An array of `shape` that is c at every point but the flat indices `below`, where it is
    `values`: a table read over points most of which lie past its last grid point (``GridRates.
    _exp_interp``), not spread over the points yet. Two of one `below` add as such (a weight's
    forward and dA products read T's curve at the same points), a number adds to both parts,
    and an array of its shape times it is that array times c with `values` written at `below`:
    no pass for the constant array, and the same floats as the array spread out."""

    __slots__ = ("c", "below", "values", "shape")
    __array_ufunc__ = None  # ndarray + Partial, ndarray * Partial: numpy defers to the methods here

    def __init__(self, c: float, below: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> None:
        self.c, self.below, self.values, self.shape = c, below, values, shape

    def spread(self) -> np.ndarray:
        """The array, new."""
        out: np.ndarray = np.multiply(_ones(self.shape), self.c)  # (numpy's fill: 6x the instructions)
        out.reshape(-1)[self.below] = self.values
        return out

    def __add__(self, o: Any) -> Any:
        if isinstance(o, Partial) and o.below is self.below:
            return Partial(self.c + o.c, self.below, self.values + o.values, self.shape)
        if isinstance(o, (int, float)):
            return Partial(self.c + o, self.below, self.values + o, self.shape)
        return self._added(o.spread() if isinstance(o, Partial) else o, mine=isinstance(o, Partial))

    def __radd__(self, o: Any) -> Any:
        if isinstance(o, (int, float)):
            return Partial(o + self.c, self.below, o + self.values, self.shape)
        return self._added(o, mine=False)

    def _added(self, x: Any, mine: bool) -> Any:
        """x + this array (x's own array, written in place, where `mine`): one pass, the
        values at `below` added apart."""
        if not isinstance(x, np.ndarray) or x.shape != self.shape or not x.flags.c_contiguous:
            return x + self.spread()
        at = x.take(self.below)
        out = np.add(x, self.c, out=x if mine else None)
        out.reshape(-1)[self.below] = at + self.values
        return out

    def __rmul__(self, x: Any) -> Any:
        if not isinstance(x, np.ndarray) or x.shape != self.shape:
            return x * self.spread()
        if 4 * self.below.size > x.size:  # a gather of many points costs more than a pass
            out = self.spread()
            return np.multiply(x, out, out=out)
        out = np.multiply(x, self.c, order="C")
        out.reshape(-1)[self.below] = x.take(self.below) * self.values
        return out

