"""How fast `costmodel sweep` evaluates: the cold path (sympy: trees, lambdify) and the hot path
(numpy over every point), against the exact integer path (`analyze`) point by point.

    python bench/sweep_speed.py [SPEC]

Prints one line per measurement; the README quotes them.
"""

from __future__ import annotations

import sys
import time

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.hardware import load_hardware
from costmodel.sweep import Axis, evaluate, sweep

import numpy as np


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    spec = catalog.load(sys.argv[1] if len(sys.argv) > 1 else "llama-3-8b")
    hw = load_hardware("h100-sxm")
    # 100 x 100 distinct (seq, batch) points per series.
    axes = [Axis("seq", np.unique(np.rint(np.geomspace(512, 131072, 100)).astype(np.int64))),
            Axis("batch", np.arange(1, 101, dtype=np.int64))]
    t = time.perf_counter()
    sw = sweep(spec, "intensity", axes, hw, phases=("decode",), kv_heads=[spec.n_kv_heads])
    cold = time.perf_counter() - t
    points = sw.points
    # The hot path alone: the lambdified functions, rebuilt once above, evaluated again.
    from costmodel.sweep import Evaluator
    ev = Evaluator(spec, "decode", "bf16")
    from costmodel.variants import kv_head_variants
    v = kv_head_variants(spec, [spec.n_kv_heads])[0]
    grid = {"seq": axes[0].values, "batch": axes[1].values}
    hot = best_of(5, lambda: evaluate(spec.name, "intensity", {(v.label, "decode"): (v, grid, ev)}, hw, "bf16", "", ("seq", "batch")))
    n_exact = 200
    exact = best_of(3, lambda: [analyze(spec, "decode", batch=int(b), seq=int(s)) for s, b in
                                zip(axes[0].values[:n_exact // 100 + 1].repeat(100)[:n_exact], np.tile(axes[1].values, 2)[:n_exact])])
    print(f"spec {spec.name}, decode, intensity, {points} points ({len(axes[0].values)} seq x {len(axes[1].values)} batch)")
    print(f"cold path (symbolic tree, lambdify, one exact check): {cold * 1e3:.0f} ms")
    print(f"hot path (numpy): {hot * 1e3:.2f} ms for {points} points = {hot / points * 1e9:.0f} ns/point")
    print(f"exact path (analyze per point): {exact / n_exact * 1e6:.0f} us/point, "
          f"{exact / n_exact * points:.2f} s for {points} points")


if __name__ == "__main__":
    main()
