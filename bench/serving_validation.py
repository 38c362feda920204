"""Predicted against published serving measurements, cell by cell (docs/serving.md, "Checked
against measurements"; the data: docs/serving-data.md).

    python bench/serving_validation.py [--cells all|subset] [--format text|json]

Reads bench/data/serving/trtllm_perf_overview.json (TensorRT-LLM's perf-overview throughput
cells) and measured_serving.json (TensorRT-LLM v0.14 online serving, MLPerf v4.1). Each cell runs
``costmodel.deploy.benchmark.run`` with the engine as published:

- the spec (its context raised to ISL + OSL where the served model's is longer), the GPU's
  bundled cluster, TP; attention data parallel (the page's DEPn) as n attention replicas of one
  GPU with the experts over n GPUs (EP n); MoE without it as TP over the experts too;
- TensorRT-LLM's own MoE and MLA tables (``deploy --engine trtllm``'s ``kernel_framework``:
  specs/kernels/<gpu>/moe.trtllm.json, mla.trtllm.json, and absorbed MLA's kv_b products off
  mla_bmm.trtllm.json), the GEMM and attention tables' defaults;
- weights at fp8 run the fp8 GEMM tables (``dtype fp8``), held as the ModelOpt checkpoints hold
  them (``costmodel.precision``: the LM head, embedding and router in bf16, read off the bf16
  tables), fp16 the bf16 ones; DeepSeek R1's and Qwen3's own block-scaled FP8 checkpoints
  (``BLOCK_FP8``) at ``--weights-dtype fp8-block``, their linear layers off TRT-LLM's fp8_block GEMM
  table and their experts off its fp8_block MoE table; NVIDIA's ModelOpt NVFP4 checkpoints (the
  page's fp4 cells on B200 but gpt-oss's) at ``--weights-dtype nvfp4`` with bf16 activations, their
  linear layers off TRT-LLM's nvfp4 GEMM table at the fp4 peak and their experts off its nvfp4 MoE
  table; gpt-oss's MXFP4
  checkpoints (``MXFP4``) their experts at ``--weights-dtype mxfp4`` off TRT-LLM's w4a16_mxfp4
  MoE table, the rest at bf16, whatever precision column the page lists them under; the KV cache as the
  cell says, ``auto`` as the checkpoint holds it: fp8 for NVIDIA's ModelOpt ``*-FP8`` checkpoints
  (Llama 3.x, Llama 4, Mistral: their ``kv_cache_quant_algo`` is FP8) and ``*-FP4`` ones (assumed:
  ModelOpt's hf_ptq.py exports an fp8 cache by default; not read off each checkpoint), the
  activation dtype (bf16) for checkpoints without a KV quantization (Qwen3's own FP8, GPT-OSS's
  MXFP4);
- throughput cells (trtllm-bench, max throughput): max batch and max num tokens as the cell
  gives them, else trtllm-bench's heuristic (``benchmark.trtllm_bench_settings``) at the KV
  fraction the run defaults to (0.95 at v0.17's engine build, 0.90 at run time); TensorRT-LLM's
  memory rule (the KV cache a fraction of what is free, 32-token blocks), no chunked prefill
  (trtllm-bench's default), all `num_requests` requests queued at once (a finite run);
- rate cells (v0.14 online, 500 requests): an open loop at the request rate (INF: all at
  once, a finite run), trtllm-build's default engine (max batch 2048, max num tokens 8192).

Cells marked ``validation_skip``, with no spec, or missing what the model needs (PP > 1, MLPerf's
unpublished lengths and TP) are listed as left out, with why. Prints a per-cell table, the
median and worst |error| per (spec, GPU) and overall, and the rate cells' TTFT, ITL and
throughput in their own table. ``--cells subset``: the fixed subset tests/test_serving_check.py
holds (``SUBSET``, chosen by a rule, docs/serving.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from costmodel import catalog
from costmodel.deploy.benchmark import Run, run, trtllm_bench_settings
from costmodel.deploy.engine import ENGINES, Engine
from costmodel.deploy.step import Shard
from costmodel.deploy.workload import Workload, fixed
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import Cluster, cluster_paths, load_cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS, default_kernels, default_mla

FOLDER = Path(__file__).resolve().parent / "data" / "serving"
NO_KV_QUANT = ("qwen3-235b-a22b", "gpt-oss-120b", "gpt-oss-20b")  # FP8 / MXFP4 checkpoints, no KV scales
#: Checkpoints whose routed experts are MXFP4 and the rest bf16 (config.json quantization_config
#: {"quant_method": "mxfp4"}): read at --weights-dtype mxfp4, the experts off TRT-LLM's
#: w4a16_mxfp4 MoE table (moe/mxfp4@trtllm), attention and the rest at bf16.
MXFP4 = ("gpt-oss-120b", "gpt-oss-20b")
#: Checkpoints of block-scaled fp8 (config.json quantization_config {"quant_method": "fp8",
#: "weight_block_size": [128, 128]}: deepseek-ai/DeepSeek-R1-0528, Qwen/Qwen3-235B-A22B-FP8; the
#: cells' notes say so): read at --weights-dtype fp8-block (``costmodel.precision``).
BLOCK_FP8 = ("deepseek-v3", "qwen3-235b-a22b")
#: The page's fp4 cells are NVIDIA's ModelOpt NVFP4 checkpoints (nvidia/*-FP4; "Models quantized with
#: ModelOpt", the page's how_measured), read at --weights-dtype nvfp4 with bf16 activations; gpt-oss's
#: fp4 cells are its own MXFP4 checkpoint (``MXFP4``). DeepSeek R1's NVIDIA FP4 checkpoints leave
#: attention's projections unquantised but for wo in the -v2 revision (``costmodel.precision``):
#: read here at nvfp4 like the rest, which holds attention 4x narrower than the checkpoint does; with
#: its fp8 cache at --dtype fp8 (a latent cache is held at the activations' width, as its fp8 cells),
#: the LM head, embedding and router off the bf16 tables (``timing.runs_wide``).
NVFP4 = "nvfp4"
#: gpt-oss's fp4 cells (B200, GB200): TensorRT-LLM runs the MXFP4 experts on Blackwell with MXFP8
#: activations (aiconfigurator's b200 ``w4a8_mxfp4_mxfp8`` rows, 4-6x faster than ``w4a16_mxfp4``
#: there: 0.28 against 1.19 ms for gpt-oss-120b's experts at 256 tokens), a kernel no width here reads.
BLACKWELL_MXFP4 = ("gpt-oss on Blackwell: TensorRT-LLM's MXFP4 experts with MXFP8 activations "
                   "(w4a8_mxfp4_mxfp8) have no width here; read at w4a16_mxfp4 the cells come out "
                   "half as fast")
#: trtllm-bench's bytes per parameter by quantisation (tensorrt_llm/bench/build/tuning.py
#: BYTES_PER_ELEM: NO_QUANT 2.0, FP8 1.0, FP8_BLOCK_SCALES 1.0, NVFP4 0.5).
BENCH_BYTES = {"fp8": 1.0, "fp4": 0.5}
RUN_FRACTION = 0.90  # trtllm-bench throughput --kv_cache_free_gpu_mem_fraction's default
BUILD_FRACTION = 0.95  # calc_engine_setting's default, which v0.17's engine build kept
TRTLLM = ENGINES["trtllm"]  # `deploy --engine trtllm`: pages of 32, the free-memory rule, XQA's fp8 cache,
# TensorRT-LLM's own MoE and MLA tables
ONLINE_ENGINE = (2048, 8192)  # trtllm-build's default max batch and max num tokens (v0.14's online runs)


def load(name: str, folder: Path = FOLDER) -> list[dict[str, Any]]:
    return [dict(c, file=name) for c in json.loads((folder / name).read_text())["cells"]]


DENSE = ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b")
LENGTHS = ((1000, 1000), (2048, 128))


def subset(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixed subset tests/test_serving_check.py holds, by a rule that reads no result: the
    dense specs' usable cells of ISL/OSL 1000/1000 and 2048/128 at the latest
    release that published their (spec, GPU). MoE specs are left to the full table: their
    checkpoints' block-scaled fp8 and MXFP4 experts have no width here (docs/serving.md, where the
    model is weakest; block-scaled fp8 has one since, MXFP4 too)."""
    usable = [c for c in cells if not c.get("validation_skip") and c.get("spec") in DENSE]
    latest: dict[tuple[str, str], int] = {}
    for c in usable:
        key = (c["spec"], c["gpu"])
        latest[key] = max(latest.get(key, 0), ORDER.index(c["release"]))
    return [c for c in usable if (c["isl"], c["osl"]) in LENGTHS
            and ORDER.index(c["release"]) == latest[(c["spec"], c["gpu"])]]


ORDER = ("v0.14.0", "v0.17", "v0.19", "v0.20", "v1.0", "post-v1.0")


@dataclass(frozen=True)
class Setup:
    shard: Shard
    cluster: Cluster
    workload: Workload
    engine: Engine
    requests: int | None
    gpus: int
    how: str  # where the engine's settings came from


def _clusters() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in sorted(cluster_paths().items()):
        out.setdefault(load_cluster(str(path)).device, name)
    return out


CLUSTERS: dict[str, str] = {}


def setup(cell: dict[str, Any]) -> Setup:
    """The deployment, engine and workload of `cell` as published (module docstring);
    AnalysisError: why the model cannot run it."""
    if cell.get("validation_skip"):
        raise AnalysisError(cell["validation_skip"])
    if not cell.get("spec"):
        raise AnalysisError("no bundled spec of this model")
    if cell.get("isl") is None or cell.get("tp") is None:
        raise AnalysisError("ISL/OSL or TP not published (MLPerf: variable lengths, TP not in the summary)")
    if (cell.get("pp") or 1) != 1:
        raise AnalysisError("pipeline parallelism is not modelled")
    CLUSTERS.update(CLUSTERS or _clusters())
    if cell["gpu"] not in CLUSTERS:
        raise AnalysisError(f"no cluster profile of {cell['gpu']}")
    cl = load_cluster(CLUSTERS[cell["gpu"]])
    spec = catalog.load(cell["spec"])
    isl, osl = int(cell["isl"]), int(cell["osl"])
    if isl + osl > spec.max_seq_len:  # the served model's context (Llama 3.1/3.3: 128K), same architecture
        spec = spec.model_copy(update={"max_seq_len": isl + osl})
    tp, gpus = int(cell["tp"]), int(cell.get("gpus") or cell["tp"])
    ep = int(cell.get("ep") or 1)
    if cell.get("attention_dp"):
        tp, ep = 1, gpus  # DEPn: n attention replicas of one GPU, experts over the n
    weights = cell["weights"]
    mxfp4 = cell["spec"] in MXFP4  # the checkpoint's experts, whatever the page's precision column
    if mxfp4 and weights == "fp4":
        raise AnalysisError(BLACKWELL_MXFP4)
    dtype = "fp8" if weights == "fp8" and not mxfp4 else "bf16"
    kv = cell.get("kv_dtype") or "auto"
    nvfp4 = weights == "fp4" and not mxfp4
    if kv == "auto":
        kv = "fp8" if nvfp4 else "bf16" if (cell["spec"] in NO_KV_QUANT or weights != "fp8") else "fp8"
    kv = "bf16" if kv in ("fp16", "bf16") else kv
    if nvfp4 and kv == "fp8" and spec.mla is not None:
        dtype = "fp8"  # DeepSeek R1 FP4's fp8 latent cache: at the activations' width
    held = ("mxfp4" if mxfp4 else NVFP4 if nvfp4
            else "fp8-block" if weights == "fp8" and cell["spec"] in BLOCK_FP8 else None)
    widths = Widths(held, None if kv == dtype else kv)
    hw = cl.hardware
    shard = Shard(spec, tp, ep, dtype, widths, KERNELS[default_kernels(hw, "serve")], default_mla(hw),
                  TRTLLM.cache_read, TRTLLM.kernel_framework)
    rate = cell.get("request_rate")
    online = "request_rate" in cell
    if online:
        batch, tokens = ONLINE_ENGINE
        how = "trtllm-build defaults"
        workload = Workload(fixed(isl), fixed(osl), rate=float(rate) if rate else None)
    elif cell.get("max_batch") and cell.get("max_num_tokens"):
        batch, tokens, how = int(cell["max_batch"]), int(cell["max_num_tokens"]), "published"
        workload = Workload(fixed(isl), fixed(osl), cell.get("concurrency"))
    elif cell["spec"] in NO_KV_QUANT[1:]:
        # GPT-OSS's MXFP4 checkpoint is not in TUNED_QUANTS (tensorrt_llm/bench/build/build.py):
        # trtllm-bench keeps TorchLlmArgs' defaults
        batch, tokens, how = 2048, 8192, "TorchLlmArgs defaults"
        workload = Workload(fixed(isl), fixed(osl), cell.get("concurrency"))
    else:
        v017 = cell.get("release") == "v0.17"
        params = _params(spec)
        batch, tokens = trtllm_bench_settings(
            spec, params, int(cell["tp"]), 1, isl, osl, BENCH_BYTES.get(weights, 2.0),
            1.0 if kv == "fp8" else 2.0, hw.memory_bytes, BUILD_FRACTION if v017 else RUN_FRACTION,
            gib_params=not v017)
        how = "trtllm-bench heuristic"
        workload = Workload(fixed(isl), fixed(osl), cell.get("concurrency"))
    # v0.17's TensorRT engine flow chunks the context (its throughput command's default,
    # --enable_chunked_context); the PyTorch flow sizes the budget for whole prompts instead
    chunked = cell.get("release") == "v0.17"
    engine = replace(TRTLLM, memory_fraction=RUN_FRACTION, max_batch=batch, max_tokens=max(tokens, batch),
                     chunked=chunked)
    requests = cell.get("num_requests") if (rate is None) else None
    return Setup(shard, cl, workload, engine, int(requests) if requests else None, gpus, how)


def _params(spec: Any) -> int:
    from costmodel.analysis import analyze

    return int(analyze(spec, "prefill", batch=1, seq=1).total().params)


@dataclass(frozen=True)
class Result:
    cell: dict[str, Any]
    setup: Setup | None
    run: Run | None
    why: str | None  # left out

    @property
    def error(self) -> float | None:
        if self.run is None:
            return None
        return self.run.tokens_per_s_per_gpu / float(self.cell["output_tokens_per_s_per_gpu"]) - 1


def check(cell: dict[str, Any]) -> Result:
    try:
        s = setup(cell)
        r = run(s.shard, s.cluster, s.workload, s.engine, s.requests, s.gpus)
    except AnalysisError as e:
        return Result(cell, None, None, str(e))
    return Result(cell, s, r, None)


def _label(c: dict[str, Any]) -> str:
    dep = f"DEP{c['gpus']}" if c.get("attention_dp") else f"TP{c['tp']}"
    lengths = f"{c['isl']:>5}/{c['osl']:<5}"
    return f"{c['spec']:16} {c['gpu']:9} {c.get('release', ''):9} {dep:5} {c['weights']:4} {lengths}"


def summary(results: list[Result]) -> dict[str, tuple[int, float, float]]:
    """(spec, GPU) -> (cells, median |error|, worst |error|), and 'all'."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.error is not None:
            groups[f"{r.cell['spec']} {r.cell['gpu']}"].append(abs(r.error))
            groups["all"].append(abs(r.error))
    return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", choices=("all", "subset"), default="all")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    through = load("trtllm_perf_overview.json")
    if args.cells == "subset":
        through = subset(through)
    online = load("measured_serving.json")
    results = [check(c) for c in through]
    rated = [check(c) for c in online] if args.cells == "all" else []
    if args.format == "json":
        print(json.dumps({"throughput": [_row(r) for r in results], "online": [_row(r) for r in rated],
                          "summary": {k: {"cells": n, "median_abs_error": m, "worst_abs_error": w}
                                      for k, (n, m, w) in summary(results).items()}}, indent=1))
        return
    print(f"{'spec':16} {'gpu':9} {'release':9} {'par':5} {'w':4} {'ISL/OSL':>11} {'engine':>12} "
          f"{'predicted':>9} {'published':>9} {'error':>7}")
    left = []
    for r in results:
        if r.run is None or r.setup is None:
            left.append(r)
            continue
        e = r.setup.engine
        print(f"{_label(r.cell)} {e.max_batch:>5}/{e.max_tokens:<6} {r.run.tokens_per_s_per_gpu:>9,.0f} "
              f"{float(r.cell['output_tokens_per_s_per_gpu']):>9,.0f} {r.error:>+7.1%}")
    print(f"\n{'(spec, GPU)':30} {'cells':>5} {'median':>7} {'worst':>7}")
    for k, (n, med, worst) in summary(results).items():
        print(f"{k:30} {n:>5} {med:>7.1%} {worst:>7.1%}")
    reasons: dict[str, int] = defaultdict(int)
    for r in left + [r for r in rated if r.run is None]:
        reasons[str(r.why)] += 1
    print("\nleft out:")
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:>4}  {why}")
    if rated:
        print(f"\n{'online (v0.14, 500 requests)':34} {'rate':>5} {'TTFT ms':>15} {'ITL ms':>13} "
              f"{'tok/s/GPU':>15}")
        for r in rated:
            if r.run is None:
                continue
            c = r.cell
            rate = str(c["request_rate"] or "INF")
            print(f"{c['spec']:12} {c['gpu']:9} TP{c['tp']} {c['isl']:>5}/{c['osl']:<5} {rate:>5} "
                  f"{r.run.ttft_mean * 1e3:>7.0f} {c['ttft_ms_mean']:>7.0f} "
                  f"{r.run.tpot_mean * 1e3:>6.1f} {c['itl_ms_mean']:>6.0f} "
                  f"{r.run.tokens_per_s_per_gpu:>7,.0f} {c['output_tokens_per_s_per_gpu']:>7,.0f}")


def _row(r: Result) -> dict[str, Any]:
    c = r.cell
    out: dict[str, Any] = {k: c.get(k) for k in ("spec", "gpu", "release", "tp", "gpus", "attention_dp",
                                                 "weights", "kv_dtype", "isl", "osl", "request_rate",
                                                 "output_tokens_per_s_per_gpu")}
    if r.run is None or r.setup is None:
        return out | {"left_out": r.why}
    e = r.setup.engine
    return out | {"max_batch": e.max_batch, "max_num_tokens": e.max_tokens, "engine_from": r.setup.how,
                  "predicted": r.run.to_dict(), "error": r.error}


if __name__ == "__main__":
    main()
