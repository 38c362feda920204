"""An analysis on a device: the counts of ``costmodel.analysis`` with the roofline and the
calibrated time model's prediction beside them (``costmodel analyze --hardware``, and
``costmodel.analyze(spec, hardware=...)``).

``Analysis`` itself knows no device; this layer, above the roofline and the time model, adds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from costmodel import analysis
from costmodel.analysis import Analysis
from costmodel.devices.hardware import Hardware, load_hardware
from costmodel.precision import DEFAULT_GROUP
from costmodel.runtime.roofline import roofline_json
from costmodel.spec import Spec


@dataclass(frozen=True)
class DeviceAnalysis(Analysis):
    """An ``Analysis`` with the device it runs on (None: none, and no roofline)."""

    hardware: Hardware | None = field(default=None, compare=False)

    @property
    def roofline(self) -> dict[str, Any] | None:
        """The device and where this pass sits on its roofline (with ``hardware`` only)."""
        return None if self.hardware is None else roofline_json(self.total(), self.hardware, self.dtype)

    @property
    def predicted_time(self) -> dict[str, Any] | None:
        """The calibrated time model's prediction, per component (``costmodel.runtime.timing``; with
        ``hardware`` only)."""
        from costmodel.runtime.timing import predict  # kept out of plain analyze's start-up

        return None if self.hardware is None else predict(self, self.hardware).to_dict()

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | (
            {"roofline": self.roofline, "time": self.predicted_time} if self.hardware is not None else {})


def analyze(
    spec: Spec,
    phase: str = "prefill",
    batch: int = 1,
    seq: int | None = None,
    dtype: str = "bf16",
    enc_seq: int | None = None,
    hardware: Hardware | str | None = None,
    mla: str = "naive",
    routing: str = "uniform",
    weights_dtype: str | None = None,
    kv_dtype: str | None = None,
    group_size: int = DEFAULT_GROUP,
) -> DeviceAnalysis:
    """``costmodel.analysis.analyze`` (its arguments), on `hardware`: a Hardware, or a profile's
    name or file as ``--hardware`` takes it. The result carries the roofline (``.roofline``, and
    in ``to_dict()``) and the predicted time; without `hardware`, both are None."""
    if isinstance(hardware, str):
        hardware = load_hardware(hardware)
    if hardware is not None:
        hardware.peak(dtype)  # a dtype the device lacks is an error before any work
    a = analysis.analyze(spec, phase, batch, seq, dtype, enc_seq, mla=mla, routing=routing,
                         weights_dtype=weights_dtype, kv_dtype=kv_dtype, group_size=group_size)
    return DeviceAnalysis(**{f.name: getattr(a, f.name) for f in fields(a)}, hardware=hardware)
