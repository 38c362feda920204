"""Benchmark: wall time of the `costmodel` CLI and of the library calls behind it.

    python bench/cli_speed.py [--repeat 10]

Prints the median and the best of repeated runs. The CLI figures include interpreter start-up
and every import (sympy is not imported by `analyze`: numbers are evaluated on integers).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def inproc(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("costmodel") or sys.exit("costmodel is not on PATH: pip install -e . first")

    rows = []
    for cmd in (
        ["analyze", "llama-2-7b"],
        ["analyze", "llama-3.1-405b", "--phase", "decode"],
        ["analyze", "t5-11b", "--format", "json"],
        ["analyze", "gemma-3-27b", "--phase", "prefill", "--format", "markdown"],
        ["analyze", "llama-2-7b", "--hardware", "h100-sxm"],
        ["attention", "llama-3-8b"],
        ["formula", "llama-2-7b", "--asymptotic"],
        ["sweep", "llama-3-8b", "--over", "seq=512:131072", "--over", "batch=1:256", "--format", "json"],
        ["formula", "llama-2-7b", "--quantity", "flops", "--phase", "prefill"],
        ["formula", "gemma-2-9b", "--quantity", "kv_cache", "--phase", "decode", "--symbolic"],
        ["list"],
    ):
        med, best = wall([exe, *cmd], args.repeat)
        rows.append(("costmodel " + " ".join(cmd), med, best))

    from costmodel import analyze, formula
    from costmodel.catalog import load

    spec = load("llama-3.1-405b")
    rows.append(("analyze() in-process, one phase", *inproc(lambda: analyze(spec, "prefill"), args.repeat)))
    rows.append(("formula() in-process, flops prefill", *inproc(lambda: formula(spec, "flops", "prefill"), args.repeat)))

    width = max(len(r[0]) for r in rows)
    print(f"{'command':{width}}  median     best   ({args.repeat} runs)")
    for name, med, best in rows:
        print(f"{name:{width}}  {med * 1e3:7.1f} ms {best * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
