"""A finite benchmark run of one deployment, as ``trtllm-bench throughput`` and online serving
clients run one, and the engine settings trtllm-bench's tuning heuristic picks.

**The heuristic** (``trtllm_bench_settings``): when a run sets neither max batch size nor max
num tokens, trtllm-bench picks both from the dataset's mean ISL and OSL
(NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``, ``calc_engine_setting`` and
``finetune_setting``, read at commit 04cba882084a25665e7f80f5bda71b35b9790b6f and in an earlier
stored version that divides the parameter count by 1000^3 instead of 1024^3; the same rule
otherwise):

- bytes per KV token = 2 x layers x max(TP, KV heads) x head size x KV bytes / 2^30 (GiB; head
  size is the config's ``head_dim``, else hidden / heads);
- engine size = parameters x weight bytes / 2^30 (fp8: 1, else 2); the KV share
  ``kv_cache_gpu_mem_fraction`` (0.95 at the TensorRT engine build, v0.17, which passes none;
  the PyTorch flow passes the run's ``--kv_cache_free_gpu_mem_fraction``, default 0.90,
  ``tensorrt_llm/bench/benchmark/throughput.py``) of (TP x PP x device GiB - engine size) holds
  kv_max_requests = that / (bytes per token x (ISL + OSL));
- raw batch = min(kv_max_requests, 4096) / PP; raw tokens = min(raw batch x (1 + ISL / OSL),
  32768); max batch rounds the raw batch up to 32 (at least 64) below 256, to 128 below 1024,
  else to 256; max num tokens rounds the raw tokens up to 256 (at least 2048) below 4096, to
  512 below 8192, else to 1024;
- the PyTorch flow without chunked prefill (trtllm-bench's default, ``--enable_chunked_context``
  off) raises max num tokens to at least max ISL + max batch
  (``tensorrt_llm/bench/benchmark/utils/general.py``, ``get_settings``, commit
  0171265edef1c67ef334e0db2427148161aa2815).

**A finite run** (``run``): trtllm-bench queues all N requests at once and reports output tokens
over the whole run, from the first request to the last token; a steady state alone overstates it
by the run's ramp-up and tail. In a fluid model of the run, per attention replica (N_r of the N
requests): prompts are admitted at the steady rate from the start, so the run lasts
N_r / X (X the steady state's requests/s) plus the tail: the last admitted requests decode their
m = O - 1 steps after the last admission while the decoders drain from n to 0, m steps at n / 2
decoders. Where the prefill budget bounds the steady state (prompts queue for it), the first m
steps run with the decoders growing from 0 to n, each at n / 2 decoders beside a full prefill;
where the max batch or the pages bound it, all of the first batch is admitted at once and there
is no such ramp. The mean TTFT of an all-at-once run adds the mean wait in the engine's queue,
(N_r - c)^2 / (2 N_r X) (the first c admitted at once, the rest at the rate X).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodel.deploy.engine import (
    Engine,
    EngineMemory,
    closed_loop,
    decode_context,
    engine_memory,
    open_loop,
    shape_of,
)
from costmodel.deploy.step import Shard, step_times
from costmodel.deploy.workload import Workload
from costmodel.errors import AnalysisError
from costmodel.parallel.cluster import Cluster
from costmodel.spec import Spec

GIB = 1024**3
MAX_BATCH_CAP = 4096  # finetune_setting: "Cap total batch size to avoid decoder buffer size ..."
MAX_TOKENS_CAP = 32768  # "Cap num tokens to avoid TRT activation buffer becoming too large"


def trtllm_bench_settings(spec: Spec, params: int, tp: int, pp: int, isl: int, osl: int, weight_bytes: float,
                          kv_bytes: float, device_bytes: float, fraction: float, chunked: bool = False,
                          gib_params: bool = True) -> tuple[int, int]:
    """(max batch, max num tokens) as trtllm-bench's heuristic picks them (module docstring);
    `gib_params`: the engine size in GiB (False: the earlier version's parameters / 1000^3)."""
    mla = spec.mla is not None
    head = spec.d_model // spec.n_heads if mla else spec.head_dim  # HF's head_dim, else hidden / heads
    layers = spec.decoder_layers
    per_token = 2 * layers * max(tp, spec.n_kv_heads) * head * kv_bytes / GIB
    engine_size = params * weight_bytes / (GIB if gib_params else 1000**3)
    available = device_bytes / GIB * tp * pp - engine_size
    max_requests = available * fraction / (per_token * (isl + osl))
    if max_requests < 1:
        raise AnalysisError(f"trtllm-bench: the KV cache holds {max_requests:.2f} requests on TP{tp}: "
                            "the model does not fit")
    raw_bs = min(max_requests, MAX_BATCH_CAP) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), MAX_TOKENS_CAP)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        max_tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        max_tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        max_tokens = 1024 * math.ceil(raw_tokens / 1024)
    if not chunked:
        max_tokens = max(max_tokens, isl + max_bs)
    return max_bs, max_tokens


@dataclass(frozen=True)
class Run:
    """One deployment's run: the steady state and, over a finite run, what a benchmark reports
    (per GPU and per attention replica; seconds)."""

    memory: EngineMemory
    running: float  # requests in flight per attention replica
    steady_tokens_per_s_per_gpu: float
    tokens_per_s_per_gpu: float  # over the finite run (the steady state without `requests`)
    ttft_mean: float
    tpot_mean: float
    requests_per_s: float  # the whole deployment's, over the run
    seconds: float | None  # the run's length (None: no finite run)

    def to_dict(self) -> dict[str, Any]:
        return {"memory_per_gpu": self.memory.to_dict(), "running_per_engine": self.running,
                "steady_output_tokens_per_s_per_gpu": self.steady_tokens_per_s_per_gpu,
                "output_tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "ttft_mean_s": self.ttft_mean,
                "tpot_mean_s": self.tpot_mean, "requests_per_s": self.requests_per_s,
                "run_seconds": self.seconds}


def run(shard: Shard, cluster: Cluster, workload: Workload, engine: Engine, requests: int | None = None,
        gpus: int | None = None) -> Run:
    """`shard`'s deployment on `gpus` GPUs (default one replica, TP x EP) serving `workload` with
    `engine`'s settings; `requests`: a finite run of that many (module docstring)."""
    engine.check()
    workload.check(shard.spec)
    gpus = gpus or shard.tp * shard.ep
    engines = gpus // shard.tp  # attention replicas
    mem = engine_memory(shard, cluster.hardware.memory_bytes, engine, workload)
    if not mem.fits:
        raise AnalysisError(f"TP{shard.tp} EP{shard.ep}: the weights and activations leave no KV page "
                            f"for one request ({mem.weights / GIB:.1f} GiB of weights per GPU)")
    if not engine.chunked and workload.prompt.hi > engine.max_tokens:
        raise AnalysisError(f"--max-num-tokens: {engine.max_tokens} is below the longest prompt "
                            f"({workload.prompt.hi}) and prefill is not chunked")
    w = shape_of(workload, engine)
    cap = np.array([float(min(engine.max_batch, mem.max_running))])
    budget = np.array([float(engine.max_tokens)])
    s = engine.prefix_sharing
    prompts = np.array([1.0, w.prompt / (1 - s), *(v / (1 - s) for v in w.quantile_prompts.values())])
    exact = (engine.max_tokens, *(min(max(p, 1.0), engine.max_tokens) for p in (w.prompt,
                                                                                 *w.quantile_prompts.values())))
    times = step_times(shard, cluster, engine.max_tokens + engine.max_batch, decode_context(workload),
                       prompts, exact)
    if workload.rate is not None:
        loop = open_loop(times, np.array([workload.rate / engines]), cap, budget, w)
        if not loop.stable[0]:
            raise AnalysisError(f"--rate: {workload.rate:g} requests/s overloads TP{shard.tp} EP{shard.ep}")
    else:
        offered = float(workload.concurrency / engines) if workload.concurrency else float(engine.max_batch)
        if requests is not None:
            offered = min(offered, requests / engines)
        loop = closed_loop(times, np.array([offered]), cap, budget, w)
    x = float(loop.requests_per_s[0])  # per attention replica
    steady = x * w.output / shard.tp
    ttft, seconds, per_gpu = float(loop.ttft_mean[0]), None, steady
    if requests is not None and workload.rate is None:
        n_r = requests / engines
        c = float(loop.running[0])
        seen = float(loop.decoding[0])
        half = np.array([seen / 2])
        zero = np.zeros(1)
        drain = w.steps * float(times.step(half, zero, zero, half)[0])
        ramp = 0.0
        if float(loop.chunk_share[0]) >= 1.0:  # prefill-bound: the decoders grow over the first m steps
            chunk = loop.chunk
            core = float(loop.tpot_mixed[0]) - float(times.step(np.array([seen]), chunk, zero,
                                                                  np.array([seen]))[0])
            grow = float(times.step(half, chunk, np.full(1, core), half)[0])
            ramp = w.steps * (grow - float(loop.tpot_mixed[0]))
        seconds = n_r / x + drain + ramp
        per_gpu = n_r * w.output / seconds / shard.tp
        queued = max(n_r - min(c, n_r), 0.0)
        ttft = float(loop.ttft_mean[0]) - float(loop.queued[0]) / x + queued**2 / (2 * n_r * x)
    rate = per_gpu * shard.tp * engines / w.output
    return Run(mem, float(loop.running[0]), steady, per_gpu, ttft, float(loop.tpot[0]), rate, seconds)
