"""A large sweep in blocks that stay in the CPU's cache: ``timing_grid.predict_grid`` over more
than ``BLOCK`` points evaluates slices of its grid one after another.

A sweep's time is its passes over arrays of the grid's size (``timing_grid``'s docstring). While
the arrays a component works on fit in the core's L2 cache a pass costs about 0.7 us a point
here; past it, each pass streams from L3 and memory. On the project's 2-core machine (AMD
EPYC, 512 KiB of L2 a core) deepseek-v3's training step on the calibrated-style profile took
0.65-0.7 us a point between 1,000 and 20,000 points and 2.5 us a point from 20,000 to 40,000.
Over 20 (spec, profile, phase) prefill and training sweeps of 1e6 points, blocks of 32,768
points ran 1.18-2.05 M points/s against 0.45-1.09 in one piece (24,576: 1.08-1.90; 49,152:
0.50-2.26); bench/README.md, "Sweeps in blocks". A decode step's products run over the batch
alone (its tokens), few of its arrays span the grid, and a block's fixed part is the larger
share: 90,000 decode points ran 6.3 M points/s whole and 4.5 in blocks, so decode is not cut.

Blocks cut the longest axis of the broadcast grid, so an input that varies along another axis
keeps its shape (a quantity of the sequence length alone stays that axis's size); an axis of
one point too many is cut again along the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: Points a block holds at most (see the module docstring for how it was chosen).
BLOCK = 32_768


def in_blocks(f: Callable[..., np.ndarray], arrays: tuple[np.ndarray | None, ...],
              limit: int | None = None) -> np.ndarray | None:
    """f(*arrays) over their broadcast shape, evaluated in blocks of at most `limit` points
    (default ``BLOCK``) and joined (None entries pass through); None when the grid fits in one."""
    limit = limit or BLOCK
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays if a is not None))
    size = math.prod(shape)
    if size <= limit:
        return None
    axis = int(np.argmax(shape))
    step = max(1, limit // (size // shape[axis]))
    parts = [f(*(_cut(a, len(shape), axis, start, step) for a in arrays))
             for start in range(0, shape[axis], step)]
    return np.concatenate(parts, axis=axis)


def _cut(a: np.ndarray | None, rank: int, axis: int, start: int, step: int) -> np.ndarray | None:
    """`a`'s slice [start, start + step) along the broadcast grid's `axis` (its own axis, counted
    from the right); unchanged where it has one point or no such axis."""
    if a is None:
        return None
    a = np.asarray(a)
    own = axis - (rank - a.ndim)
    if own < 0 or a.shape[own] == 1:
        return a
    return a[(slice(None),) * own + (slice(start, start + step),)]
