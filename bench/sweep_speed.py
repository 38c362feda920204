"""How fast a sweep evaluates: 10,000 (seq, batch) points of one spec.

    python bench/sweep_speed.py [SPEC]

- cold: `sweep()` end to end for one variant and phase: the symbolic tree, lambdify, one exact
  check through `analyze`, and the numpy evaluation;
- hot: the lambdified functions alone over the 10,000 points (what every further point costs);
- exact: `analyze` (integers, no sympy) point by point, for comparison.
docs/attention.md quotes the figures this prints (cold: the first run, in a fresh process; the others
best of 5 runs).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable

import numpy as np

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.devices.hardware import load_hardware
from costmodel.studies.sweep import Axis, Evaluator, sweep


def best_of(runs: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    spec = catalog.load(sys.argv[1] if len(sys.argv) > 1 else "llama-3-8b")
    hw = load_hardware("h100-sxm")
    seq = np.unique(np.rint(np.geomspace(512, 131072, 100)).astype(np.int64))
    batch = np.arange(1, 101, dtype=np.int64)
    points = seq.size * batch.size

    cold = best_of(1, lambda: sweep(spec, "time", [Axis("seq", seq), Axis("batch", batch)], hw,
                                    phases=("decode",), kv_heads=[spec.n_kv_heads]))
    ev = Evaluator(spec, "decode", "bf16")
    hot = best_of(5, lambda: ev(batch[np.newaxis, :], seq[:, np.newaxis]))
    sample = list(itertools.islice(itertools.product(seq.tolist(), batch.tolist()), 200))
    exact = best_of(5, lambda: [analyze(spec, "decode", batch=b, seq=s) for s, b in sample]) / len(sample)

    print(f"{spec.name}, decode, {points:,} points ({seq.size} seq x {batch.size} batch), numpy "
          f"{np.__version__}")
    print(f"cold (tree + lambdify + one exact check + evaluation): {cold * 1e3:.0f} ms")
    print(f"hot (lambdified numpy only): {hot * 1e3:.2f} ms, {hot / points * 1e9:.0f} ns per point")
    print(f"exact (analyze per point): {exact * 1e6:.0f} us per point, {exact * points:.2f} s for {points:,}")


if __name__ == "__main__":
    main()
