"""How fast the calibrated time model evaluates a sweep: 10,000 (seq, batch) points of a spec.

    python bench/time_sweep_speed.py [SPEC ...] [--all] [--hardware PROFILE ...] [--repeat N]
                                     [--cpu] [--tree PATH] [--side N]

``timing_grid.predict_grid`` over 100 seq x 100 batch values (seq geometric from 512 to 8192,
or to the spec's positions; batch 1 .. 100; ``--side N``: N x N, seq geometric over the same
range, batch 1 .. N), per phase, best of N runs (default 7) of the whole
evaluation: the component tree over numpy arrays and every table lookup, nothing that depends
on the points kept between runs (``grid_lookup.prepared`` keeps the profile's arrays).
Profiles: the datasheet h100-sxm (Calculon's step tables by op size) and a100-80gb (one point),
and two calibrated-style ones (``tests.helpers.calibrated_profile``: a multi-point (M, N, K)
matmul table, a memory table and a first-touch table on ``costmodel calibrate``'s CPU
grid, made-up values, non-monotone or `realistic`). Target: >= 1e6 points/s. The load average
is printed before and after: on a shared machine it sets the figure as much as the code does.
``--check`` also times ``timing.predict`` point by point on a sample, for comparison.
Each cell's first call is not among the N: it builds what is kept per spec and phase
(``grid_plan``: the tree planned once) and per profile (``grid_lookup.prepared``, and a GPU
profile's kernel tables read); its time (ms) is printed under the row, a spec's first profile
paying for the plans.
``--cpu`` times the process's CPU (``time.process_time``) instead of the wall clock: on a
machine shared with other jobs, less of their queueing is counted (their cache traffic still
is). ``--tree PATH`` times the costmodel package of another checkout (an older revision, for a
before/after ratio measured by the same script minutes apart).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

# tests.helpers, from any folder; the package of --tree PATH where given (read before argparse:
# the imports below load it)
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else None
sys.path.insert(0, _TREE or str(Path(__file__).resolve().parent.parent))

from costmodel import catalog  # noqa: E402
from costmodel.analysis import analyze  # noqa: E402
from costmodel.devices.hardware import Hardware, load_hardware  # noqa: E402
from costmodel.measure.malloc import keep_freed_heap  # noqa: E402
from costmodel.runtime.timing import predict  # noqa: E402
from costmodel.runtime.timing_grid import predict_grid  # noqa: E402
from tests.helpers import calibrated_profile  # noqa: E402

DEFAULT_SPECS = ["llama-3-8b", "gemma-3-27b", "mixtral-8x7b", "deepseek-v3", "t5-11b"]
PHASES = ("decode", "prefill", "train")


def profile(name: str) -> Hardware:
    if name == "calibrated":
        return calibrated_profile()
    if name == "calibrated-realistic":
        return calibrated_profile(realistic=True)
    return load_hardware(name)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--all", action="store_true", help="every bundled spec")
    parser.add_argument("--hardware", nargs="+",
                        default=["h100-sxm", "a100-80gb", "calibrated", "calibrated-realistic"])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="also time predict point by point")
    parser.add_argument("--cpu", action="store_true", help="time the process's CPU, not the wall clock")
    parser.add_argument("--tree", help="time the costmodel package of this checkout instead")
    parser.add_argument("--side", type=int, default=100, help="N seq x N batch points (default 100)")
    args = parser.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    kept = keep_freed_heap()  # what a program sweeping at scale does (timing_grid's docstring)
    names = catalog.bundled_names() if args.all else (args.specs or DEFAULT_SPECS)
    hws = {h: profile(h) for h in args.hardware}
    print(f"load average before: {load()}; best of {args.repeat} ({'CPU' if args.cpu else 'wall'} time); "
          f"M points/s per phase; {args.tree or 'this tree'}")
    print(f"{'spec':18s} {'points':>6s}  " + "  ".join(f"{h[:20]:>20s}" for h in hws))
    print(f"{'':18s} {'':6s}  " + "  ".join(f"{'  '.join(p[:5] for p in PHASES):>20s}" for _ in hws))
    worst = float("inf")
    for name in names:
        spec = catalog.load(name)
        top = min(8192, spec.max_seq_len - 1)
        lo = min(512, top // 16)
        n = args.side
        seq = np.unique(np.rint(np.geomspace(lo, top, n)).astype(np.int64))
        if seq.size < n:  # few positions (T5: 512): evenly spaced instead (repeats past 512 - lo)
            seq = np.rint(np.linspace(lo, top, n)).astype(np.int64)
        seq = seq[:, np.newaxis]
        batch = np.arange(1, n + 1, dtype=np.int64)[np.newaxis, :]
        points = seq.size * batch.size
        cells, firsts = [], []
        for hw in hws.values():
            rates, first = [], []
            for phase in PHASES:
                t0 = clock()  # the first call: the spec's plan (grid_plan) and the profile's arrays built
                predict_grid(spec, phase, batch, seq, hw, "bf16")
                first.append(1e3 * (clock() - t0))
                best = float("inf")
                for _ in range(args.repeat):
                    t0 = clock()
                    predict_grid(spec, phase, batch, seq, hw, "bf16")
                    best = min(best, clock() - t0)
                rates.append(points / best / 1e6)
                worst = min(worst, rates[-1])
            cells.append("  ".join(f"{r:5.2f}" for r in rates))
            firsts.append("  ".join(f"{t:5.1f}" for t in first))
        print(f"{name:18s} {points:6d}  " + "  ".join(f"{c:>20s}" for c in cells), flush=True)
        print(f"{'  first call, ms':25s} " + "  ".join(f"{c:>20s}" for c in firsts), flush=True)
        if args.check:
            hw = next(iter(hws.values()))
            sample = [(int(s), int(b)) for s, b in zip(seq[::25, 0], batch[0, ::25], strict=False)]
            t0 = time.perf_counter()
            for s, b in sample:
                predict(analyze(spec, "train", batch=b, seq=s), hw)
            print(f"{'':18s} predict point by point (train, {hw.name}): "
                  f"{1e6 * (time.perf_counter() - t0) / len(sample):.0f} us a point")
    print(f"load average after: {load()}; slowest {worst:.2f} M points/s; freed heap kept "
          f"(malloc.keep_freed_heap): {kept}")


if __name__ == "__main__":
    main()
