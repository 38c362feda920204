"""How fast `deploy` searches: deployments timed per second.

    python bench/deploy_speed.py

Each case searches every aggregated deployment (TP, EP, replicas) of N GPUs over a grid of
engine settings: max batch 1, 2, 4, ... 2048 and token budgets 2048, 4096, 8192, 16384 (each
pair with max batch <= budget), best of 3 runs. bench/README.md quotes the figures this prints.
"""

from __future__ import annotations

import time

from costmodel import catalog
from costmodel.deploy.search import search
from costmodel.deploy.workload import Workload, fixed, parse_lengths
from costmodel.parallel.cluster import load_cluster

BATCHES = tuple(2**i for i in range(12))
TOKENS = (2048, 4096, 8192, 16384)
CASES = (
    ("llama-3-8b", "dgx-h100", 8, Workload(fixed(1024), fixed(1024))),
    ("llama-3-70b", "dgx-h200", 8, Workload(parse_lengths("512..2048", "--seq"), fixed(512))),
    ("qwen3-30b-a3b", "dgx-h100", 8, Workload(fixed(2048), fixed(256))),  # EP searched too
    ("llama-3.1-405b", "dgx-h200", 16, Workload(fixed(1024), fixed(1024))),
)


def main() -> None:
    print(f"{'spec':16} {'cluster':10} {'GPUs':>5} {'layouts':>8} {'timed':>6} {'fit':>6} {'best s':>7} "
          f"{'deployments/s':>14}")
    for name, cluster, gpus, workload in CASES:
        spec, cl = catalog.load(name), load_cluster(cluster)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            r = search(spec, cl, gpus, workload, batches=BATCHES, tokens=TOKENS)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"{name:16} {cluster:10} {gpus:>5} {len(r.layouts):>8} {r.evaluated:>6} "
              f"{len(r.deployments):>6} {best:>7.3f} {r.evaluated / best:>14,.0f}")


if __name__ == "__main__":
    main()
