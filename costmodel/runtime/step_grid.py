"""A pass's seconds over a grid of (batch, seq) at the checkpoint's widths: ``timing_grid.predict_grid``,
with the components an FP8 checkpoint holds in bf16 (``analysis.held_wide``: the LM head, the
embedding, a router) read off the bf16 tables, as ``timing.predict`` times them point by point.
``deploy``'s step tables and ``sweep --quantity time`` read it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from costmodel.analysis import held_wide
from costmodel.components.key import Key
from costmodel.devices.hardware import Hardware
from costmodel.precision import Widths
from costmodel.runtime.timing import Kernels, runs_wide
from costmodel.runtime.timing_grid import predict_grid
from costmodel.spec import Spec


def on_tables(hw: Hardware, dtype: str, widths: Widths) -> bool:
    """Whether the grid times these widths off `hw`'s tables: tables for `dtype`, and weights
    and cache at its width (an FP8 checkpoint at ``--dtype fp8`` included); else a caller
    times point by point (``predict``) or by the roofline."""
    return hw.tables_for(dtype) and not widths.differs(dtype)


def step_grid(spec: Spec, phase: str, batch: np.ndarray, seq: np.ndarray, hw: Hardware, dtype: str,
              widths: Widths, kernels: Kernels, mla: str = "naive",
              select: Callable[[Key], bool] | None = None) -> np.ndarray:
    """Seconds of `phase` (of the components `select` keeps) at every (batch, seq); needs
    ``on_tables(hw, dtype, widths)``."""
    keep = select or (lambda key: True)
    if runs_wide(hw, dtype, widths):
        narrow = predict_grid(spec, phase, batch, seq, hw, dtype, kernels, mla=mla,
                              select=lambda k: keep(k) and not held_wide(k))
        wide = predict_grid(spec, phase, batch, seq, hw, "bf16", kernels, mla=mla,
                            select=lambda k: keep(k) and held_wide(k))
        both: np.ndarray = narrow + wide
        return both
    return predict_grid(spec, phase, batch, seq, hw, dtype, kernels, mla=mla, select=select)
