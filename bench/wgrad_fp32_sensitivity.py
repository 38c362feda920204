"""Korthikanti et al. 2022's Table 5 if the weight-gradient GEMMs' fp32 accumulation were not hidden.

    python bench/wgrad_fp32_sensitivity.py

Megatron-LM of June 2022 with fp32 gradients accumulates each weight gradient into its fp32
``main_grad`` inside the GEMM (megatron/mpu/layers.py, ``fused_dense_cuda.wgrad_gemm_accum_fp32``:
an fp32 C read and written, 8 bytes a weight, where the measured fp16 GEMM writes 2). The time
model hides that traffic under the GEMM's compute (the larger of the two). This prints the steps
with the 6 extra bytes a weight a micro-batch added at the A100's memory rate instead, as if each
tile's epilogue ran after its main loop. A sensitivity for docs/parallel.md ("The weight
gradients' fp32 accumulation"), not the model.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costmodel.parallel.cluster import load_cluster  # noqa: E402
from costmodel.parallel.validation import PAPER, compare  # noqa: E402

EXTRA_BYTES = 4 + 4 - 2  # an fp32 C read and D written, less the fp16 D the table's GEMM wrote


def main() -> None:
    hw = load_cluster("dgx-a100-80gb").hardware
    before: list[float] = []
    after: list[float] = []
    for m in PAPER:
        c = compare(m)  # the steps of docs/parallel.md's Table 5 check
        params = c.layers_params_optimizer_bytes / c.full.recipe.state_bytes  # the first stage's layers
        per_layer = EXTRA_BYTES * params / ((c.full.spec.n_layers or 0) // m.pp)
        eff = hw.efficiency.memory(per_layer) if hw.efficiency is not None else 1.0
        for step, paper in ((c.full, m.full_s), (c.selective_sp, m.selective_sp_s)):
            extra = step.layout.micro_batches * EXTRA_BYTES * params / (hw.memory_bandwidth * eff)
            e0, e1 = step.step_time_s / paper - 1, (step.step_time_s + extra) / paper - 1
            before.append(abs(e0))
            after.append(abs(e1))
            print(f"{m.spec:14s} {step.layout.recompute.value:9s} paper {paper:6.2f} s  ours "
                  f"{step.step_time_s:6.2f} s + {extra:5.3f} s   {e0:+6.1%} -> {e1:+6.1%}")
    n = len(before)
    print(f"mean |error| {sum(before) / n:.1%} -> {sum(after) / n:.1%}; "
          f"worst {max(before):.1%} -> {max(after):.1%}")


if __name__ == "__main__":
    main()
