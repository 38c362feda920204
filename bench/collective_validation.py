"""The α-β collective model against NCCL measured inside one node, per bundled cluster.

    python bench/collective_validation.py            # markdown to stdout

For every cluster profile whose device names measured tables (specs/kernels/<gpu>/collectives.json:
NCCL's nccl-tests binaries run by NVIDIA's aiconfigurator collector, aiconfigurator-core 0.12.0),
each kind, each measured GPU count and each measured message size: the α-β model's time
(``costmodel.parallel.collectives.modelled``, the cluster profile's links and NCCL's tuning
latencies) over the measured one, minus 1. The measured times are read straight from the JSON
file, not through the lookup. Sizes are nccl-tests' ``size`` (``-b``), which is what
``collectives.collective`` calls ``size`` for every kind (the module's docstring). The model's
in-node branch is the one every in-node collective took before issue 21, so this prints those
before-figures at any later commit (bench/results/collectives-2026-12-03-before.md).

Then two checks of the lookup's interpolation, leave one out: each interior message size predicted
from its two neighbours (log-log, as ``costmodel.devices.kernels`` interpolates), and 4 GPUs
predicted from 2 and 8 (log GPU count): how far a shape between measured points may be off.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from costmodel.parallel.cluster import cluster_paths, load_cluster
from costmodel.parallel.collectives import modelled

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def read_tables(gpu: str) -> tuple[dict[str, dict[tuple[int, int], float]], dict[str, str]]:
    data = json.loads((ROOT / "specs" / "kernels" / gpu / "collectives.json").read_text())
    out: dict[str, dict[tuple[int, int], float]] = {}
    for t in data["tables"]:
        gpus, sizes = t["axes"]["gpus"], t["axes"]["bytes"]
        out[t["kind"]] = {(g, b): t["time_s"][i * len(sizes) + j]
                          for i, g in enumerate(gpus) for j, b in enumerate(sizes)}
    return out, data["source"]


def kib(b: float) -> str:
    return f"{b / 2**20:g} MiB" if b >= 2**20 else f"{b / 2**10:g} KiB" if b >= 2**10 else f"{b:g} B"


def model_errors(name: str) -> list[str]:
    cluster = load_cluster(name)
    gpu = cluster.hardware.kernels
    assert gpu is not None
    tables, src = read_tables(gpu)
    lines = [f"### {name} ({gpu}: NCCL {src['version']} on {src['device']})", "",
             "| kind | GPUs | median abs(error) | worst abs(error) (at) | too slow: points, worst (at) "
             "| median error, <= 64 KiB | median error, >= 64 MiB |", "|---|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        for n in sorted({g for g, _ in tables[kind]}):
            errs = [(modelled(cluster, kind, "tp", n, b).time_s / t - 1, b)
                    for (g, b), t in sorted(tables[kind].items()) if g == n]
            worst = max(errs, key=lambda e: abs(e[0]))
            slow = [e for e in errs if e[0] > 0]
            top = max(slow, default=None)
            over = f"{len(slow)}, {100 * top[0]:+.0f}% ({kib(top[1])})" if top else "0"
            small = statistics.median(e for e, b in errs if b <= 2**16)
            large = statistics.median(e for e, b in errs if b >= 2**26)
            lines.append(f"| {kind} | {n} | {100 * statistics.median(abs(e) for e, _ in errs):.0f}% "
                         f"| {100 * worst[0]:+.0f}% ({kib(worst[1])}) | {over} | {100 * small:+.0f}% "
                         f"| {100 * large:+.0f}% |")
    return lines


def interpolation_errors(gpu: str) -> str:
    """Leave one out: interior sizes from their neighbours; 4 GPUs from 2 and 8."""
    tables, _ = read_tables(gpu)
    by_size, by_gpus = [], []
    for t in tables.values():
        for (n, b), time in t.items():
            lo, hi = t.get((n, b // 2)), t.get((n, b * 2))
            if lo is not None and hi is not None:
                by_size.append(abs(math.sqrt(lo * hi) / time - 1))  # the midpoint in log-log
            if n == 4 and (2, b) in t and (8, b) in t:
                by_gpus.append(abs(math.sqrt(t[2, b] * t[8, b]) / time - 1))
    return (f"| {gpu} | {100 * statistics.median(by_size):.1f}% | {100 * max(by_size):.1f}% "
            f"| {100 * statistics.median(by_gpus):.1f}% | {100 * max(by_gpus):.1f}% |")


def main() -> None:
    names = [n for n in sorted(cluster_paths()) if load_cluster(n).hardware.kernels]
    out = ["## The α-β model against the measured tables (model / measured - 1)", ""]
    for name in names:
        out += [*model_errors(name), ""]
    out += ["## The lookup's interpolation, leave one out", "",
            "| gpu | size from neighbours: median | worst | 4 GPUs from 2 and 8: median | worst |",
            "|---|---:|---:|---:|---:|"]
    out += [interpolation_errors(load_cluster(n).hardware.kernels or "") for n in names]
    print("\n".join(out))


if __name__ == "__main__":
    main()
    sys.exit(0)
