"""Where a serving cell's engine step goes, component by component (docs/serving.md, "Llama 4 on
an H100: where the step's time goes").

    python bench/step_parts.py --spec llama-4-scout --gpu h100-sxm [--isl 128 --osl 2048] [--format json]

For each usable cell of bench/data/serving/trtllm_perf_overview.json that matches, the
deployment as bench/serving_validation.py sets it up (``setup``) and its run (``run``), then:

- the engine's memory per GPU (weights, activations, KV cache) and the requests it runs;
- one decode step at that batch (``n`` decoders at the mean context ISL + OSL / 2), split into
  the attention projections, the attention core, the routed experts, the shared expert, a dense
  FFN, the router, the LM head, the elementwise rest and the collectives, each the one-shape
  model's (``runtime.timing.predict``) as ``deploy.step`` sums them, the core as the step reads
  it (``deploy.step.step_times``);
- the physics floor of that step (the weights read once and the cache at full bandwidth) and
  the step the published throughput implies at the same batch (n / published tokens/s per GPU:
  an upper bound on the real step where the batch is right, the run's ramp and tail aside);
- one prefill step of a budget's worth of whole prompts (max num tokens), per token.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.components.key import Key, Role
from costmodel.deploy.step import Shard, comm_times, step_times
from costmodel.parallel.cluster import Cluster
from costmodel.runtime.timing import predict

_SV = importlib.util.spec_from_file_location("serving_validation",
                                             Path(__file__).resolve().parent / "serving_validation.py")
assert _SV is not None and _SV.loader is not None
sv = importlib.util.module_from_spec(_SV)
sys.modules.setdefault(_SV.name, sv)  # dataclasses look their module up by name
_SV.loader.exec_module(sv)


def part(key: Key) -> str:
    """The step's part a component belongs to."""
    if key.attention_core:
        return "attention core"
    if key.role is Role.head:
        return "lm head"
    if key.role is Role.router:
        return "router"
    if key.role is Role.projection:
        if key.in_attention:
            return "attention projections"
        return {"experts": "routed experts", "shared": "shared expert"}.get(key.part or "", "dense ffn")
    return "elementwise"


def step_parts(shard: Shard, cluster: Cluster, n: int, context: int) -> dict[str, float]:
    """Seconds of one decode step of `n` sequences at `context`, by part (``part``): the body and
    head as a prefill of n tokens, the core of the decode, the collectives (``deploy.step``)."""
    hw = shard.device(cluster)
    out: dict[str, float] = defaultdict(float)
    # (an FP8 checkpoint's head, embedding and router off the bf16 tables, as deploy.step reads them)
    rows = predict(shard.analyze("prefill", 1, n), hw, shard.kernels).rows
    for r in rows:
        if not r.key.attention_core:
            out[part(r.key)] += r.time_s
    if shard.ep > 1:  # every replica scores its tokens against all E experts (deploy.step)
        out["router"] *= shard.ep
    # the core as the step reads it (an fp8 cache at TensorRT-LLM's bf16 rate: ``Shard.cache_read``)
    times = step_times(shard, cluster, n, context, np.array([1.0]), (float(n),))
    out["attention core"] = float(times.part(times.core_decode, np.array([float(n)]))[0])
    out["collectives"] = float(comm_times(shard, cluster, np.array([float(n)]))[0])
    return dict(out)


def cell_parts(cell: dict[str, Any]) -> dict[str, Any]:
    s = sv.setup(cell)
    r = sv.run(s.shard, s.cluster, s.workload, s.engine, s.requests, s.gpus)
    n, context = max(1, round(r.running)), int(cell["isl"] + cell["osl"] // 2)
    parts = step_parts(s.shard, s.cluster, n, context)
    one = s.shard.analyze("prefill", 1, 1)
    kv = float(s.shard.analyze("prefill", 1, 16).total().kv_cache) / 16
    bw = s.cluster.hardware.memory_bandwidth
    budget = s.engine.max_tokens
    prompts = max(1, budget // int(cell["isl"]))
    prefill = predict(s.shard.analyze("prefill", prompts, int(cell["isl"])), s.shard.device(s.cluster),
                      s.shard.kernels)
    published = float(cell["output_tokens_per_s_per_gpu"])
    return {"cell": sv._label(cell), "error": r.tokens_per_s_per_gpu / published - 1,
            "memory_per_gpu": r.memory.to_dict(), "running": n, "context": context,
            "decode_step_s": parts, "decode_step_total_s": sum(parts.values()),
            "floor_s": (float(one.bytes_weights) + n * context * kv) / bw,
            "published_step_s": n / published,
            "prefill_tokens": prompts * int(cell["isl"]),
            "prefill_s_per_token": prefill.time_s / (prompts * int(cell["isl"]))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--isl", type=int)
    ap.add_argument("--osl", type=int)
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    cells = [c for c in sv.load("trtllm_perf_overview.json")
             if c.get("spec") == args.spec and c["gpu"] == args.gpu and not c.get("validation_skip")
             and (args.isl is None or c["isl"] == args.isl) and (args.osl is None or c["osl"] == args.osl)]
    if not cells:
        raise SystemExit(f"no usable cell of {args.spec} on {args.gpu} at those lengths")
    rows = [cell_parts(c) for c in cells]
    if args.format == "json":
        print(json.dumps(rows, indent=1))
        return
    for x in rows:
        m = x["memory_per_gpu"]
        print(f"{x['cell']}  error {x['error']:+.1%}  weights {m['weights'] / 2**30:.1f} GiB, "
              f"KV {m['kv_cache'] / 2**30:.1f} GiB, running {x['running']} at context {x['context']}")
        for k, v in sorted(x["decode_step_s"].items(), key=lambda kv: -kv[1]):
            print(f"    {k:22} {v * 1e3:7.2f} ms")
        print(f"    {'decode step':22} {x['decode_step_total_s'] * 1e3:7.2f} ms  (floor "
              f"{x['floor_s'] * 1e3:.2f}, published at this batch {x['published_step_s'] * 1e3:.2f})")
        print(f"    prefill of {x['prefill_tokens']} tokens: {x['prefill_s_per_token'] * 1e6:.1f} us a token")


if __name__ == "__main__":
    main()
