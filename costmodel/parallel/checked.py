"""How far whole training steps on a device stood from published runs: the figures of the checks in
``parallel.validation`` (docs/parallel.md, "Checked against ..."), kept here as data so that
``train`` and ``plan`` can say them beside every step without running those checks.
``tests/test_parallel_validation.py`` recomputes the checks and holds these ranges to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepCheck:
    """Our step time against published runs' on one device, from `low` to `high` (our time over the
    measured, less 1: negative is too fast), in the `runs` named."""

    low: float
    high: float
    runs: tuple[str, ...]

    def note(self, device: str) -> str:
        return (f"whole steps on {device} checked against published runs: our step {100 * self.low:+.1f}% "
                f"to {100 * self.high:+.1f}% of the measured, negative too fast ({'; '.join(self.runs)}; "
                "docs/parallel.md)")

    def to_dict(self) -> dict[str, Any]:
        return {"error_low": self.low, "error_high": self.high, "runs": list(self.runs)}


#: By device profile name. The H100's range leaves out Table 4's 131K row, whose error hangs on how
#: Meta counted attention FLOPs (-10.6% or -36.0%).
STEP_CHECKS: dict[str, StepCheck] = {
    "h100-sxm": StepCheck(-0.426, 0.079, (
        "Llama 3 405B at 8K on 8K-16K GPUs, Dubey et al. 2024 Table 4",
        "MosaicML's MPT 1B-30B with FSDP, llm-foundry's H100 benchmarks",
        "Megatron-Core's weak scaling, 1.7B-462B on 48-6,144 GPUs (Megatron-LM README)")),
    "a100-80gb": StepCheck(-0.171, -0.048, (
        "Megatron-LM, Korthikanti et al. 2022 Table 5 (--kernels megatron-2022)",
        "Megatron-LM, Narayanan et al. 2021 Table 1 (--engine megatron-2021)")),
}


def step_check(device: str) -> StepCheck | None:
    """The checks of `device`'s whole steps, None where none was made."""
    return STEP_CHECKS.get(device)
