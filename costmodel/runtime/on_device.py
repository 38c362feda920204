"""An analysis on a device: the counts of ``costmodel.analysis`` with the roofline and the
calibrated time model's prediction beside them (``costmodel analyze --hardware``, and
``costmodel.analyze(spec, hardware=...)``).

``Analysis`` itself knows no device; this layer, above the roofline and the time model, adds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from costmodel import analysis
from costmodel.analysis import Analysis
from costmodel.devices.hardware import Hardware, load_hardware
from costmodel.precision import DEFAULT_GROUP
from costmodel.runtime.roofline import roofline_json
from costmodel.spec import Spec

if TYPE_CHECKING:
    from costmodel.runtime.timing import Kernels


@dataclass(frozen=True)
class DeviceAnalysis(Analysis):
    """An ``Analysis`` with the device it runs on (None: none, and no roofline)."""

    hardware: Hardware | None = field(default=None, compare=False)
    kernels: Kernels | None = field(default=None, compare=False)  # the time's (None: hardware's default)
    kernels_default: bool = field(default=True, compare=False)  # chosen by the device, not asked for

    @property
    def roofline(self) -> dict[str, Any] | None:
        """The device and where this pass sits on its roofline (with ``hardware`` only)."""
        return None if self.hardware is None else roofline_json(self.total(), self.hardware, self.dtype)

    @property
    def predicted_time(self) -> dict[str, Any] | None:
        """The calibrated time model's prediction, per component (``costmodel.runtime.timing``; with
        ``hardware`` only)."""
        # kept out of plain analyze's start-up
        from costmodel.runtime.kernels import to_dict as kernels_dict
        from costmodel.runtime.timing import predict

        if self.hardware is None:
            return None
        k = self.assumed_kernels
        return predict(self, self.hardware, k).to_dict() | {"kernels": kernels_dict(k, self.kernels_default)}

    @property
    def assumed_kernels(self) -> Kernels:
        """The kernels the time assumes: those given, else what the device runs
        (``runtime.kernels.default_kernels``)."""
        from costmodel.runtime.kernels import KERNELS, default_kernels

        return self.kernels if self.kernels is not None else KERNELS[default_kernels(self.hardware, "serve")]

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
    kernels: Kernels | None = None,
) -> DeviceAnalysis:
    """``costmodel.analysis.analyze`` (its arguments), on `hardware`: a Hardware, or a profile's
    name or file as ``--hardware`` takes it. The result carries the roofline (``.roofline``, and
    in ``to_dict()``) and the predicted time under `kernels` (default: what the device runs,
    ``runtime.kernels``); without `hardware`, both are None. `mla` stays naive unless asked: the
    counts do not change with the device (``runtime.kernels.default_mla`` is the CLI's choice)."""
    if isinstance(hardware, str):
        hardware = load_hardware(hardware)
    if hardware is not None:
        hardware.peak(dtype)  # a dtype the device lacks is an error before any work
    a = analysis.analyze(spec, phase, batch, seq, dtype, enc_seq, mla=mla, routing=routing,
                         weights_dtype=weights_dtype, kv_dtype=kv_dtype, group_size=group_size)
    return DeviceAnalysis(**{f.name: getattr(a, f.name) for f in fields(a)}, hardware=hardware,
                          kernels=kernels, kernels_default=kernels is None)
