"""Benchmark: wall time of the `costmodel` CLI and of the library calls behind it.

    python bench/cli_speed.py [--repeat 10] [--against REV]

Prints the median and the best of repeated runs. The CLI figures include interpreter start-up
and every import (sympy is not imported by `analyze`: numbers are evaluated on integers).

``--against REV`` also times the same commands of an earlier revision (a temporary git
worktree, run through the same console script with ``PYTHONPATH`` pointing at it), each run
beside the current one, so both see the same load: a ratio taken on another day or at another
load average says more about the machine than the code. Each command runs once untimed first,
so Python's bytecode cache is warm where it may be written; where ``PYTHONDONTWRITEBYTECODE``
is set every run compiles every imported module from source, and the figures are larger (the
header says which).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> float | None:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - t0 if done.returncode == 0 else None


def wall(cmd: list[str], repeat: int, old: dict | None = None) -> tuple[float, float, float | None,
                                                                        float | None]:
    """Median and best of this checkout's runs, and of `old`'s (env, cwd) runs interleaved."""
    timed(cmd)  # warm the bytecode cache and the page cache
    if old:
        timed(cmd, **old)
    times: list[float] = []
    before: list[float | None] = []
    for _ in range(repeat):
        t = timed(cmd)
        if t is None:
            sys.exit("failed: " + " ".join(cmd))
        times.append(t)
        if old:
            before.append(timed(cmd, **old))
    then = [t for t in before if t is not None]
    if not then or len(then) < len(before):  # not asked, or the command is not in that revision
        return statistics.median(times), min(times), None, None
    return statistics.median(times), min(times), statistics.median(then), min(then)


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
    parser.add_argument("--against", metavar="REV", help="also time this git revision, run by run")
    args = parser.parse_args()
    exe = shutil.which("costmodel") or sys.exit("costmodel is not on PATH: pip install -e . first")
    root = Path(__file__).resolve().parent.parent
    old = None
    if args.against:
        tree = Path(tempfile.mkdtemp(prefix="costmodel-against-")) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(tree), args.against],
                       check=True)
        old = {"env": dict(os.environ, PYTHONPATH=str(tree)), "cwd": str(tree)}
    bytecode = ("not written (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE")
                else "cached")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; bytecode {bytecode}")

    rows = []
    for cmd in (
        ["analyze", "llama-2-7b"],
        ["analyze", "llama-3.1-405b", "--phase", "decode"],
        ["analyze", "t5-11b", "--format", "json"],
        ["analyze", "gemma-3-27b", "--phase", "prefill", "--format", "markdown"],
        ["analyze", "llama-2-7b", "--hardware", "h100-sxm"],
        ["inference", "llama-3-8b", "--hardware", "h100-sxm", "--seq", "2048", "--output-tokens", "256",
         "--batch", "1,8,64"],
        ["attention", "llama-3-8b"],
        ["formula", "llama-2-7b", "--asymptotic"],
        ["sweep", "llama-3-8b", "--over", "seq=512:131072", "--over", "batch=1:256", "--format", "json"],
        ["formula", "llama-2-7b", "--quantity", "flops", "--phase", "prefill"],
        ["formula", "gemma-2-9b", "--quantity", "kv_cache", "--phase", "decode", "--symbolic"],
        ["list"],
    ):
        rows.append(("costmodel " + " ".join(cmd), *wall([exe, *cmd], args.repeat, old)))

    from costmodel import analyze, formula
    from costmodel.catalog import load

    spec = load("llama-3.1-405b")
    rows.append(("analyze() in-process, one phase", *inproc(lambda: analyze(spec, "prefill"), args.repeat),
                 None, None))
    rows.append(("formula() in-process, flops prefill", *inproc(lambda: formula(spec, "flops", "prefill"),
                                                                args.repeat),
                 None, None))
    if old:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", old["cwd"]], check=True)

    width = max(len(r[0]) for r in rows)
    against = f"   {args.against[:10]:>10}: median   best    ratio" if old else ""
    print(f"{'command':{width}}  median     best   ({args.repeat} runs){against}")
    for name, med, best, then_med, then_best in rows:
        line = f"{name:{width}}  {med * 1e3:7.1f} ms {best * 1e3:7.1f} ms"
        if then_med is not None and then_best is not None:
            line += f"            {then_med * 1e3:7.1f} ms {then_best * 1e3:7.1f} ms  {med / then_med:.2f}x"
        elif old:
            line += "            (not in that revision)"
        print(line)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
