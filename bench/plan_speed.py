"""How fast `plan` searches layouts: valid layouts evaluated per second.

    python bench/plan_speed.py

For each case: cold (a fresh StepModel: every micro-batch shape analysed once, then the search)
and warm (the same search again: what each further layout costs), best of 3; and the warm
search's process CPU time, best of 3, which a machine shared with other work disturbs far less
than the wall clock (set two versions side by side with it). docs/parallel.md quotes the
figures this prints.
"""

from __future__ import annotations

import time

from costmodel import catalog
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.plan import plan
from costmodel.parallel.step import StepModel

CASES = (
    ("megatron-22b", "dgx-a100-80gb", 8, 4),
    ("megatron-175b", "dgx-a100-80gb", 64, 64),
    ("megatron-1t", "dgx-a100-80gb", 512, 512),
    ("llama-3-70b", "dgx-h100", 256, 512),
    ("llama-3.1-405b", "gb200-nvl72", 576, 1152),
    ("deepseek-v2-lite", "dgx-h100", 8, 64),  # a mixture of experts: EP is searched too
    ("deepseek-v3", "dgx-h100", 256, 512),
)


def main() -> None:
    print(f"{'spec':16} {'cluster':14} {'GPUs':>5} {'G':>5} {'layouts':>8} {'fit':>6} {'cold s':>7} "
          f"{'warm s':>7} {'layouts/s warm':>15} {'CPU s':>7} {'layouts/CPU s':>14}")
    for name, cluster, gpus, batch in CASES:
        spec, cl = catalog.load(name), load_cluster(cluster)
        colds, warms, cpus = [], [], []
        for _ in range(3):
            model = StepModel(spec, cl, seq=2048, dtype="bf16")
            start = time.perf_counter()
            result = plan(model, gpus, batch)
            colds.append(time.perf_counter() - start)
            start, cpu = time.perf_counter(), time.process_time()
            plan(model, gpus, batch)
            warms.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        cold, warm, cpu = min(colds), min(warms), min(cpus)
        print(f"{name:16} {cluster:14} {gpus:>5} {batch:>5} {result.considered:>8,} {len(result.ranked):>6,} "
              f"{cold:>7.3f} {warm:>7.3f} {result.considered / warm:>15,.0f} {cpu:>7.3f} "
              f"{result.considered / cpu:>14,.0f}")


if __name__ == "__main__":
    main()
