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

from costmodel import catalog  # noqa: E402
from costmodel.parallel.cluster import load_cluster  # noqa: E402
from costmodel.parallel.device import MEGATRON_KERNELS  # noqa: E402
from costmodel.parallel.layout import Layout, Recompute  # noqa: E402
from costmodel.parallel.step import StepModel  # noqa: E402
from costmodel.parallel.validation import PAPER  # noqa: E402

EXTRA_BYTES = 4 + 4 - 2  # an fp32 C read and D written, less the fp16 D the table's GEMM wrote


def main() -> None:
    cluster = load_cluster("dgx-a100-80gb")
    hw = cluster.hardware
    before: list[float] = []
    after: list[float] = []
    for m in PAPER:
        model = StepModel(catalog.load(m.spec), cluster, seq=2048, dtype="fp16", kernels=MEGATRON_KERNELS)
        dp = m.gpus // (m.tp * m.pp)
        runs = ((False, Recompute.full, m.full_s), (True, Recompute.selective, m.selective_sp_s))
        for sp, rc, paper in runs:
            lo = Layout(m.global_batch, m.micro_batch, m.tp, m.pp, dp, 1, 1, m.interleave, sp, rc, 0)
            step = model.step(lo)
            layers = (model.spec.n_layers or 0) // m.pp
            per_layer = EXTRA_BYTES * model.micro(m.tp, m.micro_batch, 1, sp, rc).layer_params
            eff = hw.efficiency.memory(per_layer) if hw.efficiency is not None else 1.0
            extra = lo.micro_batches * layers * per_layer / (hw.memory_bandwidth * eff)
            e0, e1 = step.step_time_s / paper - 1, (step.step_time_s + extra) / paper - 1
            before.append(abs(e0))
            after.append(abs(e1))
            print(f"{m.spec:14s} {rc.value:9s} paper {paper:6.2f} s  ours {step.step_time_s:6.2f} s "
                  f"+ {extra:5.3f} s   {e0:+6.1%} -> {e1:+6.1%}")
    n = len(before)
    print(f"mean |error| {sum(before) / n:.1%} -> {sum(after) / n:.1%}; "
          f"worst {max(before):.1%} -> {max(after):.1%}")


if __name__ == "__main__":
    main()
