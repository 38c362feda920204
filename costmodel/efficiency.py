"""Efficiency tables: the fraction of a device's peak that an operator of a given shape reaches.

A hardware profile may carry them (``Hardware.efficiency``): `costmodel calibrate` measures
them on the local device, a datasheet profile may give published ones. Three tables:

- matmul, per dtype: the fraction of ``peak_flops[dtype]`` that (M x K) @ (K x N) reaches, on a
  grid of M, N, K (powers of two or any increasing values);
- memory: the fraction of ``memory_bandwidth`` that an elementwise op moving B bytes reaches,
  on a grid of B;
- floor_s: the least time any op takes (launch and dispatch overhead).

Between grid points the lookup interpolates log(efficiency) linearly in log(size) (multilinear
in log M, log N, log K); outside the grid it holds the nearest edge value. The tables are
measured or published, never fitted to the runs they are checked against (docs/measure.md).
Pure Python: the lookup runs inside ``analyze --hardware``, which never imports numpy.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

Fraction = Annotated[float, Field(gt=0)]


def _increasing(name: str, values: Sequence[float]) -> None:
    if not values or any(b <= a for a, b in zip(values, values[1:])) or values[0] <= 0:
        raise ValueError(f"{name}: must be positive and strictly increasing")


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

    M: list[int]
    N: list[int]
    K: list[int]
    efficiency: list[list[list[Fraction]]]

    @model_validator(mode="after")
    def _shape(self) -> MatmulTable:
        for name in ("M", "N", "K"):
            _increasing(name, getattr(self, name))
        e = self.efficiency
        if len(e) != len(self.M) or any(len(r) != len(self.N) or any(len(c) != len(self.K) for c in r) for r in e):
            raise ValueError(f"efficiency: must be {len(self.M)} x {len(self.N)} x {len(self.K)} (M x N x K)")
        return self

    def __call__(self, M: float, N: float, K: float) -> float:
        """The efficiency of one (M x K) @ (K x N), interpolated in log space."""
        (i, ti), (j, tj), (k, tk) = _position(self.M, M), _position(self.N, N), _position(self.K, K)
        e = self.efficiency
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


class MemoryTable(BaseModel):
    """efficiency[i]: the fraction of the profile's bandwidth an op moving bytes[i] reaches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bytes: list[float]
    efficiency: list[Fraction]

    @model_validator(mode="after")
    def _shape(self) -> MemoryTable:
        _increasing("bytes", self.bytes)
        if len(self.efficiency) != len(self.bytes):
            raise ValueError(f"efficiency: must have {len(self.bytes)} values, one per size")
        return self

    def __call__(self, nbytes: float) -> float:
        i, t = _position(self.bytes, nbytes)
        if t == 0:
            return self.efficiency[i]
        a, b = self.efficiency[i], self.efficiency[i + 1]
        return math.exp((1 - t) * math.log(a) + t * math.log(b))


class Efficiency(BaseModel):
    """What operators reach on one device, and where the figures come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    floor_s: Annotated[float, Field(ge=0)]  # the least time an op takes
    matmul: dict[str, MatmulTable]  # dtype -> table
    memory: MemoryTable
