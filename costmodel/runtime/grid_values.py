"""Arithmetic on a sweep's values for ``timing_grid.GridRates``: numbers, numpy arrays of the
grid's points and ``grid_merge.Scaled`` quantities, without the passes that change nothing (a
number 0 added, a multiply by 1) and with products ordered to make the fewest full-size arrays.
"""

from __future__ import annotations

import math
import operator
from functools import reduce
from typing import Any

import numpy as np

from costmodel.runtime.grid_merge import Scaled


def _array(x: Any) -> bool:
    """An array of the sweep's points (``predict_grid`` makes no 0-d arrays: one has an axis)."""
    return type(x) is np.ndarray


def _positive(x: Any) -> bool:
    """x > 0 everywhere."""
    return bool(x.min() > 0) if _array(x) else x > 0  # a reduction: no boolean array


def _nonzero(x: Any) -> bool:
    """x != 0 somewhere."""
    return bool(x.any()) if _array(x) else bool(x)


def _number(x: Any) -> Any:
    """A 0-d array or numpy scalar as a Python number (as the scalar path reads it), a Scaled's value."""
    kind = type(x)
    if kind is int or kind is float or kind is Scaled:  # (most calls: no isinstance)
        return x.value() if kind is Scaled else x
    if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return x.item()
    return x


def _product(*xs: Any) -> Any:
    """The product, a new array where any factor is one: the numbers first, then the arrays of
    one shape together, the smallest first (a (seq, 1) M x N before the (1, batch) count: one
    full-size pass, not two; sizes are integers below 2^53, so the order keeps their value)."""
    nd = np.ndarray
    arrays = [x for x in xs if type(x) is nd]
    numbers = math.prod([x for x in xs if type(x) is not nd])
    if len(arrays) < 2:  # (most calls: no loop, no sort)
        return numbers * arrays[0] if arrays else numbers
    shapes: dict[tuple[int, ...], Any] = {}
    for x in arrays:
        shapes[x.shape] = shapes[x.shape] * x if x.shape in shapes else x
    out: Any = numbers
    for x in sorted(shapes.values(), key=lambda a: a.size):
        out = out * x
    return out


def _sum(terms: list[Any]) -> Any:
    """The sum of numbers and arrays, number zeros left out (adding 0.0 to an array is a pass)."""
    nd = np.ndarray
    kept = [t for t in terms if type(t) is nd or t]
    if len(kept) < 2:
        return kept[0] if kept else 0.0
    return reduce(operator.add, kept)


def _below(lx: np.ndarray, xp: np.ndarray) -> np.ndarray | None:
    """The flat indices of the points of lx below xp's last point where they are at most half,
    else None: interpolate everywhere (``GridRates._exp_interp``)."""
    if lx.max() < xp[-1]:  # a reduction: no boolean array
        return None
    below = lx < xp[-1]
    # gathering and scattering half the points costs less than np.interp and np.exp over the
    # other half (10,000 points, bench/README.md)
    return None if np.count_nonzero(below) > lx.size // 2 else np.flatnonzero(below)


def _per(terms: tuple[Any, ...], rate: float) -> Any:
    """sum(terms) / rate, a new array or a number: terms ``Scaled`` by one k summed first, then
    times k / rate (no pass for k; integer sizes below 2^53: their sum exact); no number zeros."""
    if len(terms) == 1:  # (most calls: a component's bytes, or its one kind of FLOPs)
        t = terms[0]
        return t.a * (t.k / rate) if type(t) is Scaled else _number(t) / rate
    scaled = [t for t in terms if isinstance(t, Scaled)]
    rest = [x for x in (_number(t) for t in terms if not isinstance(t, Scaled)) if _array(x) or x]
    if scaled and not rest and all(t.k == scaled[0].k for t in scaled):
        return _sum([t.a for t in scaled]) * (scaled[0].k / rate)
    return _number(_sum([t.value() for t in scaled] + rest)) / rate
