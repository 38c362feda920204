"""Measure: build a spec as a PyTorch model, run a phase, and check every formula against it.

The only place torch is imported (lazily: nothing here runs until a measuring command or a
caller asks for it, so ``costmodel analyze`` never needs torch).

- ``costmodel.measure.reference``: the model, the executable definition of each element;
- ``costmodel.measure.counters``: matmul FLOPs (FlopCounterMode) and bytes (a dispatch mode);
- ``costmodel.measure.run``: ``measure(spec, phase, ...) -> Measurement``, formula beside count;
- ``costmodel.measure.calibrate``: a device's peak FLOP/s and bandwidth, as a hardware profile.
"""

from __future__ import annotations

from costmodel.errors import AnalysisError


class MeasureError(AnalysisError):
    """A measurement that cannot run (no torch, no such device, an unsupported dtype)."""


def require_torch() -> None:
    """Import torch, or raise a one-line MeasureError naming the extra to install."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MeasureError(
            "measuring needs PyTorch: pip install 'costmodel[measure]' (torch >= 2.4)"
        ) from None
