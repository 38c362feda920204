"""Efficiency tables: the fraction of a device's peak that an operator of a given shape reaches.

A hardware profile may carry them (``Hardware.efficiency``): `costmodel calibrate` measures
them on the local device, a datasheet profile may give published ones. Three tables:

- matmul, per dtype: the fraction of ``peak_flops[dtype]`` that (M x K) @ (K x N) reaches, on a
  grid of M, N, K (powers of two or any increasing values);
- memory: the fraction of ``memory_bandwidth`` that an elementwise op moving B bytes reaches,
  on a grid of B;
- floor_s: the least time any op takes (launch and dispatch overhead);
- first_touch (optional): seconds per byte that an op's freshly allocated output costs beyond
  writing a reused buffer, by the allocation's size. On the CPU, glibc maps a large block
  (32 MiB and more by default) fresh from the kernel on each allocation and returns it on
  free, so every write to it page-faults (about 0.3 ns/B here, against 0.06 ns/B at copy
  bandwidth); below that size the allocator reuses its heap and the cost is ~0. A GPU's
  caching allocator reuses its blocks, so there it measures ~0 (datasheet profiles omit it).

A matmul table may instead be by the FLOPs of one product (``FlopsTable``: 2MKN), the form
Calculon (Isaev et al. 2023) publishes; a size table (``FlopsTable``, ``MemoryTable``) may be a
step function (``interpolation: step``: the efficiency of the largest grid point <= the size,
Calculon's convention) instead of interpolated.

Between grid points the lookup interpolates log(efficiency) linearly in log(size) (multilinear
in log M, log N, log K); outside the grid it holds the nearest edge value. The tables are
measured or published, never fitted to the runs they are checked against (docs/measure.md).

**More work never takes less time.** A table read as it stands can make a bigger op faster: on
Calculon's step tables a 0.99 GFLOP product runs at 0.1 of peak and a 1.0 GFLOP one at 0.6, so
the smaller takes 6x longer (and a decode step got faster as its cache grew, issue 23). A
kernel can always run an op as a bigger one, padded, so every lookup here returns the
efficiency of the time envelope t^(x) = min over y >= x of t(y), t = size / efficiency:

- a size table (``FlopsTable``, ``MemoryTable``): within a step, or a log-log segment, t is a
  power of x, so its least value over [x, next grid point] is at an end and
  t^(x) = min(t(x), min over grid points g_j > x of t(g_j)); as an efficiency,
  max(e(x), x * max_{g_j > x} e_j / g_j) (``_lookup``, ``above``);
- a table over shapes (``MatmulTable``): the grid's times t_ijl = M_i N_j K_l / e_ijl are
  replaced by their least over the grid points at or above them on every axis (one sweep down
  from the top corner, ``MatmulTable.envelope``); the multilinear interpolation of log t between corners
  that rise along every axis rises along every axis, and outside the grid the clamped
  efficiency makes t grow with the size.

The efficiencies so read stay at most 1 (x e_j / g_j < e_j for x < g_j).
Pure Python: the lookup runs inside ``analyze --hardware``, which never imports numpy.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

# Strict (a bool or a numeric string is refused) and finite, as the spec's numbers are. An efficiency
# is a fraction of the profile's peak: above 1 an op would run faster than the device can, and a
# time would come out below the roofline's bound (calibrate raises the peak to the best rate it saw).
Finite = Annotated[StrictFloat, AllowInfNan(False)]
Fraction = Annotated[Finite, Field(gt=0, le=1)]
Size = Annotated[Finite, Field(gt=0, le=1e30)]  # a grid point: bytes or FLOPs of one op
Dim = Annotated[StrictInt, Field(gt=0, le=2**40)]  # M, N or K of a matmul grid


def _increasing(name: str, values: Sequence[float]) -> None:
    if not values or any(b <= a for a, b in zip(values, values[1:], strict=False)) or values[0] <= 0:
        raise ValueError(f"{name}: must be positive and strictly increasing")


def _one_per_size(grid_name: str, grid: Sequence[float], values_name: str, values: Sequence[float]) -> None:
    """A size table's shape: an increasing grid and one value per size."""
    _increasing(grid_name, grid)
    if len(values) != len(grid):
        raise ValueError(f"{values_name}: must have {len(grid)} values, one per size")


def _memo(table: BaseModel, name: str, compute: Any) -> Any:
    """compute(table), kept on the table while the fields it was computed from are the same
    objects (``model_copy(update=...)`` copies the instance's dict, so a plain cached property
    would outlive a replaced field)."""
    sources = tuple(id(getattr(table, f)) for f in type(table).model_fields)
    kept = table.__dict__.get(name)
    if kept is None or kept[0] != sources:
        kept = (sources, compute(table))
        table.__dict__[name] = kept  # not a field: frozen models allow it, as cached_property does
    return kept[1]


def _position(grid: Sequence[float], x: float) -> tuple[int, float]:
    """(i, t): x sits between grid[i] and grid[i+1], a fraction t of the way in log space;
    clamped to the ends (t = 0 at the last point)."""
    if len(grid) == 1 or x <= grid[0]:
        return 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 2, 1.0
    i = bisect_right(grid, x) - 1
    return i, (math.log(x) - math.log(grid[i])) / (math.log(grid[i + 1]) - math.log(grid[i]))


class MatmulTable(BaseModel):
    """efficiency[i][j][l]: the fraction of peak FLOP/s of (M[i] x K[l]) @ (K[l] x N[j])."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    M: list[Dim]
    N: list[Dim]
    K: list[Dim]
    efficiency: list[list[list[Fraction]]]

    @model_validator(mode="after")
    def _shape(self) -> MatmulTable:
        for name in ("M", "N", "K"):
            _increasing(name, getattr(self, name))
        e = self.efficiency
        if len(e) != len(self.M) or any(len(r) != len(self.N) or any(len(c) != len(self.K) for c in r) for r
                                        in e):
            raise ValueError(f"efficiency: must be {len(self.M)} x {len(self.N)} x {len(self.K)} (M x N x K)")
        return self

    @property
    def sees_bytes(self) -> bool:
        """Whether the table was taken over skinny and wide shapes (more than one M: calibrate's
        M = 1 .. 1024), so that what a product's bytes cost is in its efficiencies; a one-point
        table (a published best shape) does not know it."""
        return len(self.M) > 1

    def inside(self, M: float, N: float, K: float) -> bool:
        """Whether the shape lies within the grid (else its efficiency is the edge's, held)."""
        return all(g[0] <= x <= g[-1] for g, x in ((self.M, M), (self.N, N), (self.K, K)))

    @property
    def envelope(self) -> list[list[list[float]]]:
        """The efficiencies the lookup reads: at each grid point, that of the least time over
        the grid points at or above it on every axis (the module docstring's envelope)."""
        envelope: list[list[list[float]]] = _memo(self, "_envelope", MatmulTable._envelope)
        return envelope

    def _envelope(self) -> list[list[list[float]]]:
        M, N, K = self.M, self.N, self.K
        t = [[[M[i] * N[j] * K[k] / e for k, e in enumerate(row)] for j, row in enumerate(plane)]
             for i, plane in enumerate(self.efficiency)]
        # From the top corner down: the least over the points at or above (i, j, k) is the least
        # of its row's from k up (a running minimum) and of the points above its two upper
        # neighbours (i, j + 1, k) and (i + 1, j, k), already found (a min is exact: any order
        # gives the same floats; accumulate and map run the loops in C).
        for i in reversed(range(len(M))):
            for j in reversed(range(len(N))):
                row = list(accumulate(reversed(t[i][j]), min))[::-1]
                if j + 1 < len(N):
                    row = list(map(min, row, t[i][j + 1]))
                if i + 1 < len(M):
                    row = list(map(min, row, t[i + 1][j]))
                t[i][j] = row
        return [[[min(1.0, M[i] * N[j] * K[k] / t[i][j][k]) for k in range(len(K))] for j in range(len(N))]
                for i in range(len(M))]

    def __call__(self, M: float, N: float, K: float) -> float:
        """The efficiency of one (M x K) @ (K x N), interpolated in log space over the envelope."""
        (i, ti), (j, tj), (k, tk) = _position(self.M, M), _position(self.N, N), _position(self.K, K)
        e = self.envelope
        total = 0.0
        for di, wi in ((0, 1 - ti), (1, ti)):
            if wi == 0:
                continue
            for dj, wj in ((0, 1 - tj), (1, tj)):
                if wj == 0:
                    continue
                for dk, wk in ((0, 1 - tk), (1, tk)):
                    if wk:
                        total += wi * wj * wk * math.log(e[i + di][j + dj][k + dk])
        return math.exp(total)


Interpolation = Literal["log", "step"]
Allocator = Literal["cache", "system"]


def _raw(grid: Sequence[float], efficiency: Sequence[float], x: float, interpolation: Interpolation) -> float:
    """One size table at x as it stands: log-log interpolation, or the step of the largest grid
    point <= x (the first value below the grid)."""
    if interpolation == "step":
        return efficiency[max(bisect_right(grid, x) - 1, 0)]
    i, t = _position(grid, x)
    if t == 0:
        return efficiency[i]
    a, b = efficiency[i], efficiency[i + 1]
    return math.exp((1 - t) * math.log(a) + t * math.log(b))


def rates_above(grid: Sequence[float], efficiency: Sequence[float]) -> list[float]:
    """above[i] = max over j >= i of efficiency[j] / grid[j] (above[len] = 0): x * above[i] is
    the efficiency at x of running an op as the grid point j >= i that takes least time."""
    above = [0.0] * (len(grid) + 1)
    for i in reversed(range(len(grid))):
        above[i] = max(above[i + 1], efficiency[i] / grid[i])
    return above


def time_rises(grid: Sequence[float], efficiency: Sequence[float], interpolation: Interpolation) -> bool:
    """Whether a size table's time (size / efficiency) already never falls as the size grows,
    so that the envelope changes nothing: one point, or log-log segments of slope <= 1
    (e_j / g_j never rising). A step that rises always lets a bigger op run faster."""
    if len(grid) == 1:
        return True
    return interpolation == "log" and all(
        b / gb <= a / ga for a, b, ga, gb in zip(efficiency, efficiency[1:], grid, grid[1:], strict=False))


def _lookup(grid: Sequence[float], efficiency: Sequence[float], x: float, interpolation: Interpolation,
            above: Sequence[float]) -> float:
    """One size table at x, on the time envelope (the module docstring): the table's value, or
    that of the larger grid point that takes least time if faster. `above` is ``rates_above``."""
    e = _raw(grid, efficiency, x, interpolation)
    bigger = x * above[bisect_right(grid, x)]
    return bigger if bigger > e else e


class FlopsTable(BaseModel):
    """efficiency[i]: the fraction of peak FLOP/s that one product of flops[i] = 2MKN FLOPs reaches
    (Calculon's ``gflops_efficiency``, by the size of the op rather than its shape)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flops: list[Size]
    efficiency: list[Fraction]
    interpolation: Interpolation = "log"

    @model_validator(mode="after")
    def _shape(self) -> FlopsTable:
        _one_per_size("flops", self.flops, "efficiency", self.efficiency)
        return self

    @property
    def sees_bytes(self) -> bool:
        """By op size alone: a product's bytes are not in it (``MatmulTable.sees_bytes``)."""
        return False

    @property
    def above(self) -> list[float]:
        above: list[float] = _memo(self, "_above", lambda t: rates_above(t.flops, t.efficiency))
        return above

    @property
    def time_rises(self) -> bool:
        """The table as it stands is already its envelope (``time_rises``)."""
        rises: bool = _memo(self, "_time_rises", lambda t: time_rises(t.flops, t.efficiency, t.interpolation))
        return rises

    def __call__(self, M: float, N: float, K: float) -> float:
        return _lookup(self.flops, self.efficiency, 2 * M * N * K, self.interpolation, self.above)


class MemoryTable(BaseModel):
    """efficiency[i]: the fraction of the profile's bandwidth an op moving bytes[i] reaches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bytes: list[Size]
    efficiency: list[Fraction]
    interpolation: Interpolation = "log"

    @model_validator(mode="after")
    def _shape(self) -> MemoryTable:
        _one_per_size("bytes", self.bytes, "efficiency", self.efficiency)
        return self

    @property
    def above(self) -> list[float]:
        above: list[float] = _memo(self, "_above", lambda t: rates_above(t.bytes, t.efficiency))
        return above

    @property
    def time_rises(self) -> bool:
        """The table as it stands is already its envelope (``time_rises``)."""
        rises: bool = _memo(self, "_time_rises", lambda t: time_rises(t.bytes, t.efficiency, t.interpolation))
        return rises

    def __call__(self, nbytes: float) -> float:
        return _lookup(self.bytes, self.efficiency, nbytes, self.interpolation, self.above)


class FirstTouchTable(BaseModel):
    """s_per_byte[i]: the extra seconds per byte of writing a freshly allocated buffer of
    bytes[i] (a step function: the value of the largest grid point <= the size; 0 below the grid,
    where allocations come from the allocator's cache)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bytes: list[Size]
    s_per_byte: list[Annotated[Finite, Field(ge=0, le=1e-3)]]

    @model_validator(mode="after")
    def _shape(self) -> FirstTouchTable:
        _one_per_size("bytes", self.bytes, "s_per_byte", self.s_per_byte)
        return self

    def __call__(self, nbytes: float) -> float:
        """Extra seconds of writing a fresh `nbytes` output."""
        i = bisect_right(self.bytes, nbytes) - 1
        return 0.0 if i < 0 else nbytes * self.s_per_byte[i]


class Efficiency(BaseModel):
    """What operators reach on one device, and where the figures come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    floor_s: Annotated[Finite, Field(ge=0, le=1)]  # the least time an op takes: a second is no launch
    matmul: dict[str, MatmulTable | FlopsTable]  # dtype -> table
    memory: MemoryTable
    first_touch: FirstTouchTable | None = None  # measured by calibrate; absent: no such cost
    # How the CPU allocator treated freed blocks while the tables were measured
    # (costmodel.malloc): "cache" keeps them, "system" is glibc's default; None: not
    # recorded (a datasheet profile, or one calibrated before the setting existed).
    allocator: Allocator | None = None
