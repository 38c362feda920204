"""Predicted against published serving throughput: output tokens/s per GPU, cell by cell.

    python bench/serving_validation.py [FOLDER]

Reads every ``*.json`` of FOLDER (default bench/data/serving/): a list of cells (or
``{"cells": [...]}``), each {spec, gpu, tp, pp, ep, weights, kv_dtype, isl, osl, max_batch,
max_num_tokens, concurrency, output_tokens_per_s_per_gpu, source}. Each cell runs ``deploy``'s
model with the engine as published: the spec, the cluster whose device is ``gpu``, that TP and
EP on tp x ep GPUs, max batch and token budget, the concurrency (closed loop; none: at max
batch), fixed ISL/OSL; fp8 weights run the fp8 GEMM tables (``--dtype fp8``, as TensorRT-LLM
runs an fp8 checkpoint), the cache at ``kv_dtype``. Prints predicted, published, the error
and its source per cell, then the median and worst |error|. A cell the model cannot run yet
(PP > 1, an EP that does not divide the experts, no cluster of that GPU) is listed as skipped
with why. Prints the reason and exits 0 when there is no data.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from costmodel import catalog
from costmodel.deploy.search import search
from costmodel.deploy.workload import Workload, fixed
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import cluster_paths, load_cluster
from costmodel.precision import Widths

FOLDER = Path(__file__).resolve().parent / "data" / "serving"


def cells(folder: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        items = data.get("cells", []) if isinstance(data, dict) else data
        out += [dict(c, file=path.name) for c in items]
    return out


def clusters() -> dict[str, str]:
    """GPU profile -> the first bundled cluster of it."""
    out: dict[str, str] = {}
    for name, path in cluster_paths().items():
        out.setdefault(load_cluster(str(path)).device, name)
    return out


def predict(cell: dict[str, Any], by_gpu: dict[str, str]) -> float:
    """Output tokens/s per GPU as ``deploy`` predicts the cell; AnalysisError: why it cannot."""
    if cell.get("pp", 1) != 1:
        raise AnalysisError("pipeline parallelism is not modelled yet")
    if cell["gpu"] not in by_gpu:
        raise AnalysisError(f"no cluster profile of {cell['gpu']}")
    spec, cl = catalog.load(cell["spec"]), load_cluster(by_gpu[cell["gpu"]])
    tp, ep = int(cell["tp"]), int(cell.get("ep", 1) or 1)
    weights = cell.get("weights") or "bf16"
    dtype = "fp8" if weights == "fp8" else "bf16"
    widths = Widths(None if weights in ("fp8", "bf16") else weights, cell.get("kv_dtype"))
    concurrency = cell.get("concurrency")
    tokens = int(cell.get("max_num_tokens") or 8192)
    batch = int(cell.get("max_batch") or 2048)
    r = search(spec, cl, tp * ep, Workload(fixed(int(cell["isl"])), fixed(int(cell["osl"])),
                                           int(concurrency) if concurrency else None),
               batches=(min(batch, tokens),), tokens=(tokens,), dtype=dtype, widths=widths)
    match = [d for d in r.deployments if d.tp == tp and d.ep == ep]
    if not match:
        why = "; ".join(r.skipped) or "memory"
        raise AnalysisError(f"TP{tp} EP{ep} does not fit or does not run ({why})")
    return match[0].tokens_per_s_per_gpu


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    found = cells(folder) if folder.is_dir() else []
    if not found:
        print(f"skipped: no published serving cells in {folder} (*.json); nothing to compare")
        return
    by_gpu = clusters()
    errors = []
    print(f"{'spec':18} {'gpu':10} {'TP':>3} {'EP':>3} {'w':5} {'ISL/OSL':>11} {'conc':>5} "
          f"{'predicted':>10} {'published':>10} {'error':>7}  source")
    for c in found:
        head = (f"{c['spec']:18} {c['gpu']:10} {c['tp']:>3} {c.get('ep', 1):>3} {str(c.get('weights')):5} "
                f"{str(c['isl']) + '/' + str(c['osl']):>11} {str(c.get('concurrency') or '-'):>5}")
        try:
            got = predict(c, by_gpu)
        except (AnalysisError, KeyError, ValueError) as e:
            print(f"{head} skipped: {e}")
            continue
        want = float(c["output_tokens_per_s_per_gpu"])
        err = got / want - 1
        errors.append(abs(err))
        print(f"{head} {got:>10,.0f} {want:>10,.0f} {err:>+7.1%}  {c.get('source', '')}")
    if errors:
        print(f"\n{len(errors)} cells: median |error| {statistics.median(errors):.1%}, "
              f"worst {max(errors):.1%}")


if __name__ == "__main__":
    main()
