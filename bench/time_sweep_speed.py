"""How fast the calibrated time model evaluates a sweep: 10,000 (seq, batch) points of one spec.

    python bench/time_sweep_speed.py [SPEC] [--hardware PROFILE]

``timing_grid.predict_grid`` over 100 seq x 100 batch values, per phase, best of 7 runs
(the whole evaluation: the component tree over numpy arrays and every table lookup), and
``timing.predict`` point by point for comparison. Target: >= 1e6 points/s. The profile must
carry efficiency tables (`costmodel calibrate`, or bench/time_validation.py's `local`); without
one a flat test profile is used (the speed does not depend on the values).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.efficiency import Efficiency, MatmulTable, MemoryTable
from costmodel.hardware import Hardware, load_hardware
from costmodel.timing import predict
from costmodel.timing_grid import predict_grid


def flat_profile() -> Hardware:
    grid = [1, 16, 256, 4096]
    table = MatmulTable(M=grid, N=grid, K=grid, efficiency=[[[0.5] * 4] * 4] * 4)
    return Hardware(name="flat", peak_flops={"bf16": 1e15}, memory_bandwidth=3e12, memory_bytes=8e10,
                    source="bench", efficiency=Efficiency(source="bench", floor_s=5e-6, matmul={"bf16": table},
                                                          memory=MemoryTable(bytes=[1e3, 1e9], efficiency=[0.1, 0.9])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="llama-3-8b")
    parser.add_argument("--hardware", default=None)
    args = parser.parse_args()
    spec = catalog.load(args.spec)
    hw = load_hardware(args.hardware) if args.hardware else flat_profile()
    dtype = next(iter(hw.efficiency.matmul)) if hw.efficiency else "bf16"
    seq = np.unique(np.rint(np.geomspace(512, 8192, 100)).astype(np.int64))
    batch = np.arange(1, 101, dtype=np.int64)
    points = seq.size * batch.size
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {spec.name}, {points} points, {dtype}")
    for phase in ("decode", "prefill", "train"):
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            predict_grid(spec, phase, batch[np.newaxis, :], seq[:, np.newaxis], hw, dtype)
            best = min(best, time.perf_counter() - t0)
        sample = [(int(s), int(b)) for s, b in zip(seq[::10], batch[::10])]
        t0 = time.perf_counter()
        for s, b in sample:
            predict(analyze(spec, phase, batch=b, seq=s, dtype=dtype), hw)
        one = (time.perf_counter() - t0) / len(sample)
        print(f"{phase:8s} grid: {1e3 * best:7.2f} ms, {points / best:,.0f} points/s;  "
              f"point by point: {1e6 * one:6.0f} us a point")


if __name__ == "__main__":
    main()
