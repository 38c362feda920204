"""How fast `deploy` searches: deployments timed per second.

    python bench/deploy_speed.py

Each case searches every aggregated deployment (TP, EP, replicas) of N GPUs over a grid of
engine settings: max batch 1, 2, 4, ... 2048 and token budgets 2048, 4096, 8192, 16384 (each
pair with max batch <= budget), best of 3 runs; the cases marked "disagg" search every
disaggregated xPyD deployment beside them (``deploy.disagg.search_all``: each split of the GPUs
into prefill and decode pools, each pool's layout, budget and max batch). bench/README.md
quotes the figures this prints.
"""

from __future__ import annotations

import time

from costmodel import catalog
from costmodel.deploy.disagg import search_all
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
DISAGG = (
    ("llama-3-8b", "dgx-h100", 8, Workload(fixed(1024), fixed(1024))),
    ("qwen3-30b-a3b", "dgx-h100", 16, Workload(fixed(2048), fixed(256))),  # pools across 2 nodes
    ("deepseek-v3", "gb200-nvl72", 72, Workload(fixed(2000), fixed(1000))),  # wide EP in one rack
)


def main() -> None:
    print(f"{'spec':22} {'cluster':11} {'GPUs':>5} {'layouts':>8} {'timed':>7} {'fit':>7} {'best s':>7} "
          f"{'deployments/s':>14}")
    cases = [(c, search) for c in CASES] + [(c, search_all) for c in DISAGG]
    for (name, cluster, gpus, workload), find in cases:
        spec, cl = catalog.load(name), load_cluster(cluster)
        dtype = "fp8" if name == "deepseek-v3" else "bf16"  # 671B in bf16 fits no pool of 72 GPUs well
        times = []
        for _ in range(3):
            start = time.perf_counter()
            r = find(spec, cl, gpus, workload, batches=BATCHES, tokens=TOKENS, dtype=dtype)
            times.append(time.perf_counter() - start)
        best = min(times)
        mark = " disagg" if find is search_all else ""
        print(f"{name + mark:22} {cluster:11} {gpus:>5} {len(r.layouts):>8} {r.evaluated:>7} "
              f"{len(r.deployments):>7} {best:>7.3f} {r.evaluated / best:>14,.0f}")


if __name__ == "__main__":
    main()
