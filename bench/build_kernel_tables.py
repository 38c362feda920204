"""Build the measured kernel tables of specs/kernels/ from NVIDIA's aiconfigurator measurements.

Source: the PyPI wheel aiconfigurator-core 0.12.0 (Apache-2.0; GitHub ai-dynamo/aiconfigurator,
``aic-core/src/aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/*.parquet``),
kernels timed on real GPUs with TRT-LLM, vLLM and SGLang (each folder's collection_meta.yaml
says how). This script reads the wheel (never the aiconfigurator runtime) and writes, per GPU:

- ``gemm.json``: (M x K) @ (K x N) by M, N, K, per dtype (bf16; fp8 where measured; fp8-block,
  TRT-LLM's 128 x 128 block-scaled fp8 GEMM, ``BLOCK_GEMM``; nvfp4, TRT-LLM's NVFP4 GEMM,
  ``NVFP4_GEMM``, where measured: B200, GB200);
- ``attention.json``: fused (flash) attention, prefill (``context_attention``: a causal pass over
  ``seq`` prompt tokens) and decode (``generation_attention``: one token against a cache of
  ``seq`` tokens, the new one included: ``DECODE_SEQ`` says how each collector's ``step`` counts
  them), by batch and seq, one table per (head_dim, heads, kv_heads, kv dtype) the data measured,
  window 0 (full attention);
- ``collectives.json``: NCCL all-reduce, all-gather, reduce-scatter and all-to-all inside one
  node, by GPU count and message bytes (the ``half`` collection: message_size counts 2-byte
  elements);
- ``holdout.json``: the same op classes measured by another framework, kept apart for the
  cross-validation of bench/kernel_validation.py (never read by the model);
- ``moe.<framework>.json``, ``mla.<framework>.json`` (``ENGINE_FRAMEWORKS``: ``trtllm``): a
  serving framework's own MoE layer and MLA core, which ``deploy --engine trtllm`` reads in place
  of the defaults (``build_framework``);
- ``mla_bmm.<framework>.json``: the framework's two per-head batched products of absorbed MLA
  (``mla_bmm``: "pre", q_nope @ W_UK, tokens x 128 @ 128 x 512 a head; "post", the latent output
  @ W_UV, tokens x 512 @ 512 x 128), by heads on the GPU and tokens, per dtype; read only by that
  framework's engine (``mla_bmm_tables``).

Which framework builds a table, and why: vLLM's, for every op class it measured. Its GEMMs are
``torch.nn.functional.linear`` (cuBLAS through PyTorch, what eager PyTorch and Megatron-LM run)
and its attention is FlashAttention (FA3 on Hopper, FA2 on Ampere), the kernel `--kernels fused`
assumes. SGLang's and TRT-LLM's collections of the same GPU are the holdout.

A grid point the collection lacks (a few GEMM shapes; prefill and decode at a batch x seq past
what the collector ran) is filled from the nearest measured point below it on the batch (M)
axis, scaled linearly with the work (the GPU is full there), and listed in ``filled``: the
lookup says a shape that reads one is extrapolated.

Usage (pyarrow is the optional ``tables`` extra, never a core dependency):

    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
    python bench/build_kernel_tables.py /tmp/aic/aiconfigurator_core-0.12.0-*.whl
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "specs" / "kernels"
PACKAGE = "aiconfigurator-core 0.12.0"
REPOSITORY = "github.com/ai-dynamo/aiconfigurator (Apache-2.0)"
PREFIX = "aiconfigurator_core/systems/data/"

#: Our profile name -> aiconfigurator's system folder.
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm",
           "gb200": "gb200"}
#: Their dtype names -> ours.
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8-block",
          "w4a16_mxfp4": "mxfp4", "nvfp4": "nvfp4"}
#: MoE dtypes a serving framework's own tables add: TRT-LLM's MXFP4 experts with bf16 activations
#: (gpt-oss's checkpoints, ``costmodel.precision``'s mxfp4), measured on Hopper and Blackwell.
ENGINE_MOE_DTYPES = ("w4a16_mxfp4",)
#: Block-scaled fp8 (DeepSeek-V3's and Qwen3's own checkpoints: E4M3 weights with an fp32 scale per
#: 128 x 128 block, activations quantised per token in groups of 128; ``costmodel.precision``'s
#: fp8-block): TRT-LLM's ``fp8_block`` GEMM (``BLOCK_GEMM``: ``torch_flow`` on Hopper, ``deepgemm``
#: on B200) into ``gemm.json``, and its ``fp8_block`` MoE into ``moe.trtllm.json``, measured on
#: H100, H200 and B200 (none on A100, which has no fp8). No other framework's rows in the holdout:
#: their bands are bench/kernel_validation.py's interpolation (every other point left out).
BLOCK_GEMM = ("trtllm", "fp8_block")
ENGINE_BLOCK_MOE_DTYPES = ("fp8_block",)
#: NVFP4 (NVIDIA's ModelOpt ``*-FP4`` checkpoints: E2M1 weights with an E4M3 scale per 16 along K
#: and an fp32 scale a tensor, activations quantised to NVFP4 as they run; ``costmodel.precision``'s
#: nvfp4): TRT-LLM's ``nvfp4`` GEMM (``NVFP4_GEMM``: ``torch_flow``) into ``gemm.json`` and its
#: ``nvfp4`` MoE (``moe_torch_flow_cutlass``, the kernel with the most rows) into
#: ``moe.trtllm.json``, measured on B200 alone of the GPUs here (Hopper and Ampere have no FP4 tensor
#: cores). vLLM's and SGLang's nvfp4 GEMMs (FlashInfer's CuTe DSL kernel) and MoE layers go into the
#: holdout (``fp4_holdout``): the bands of bench/kernel_validation.py.
NVFP4_GEMM = ("trtllm", "nvfp4")
ENGINE_FP4_MOE_DTYPES = ("nvfp4",)
#: Which kernel of a GEMM collection is the framework's plain dense path, per dtype.
GEMM_KERNELS = {
    "vllm": {
        "bfloat16": ("torch.nn.functional.linear", "vllm_default"),
        "fp8": ("CutlassFP8ScaledMMLinearKernel",),
        "nvfp4": ("FlashInferCuteDslNvFp4LinearKernel",),
    },
    "sglang": {
        "bfloat16": ("sglang_torch_linear", "sglang"),
        "fp8": ("sglang_sgl_kernel_fp8_scaled_mm", "sglang"),
        "nvfp4": ("sglang_flashinfer_cutedsl_nvfp4",),
    },
    "trtllm": {"bfloat16": ("torch_flow",), "fp8": ("torch_flow",), "fp8_block": ("torch_flow", "deepgemm"),
               "nvfp4": ("torch_flow",)},
}
NCCL_OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
}
#: A decode row's ``step`` -> the tokens its kernel attends (``seq``), per collector (aiconfigurator's
#: collector/<framework>/collect_attn.py): vLLM's records the sequence length it builds
#: (``seq_lens = [step]``, the new token included); SGLang's and TRT-LLM's the tokens cached
#: before the new one (``seq_lens = step + 1``; ``num_cached_tokens_per_seq = step``).
DECODE_SEQ = {"vllm": 0, "sglang": 1, "trtllm": 1}
SIG = 4  # significant digits kept of each latency (the collections' run-to-run spread is larger)


def _round(x: float) -> float:
    return float(f"{x:.{SIG}g}")


def _version_key(v: str) -> tuple[Any, ...]:
    return tuple(
        int(p) if p.isdigit() else p for p in v.replace("rc", ".rc.").replace("post", ".post.").split(".")
    )


class Wheel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        self.zip = zipfile.ZipFile(path)
        self.names = [n for n in self.zip.namelist() if n.startswith(PREFIX)]

    def versions(self, system: str, op: str, framework: str, file: str) -> list[str]:
        """The collections of `file` for (system, op, framework), newest first."""
        base = f"{PREFIX}{system}/{op}/{framework}/"
        found = {
            n[len(base) :].split("/")[0] for n in self.names if n.startswith(base) and n.endswith("/" + file)
        }
        return sorted(found, key=_version_key, reverse=True)

    def read(
        self, system: str, op: str, framework: str, version: str, file: str
    ) -> tuple[Any, dict[str, Any]]:
        import pyarrow.parquet as pq

        path = f"{PREFIX}{system}/{op}/{framework}/{version}/{file}"
        table = pq.read_table(io.BytesIO(self.zip.read(path))).to_pylist()
        source = {
            "repository": REPOSITORY,
            "package": PACKAGE,
            "wheel_sha256": self.sha256,
            "path": path,
            "framework": framework,
            "version": version,
            "device": table[0].get("device", system) if table else system,
        }
        return table, source


def _grid(
    points: dict[tuple[float, ...], float], axes: list[list[float]], batch_axis: int
) -> tuple[list[float], list[int]]:
    """Row-major times over the product of `axes`; a missing point is filled from the nearest
    measured point with a smaller coordinate on `batch_axis`, scaled by the ratio of that axis
    (work linear in the batch once the GPU is full), else from the nearest larger one, unscaled
    (less work takes no longer); returns (values, filled flat indices)."""
    shape = [len(a) for a in axes]
    values, filled = [], []
    for flat in range(math.prod(shape)):
        idx, rem = [], flat
        for n in reversed(shape):
            idx.append(rem % n)
            rem //= n
        idx.reverse()
        coord = tuple(axes[d][i] for d, i in enumerate(idx))
        t = points.get(coord)
        if t is None:
            t = _fill(points, axes, idx, coord, batch_axis)
            filled.append(flat)
        values.append(_round(t))
    return values, filled


def _fill(
    points: dict[tuple[float, ...], float],
    axes: list[list[float]],
    idx: list[int],
    coord: tuple[float, ...],
    batch_axis: int,
) -> float:
    """A missing point from its nearest measured neighbour: below it on the batch axis (then on
    the others, for a GEMM whose every dimension is linear work), scaled by the ratio; else above
    it on the batch axis, unscaled."""
    for axis in [batch_axis] + [a for a in range(len(axes)) if a != batch_axis]:
        for j in range(idx[axis] - 1, -1, -1):
            below = list(coord)
            below[axis] = axes[axis][j]
            tb = points.get(tuple(below))
            if tb is not None:
                return tb * coord[axis] / axes[axis][j]
        if len(axes) < 3:
            break  # attention and collectives: only the batch (or bytes) axis is linear work
    for j in range(idx[batch_axis] + 1, len(axes[batch_axis])):
        above = list(coord)
        above[batch_axis] = axes[batch_axis][j]
        ta = points.get(tuple(above))
        if ta is not None:
            return ta  # a smaller batch is no slower than a larger one
    if len(axes) == 3:
        # A GEMM whose N and K both lie in a corner never measured (TRT-LLM's fp8_block collection
        # has no N, K in {51200, 65536} together): the measured point below it on every axis with
        # the most work, scaled by the work (linear in M, N and K).
        below = [p for p in points if all(a <= c for a, c in zip(p, coord, strict=True))]
        if below:
            p = max(below, key=math.prod)
            return points[p] * math.prod(coord) / math.prod(p)
    raise SystemExit(f"grid point {coord} has no measured neighbour")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def gemm_rows(
    wheel: Wheel, system: str, framework: str, dtype: str
) -> tuple[dict[tuple[float, ...], float], dict[str, Any]] | None:
    kernels = GEMM_KERNELS[framework].get(dtype, ())
    for version in wheel.versions(system, "gemm", framework, "gemm_perf.parquet"):
        rows, source = wheel.read(system, "gemm", framework, version, "gemm_perf.parquet")
        by_shape: dict[tuple[float, ...], list[float]] = defaultdict(list)
        kernel = None
        for r in rows:
            if r["gemm_dtype"] == dtype and r["kernel_source"] in kernels:
                by_shape[(r["m"], r["n"], r["k"])].append(r["latency"] * 1e-3)  # ms -> s
                kernel = r["kernel_source"]
        if by_shape:
            return {s: _median(t) for s, t in by_shape.items()}, {**source, "kernel": kernel}
    return None


def gemm_table(points: dict[tuple[float, ...], float], source: dict[str, Any], dtype: str) -> dict[str, Any]:
    axes = [sorted({p[d] for p in points}) for d in range(3)]
    values, filled = _grid(points, axes, 0)
    return {
        "dtype": DTYPES[dtype],
        "source": source,
        "axes": {"M": axes[0], "N": axes[1], "K": axes[2]},
        "time_s": values,
        "filled": filled,
    }


def attention_rows(
    wheel: Wheel, system: str, framework: str, phase: str
) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    file = f"{'context' if phase == 'prefill' else 'generation'}_attention_perf.parquet"
    for version in wheel.versions(system, "attention", framework, file):
        rows, source = wheel.read(system, "attention", framework, version, file)
        kept = [
            r
            for r in rows
            if r.get("window_size", 0) == 0
            and r.get("beam_width", 1) == 1
            and r["attn_dtype"] in ("bfloat16", "float16")
        ]
        if not kept:
            continue
        # One kernel per collection: the one that measured the most shapes (FA3 over FA4 on Hopper).
        counts: dict[str, int] = defaultdict(int)
        for r in kept:
            counts[r["kernel_source"]] += 1
        kernel = max(counts, key=lambda k: counts[k])
        return [r for r in kept if r["kernel_source"] == kernel], {**source, "kernel": kernel}
    return None


def _seq(r: dict[str, Any], phase: str, framework: str) -> int:
    """The tokens a row's kernel attends: the prompt in prefill, the cache with the new token in
    decode."""
    return int(r["isl"]) if phase == "prefill" else int(r["step"]) + DECODE_SEQ[framework]


def attention_tables(rows: list[dict[str, Any]], phase: str, framework: str) -> list[dict[str, Any]]:
    """One (batch x seq) table per (head_dim, heads, kv_heads, kv dtype) measured."""
    configs: dict[tuple[Any, ...], dict[tuple[float, ...], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        seq = _seq(r, phase, framework)
        key = (r["head_dim"], r["num_heads"], r["num_key_value_heads"], DTYPES.get(r["kv_cache_dtype"], "?"))
        configs[key][(r["batch_size"], seq)].append(r["latency"] * 1e-3)
    tables = []
    for (head_dim, heads, kv_heads, kv_dtype), pts in sorted(configs.items()):
        if kv_dtype == "?" or heads % kv_heads or len(pts) < 4:
            continue
        points = {s: _median(t) for s, t in pts.items()}
        axes = [sorted({p[0] for p in points}), sorted({p[1] for p in points})]
        if len(axes[0]) < 2 or len(axes[1]) < 2:
            continue
        try:
            values, filled = _grid(points, axes, 0)
        except SystemExit:
            continue
        tables.append(
            {
                "head_dim": head_dim,
                "heads": heads,
                "kv_heads": kv_heads,
                "kv_dtype": kv_dtype,
                "axes": {"batch": axes[0], "seq": axes[1]},
                "time_s": values,
                "filled": filled,
            }
        )
    return tables


def nccl(wheel: Wheel, system: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    versions = wheel.versions(system, "comm", "nccl", "nccl_perf.parquet")
    if not versions:
        return None
    rows, source = wheel.read(system, "comm", "nccl", versions[0], "nccl_perf.parquet")
    source = {**source, "framework": "nccl", "kernel": "NCCL (nccl-tests style, one node)"}
    tables = []
    for op, ours in NCCL_OPS.items():
        pts: dict[tuple[float, ...], list[float]] = defaultdict(list)
        for r in rows:
            if r["op_name"] == op and r["nccl_dtype"] == "half":
                pts[(r["num_gpus"], r["message_size"] * 2)].append(r["latency"] * 1e-3)
        if not pts:
            continue
        points = {s: _median(t) for s, t in pts.items()}
        axes = [sorted({p[0] for p in points}), sorted({p[1] for p in points})]
        values, filled = _grid(points, axes, 1)
        tables.append(
            {"kind": ours, "axes": {"gpus": axes[0], "bytes": axes[1]}, "time_s": values, "filled": filled}
        )
    return tables, source


def holdout(wheel: Wheel, system: str, primary: str) -> dict[str, Any]:
    """Another framework's measurements of the same GPU, as (shape, seconds) points: the
    cross-validation's truth. A deterministic thinning keeps the file small."""
    out: dict[str, Any] = {}
    for framework in ("sglang", "trtllm"):
        if framework == primary:
            continue
        for dtype in ("bfloat16", "fp8"):
            got = gemm_rows(wheel, system, framework, dtype)
            if got:
                points, source = got
                keep = sorted(points)[:: max(1, len(points) // 400)]
                out.setdefault(f"gemm/{DTYPES[dtype]}", []).append(
                    {"source": source, "points": [[*s, _round(points[s])] for s in keep]}
                )
        for phase in ("prefill", "decode"):
            got_a = attention_rows(wheel, system, framework, phase)
            if got_a:
                rows, source = got_a
                pts: dict[tuple[Any, ...], list[float]] = defaultdict(list)
                for r in rows:
                    seq = _seq(r, phase, framework)
                    pts[
                        (
                            r["batch_size"],
                            seq,
                            r["num_heads"],
                            r["num_key_value_heads"],
                            r["head_dim"],
                            DTYPES.get(r["kv_cache_dtype"], "?"),
                        )
                    ].append(r["latency"] * 1e-3)
                keys = sorted(k for k in pts if k[5] != "?" and k[2] % k[3] == 0)
                keep = keys[:: max(1, len(keys) // 400)]
                out.setdefault(f"attention/{phase}", []).append(
                    {"source": source, "points": [[*k, _round(_median(pts[k]))] for k in keep]}
                )
    return out


# --- MoE (grouped GEMMs) and MLA ------------------------------------------------------------------

#: The routing a MoE table is read at: balanced (every expert the same share of the T x top_k
#: rows), else the least skewed power law a collection has (A100's vLLM collection has no balanced
#: rows).
DISTRIBUTIONS = ("balanced", "power_law_1.01", "power_law_1.2")
#: MoE kernels that are not the gated (SwiGLU) experts every other row times.
MOE_SKIP = ("nongated",)
#: The latent-attention sizes every MLA row of the wheel has: DeepSeek-V3's (aiconfigurator's
#: collector/<framework>/collect_mla.py builds its modules from that config).
MLA_DIMS = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
#: Who builds the MLA tables: vLLM's collection is the whole MLA module (projections, the core
#: and the output projection in one time; mla_*_module_perf.parquet), not the attention core
#: the time model asks for, so SGLang's core (its FlashAttention-3 MLA backend) is taken, and
#: TRT-LLM's where SGLang measured none (A100).
MLA_FRAMEWORKS = ("sglang", "trtllm")
#: The latent sizes of the mla_bmm products (aiconfigurator's collector/<framework>/
#: collect_mla_bmm.py: qk_nope_head_dim 128, kv_lora_rank 512, v_head_dim 128, DeepSeek-V3's).
MLA_BMM_DIMS = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "v_head_dim": 128}
MLA_BMM_OPS = {"mla_gen_pre": "pre", "mla_gen_post": "post"}
#: Serving frameworks whose own MoE and MLA kernels get tables of their own beside the defaults
#: (``moe.<framework>.json``, ``mla.<framework>.json``): TensorRT-LLM's fused MoE op
#: (``moe_torch_flow_cutlass`` on Hopper and Blackwell; ``moe_torch_flow`` on A100) and its MLA
#: core, which ``deploy --engine trtllm`` runs (bench/serving_validation.py checks it).
ENGINE_FRAMEWORKS = ("trtllm",)
#: The most GPUs (EP x TP) a framework's own MoE table keeps rows of: one node of 8. TensorRT-LLM's
#: collection measured EP 2-256 and TP 2-32 on one GPU (collector/trtllm/collect_moe.py: a
#: ``Mapping`` with ``moe_ep_size`` and ``moe_tp_size`` on rank 0, ``num_tokens`` hidden states
#: with router logits over all ``num_experts`` entering the op, the E/EP local experts of width
#: inter/TP; no all-to-all, ``reduce_results=False``).
MOE_MAX_GPUS = 8


def moe_rows(
    wheel: Wheel, system: str, framework: str, dtype: str, distribution: str | None = None
) -> tuple[dict[tuple[int, ...], dict[float, float]], dict[str, Any]] | None:
    """One framework's MoE layer times at one GPU, no parallelism (EP = TP = 1): per (hidden,
    inter, experts, top_k), tokens -> seconds; the newest collection with such rows, the kernel
    that measured the most of them, at the routing `distribution` (else the first of
    ``DISTRIBUTIONS`` it has)."""
    for version in wheel.versions(system, "moe", framework, "moe_perf.parquet"):
        got = _moe_version(wheel, system, framework, version, dtype, distribution)
        if got:
            return {cfg[:4]: pts for cfg, pts in got[0].items() if cfg[4:] == (1, 1)}, got[1]
    return None


def _moe_version(
    wheel: Wheel, system: str, framework: str, version: str, dtype: str, distribution: str | None,
    parallel: bool = False,
) -> tuple[dict[tuple[int, ...], dict[float, float]], dict[str, Any]] | None:
    """``moe_rows`` of one collection, keyed (hidden, inter, experts, top_k, ep, tp); None where
    it has no gated EP = TP = 1 rows of `dtype`. The kernel and routing are chosen on those rows;
    `parallel`: with the same kernel's rows at EP x TP up to ``MOE_MAX_GPUS`` GPUs."""
    rows, source = wheel.read(system, "moe", framework, version, "moe_perf.parquet")
    gated = [
        r for r in rows if r["moe_dtype"] == dtype and not any(s in r["kernel_source"] for s in MOE_SKIP)
    ]
    kept = [r for r in gated if r["moe_tp_size"] == 1 and r["moe_ep_size"] == 1]
    if parallel:
        gated = [r for r in gated if r["moe_tp_size"] * r["moe_ep_size"] <= MOE_MAX_GPUS]
    else:
        gated = kept
    have = {r["distribution"] for r in kept}
    dist = distribution if distribution in have else next((d for d in DISTRIBUTIONS if d in have), None)
    if dist is None:
        return None
    counts: dict[str, int] = defaultdict(int)
    for r in kept:
        if r["distribution"] == dist:
            counts[r["kernel_source"]] += 1
    kernel = max(counts, key=lambda k: counts[k])
    pts: dict[tuple[int, ...], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in gated:
        if r["distribution"] == dist and r["kernel_source"] == kernel:
            cfg = (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"], r["moe_ep_size"],
                   r["moe_tp_size"])
            pts[cfg][r["num_tokens"]].append(r["latency"] * 1e-3)
    out = {cfg: {t: _median(v) for t, v in by.items()} for cfg, by in pts.items() if len(by) >= 2}
    if not any(cfg[4:] == (1, 1) for cfg in out):
        return None
    layout = ({"layout": "EP = TP = 1; a configuration's ep and tp where above 1 (tokens: the EP group's)"}
              if parallel else {"ep": 1, "tp": 1})
    return out, {**source, "kernel": kernel, "distribution": dist, **layout}


MoERows = dict[tuple[int, ...], dict[float, float]]  # (hidden, inter, experts, top_k, ep, tp) -> tokens -> s
#: A layout's rows are dropped as a failed measurement when they are this many times slower (the
#: median over the tokens all share) than the median of the other layouts of the same configuration
#: on as many GPUs, themselves within ``OUTLIER_AGREE`` of each other (at least two of them). EP x
#: TP = g splits the same experts' bytes and, at balanced routing, the same FLOPs over each GPU
#: whatever the split, so a factor of 3.5-6 between layouts is no layout's cost; a kernel that fails
#: to tune runs slow, never below the floor. TRT-LLM 1.3.0rc20 on H100 and H200: 10 of 870 layouts
#: (Llama 4 Scout's fp8 experts at EP 4 on an H200, 5.4x its TP 4 and EP 2 x TP 2 twins, among them).
OUTLIER_SLOW = 2.5
OUTLIER_AGREE = 1.5


def slow_outliers(rows: MoERows) -> dict[tuple[int, ...], float]:
    """The layouts ``OUTLIER_SLOW`` drops: configuration (with its ep, tp) -> its median ratio to
    the other layouts on as many GPUs."""
    groups: dict[tuple[int, ...], list[tuple[int, ...]]] = defaultdict(list)
    for cfg in rows:
        if cfg[4] * cfg[5] > 1:
            groups[cfg[:4] + (cfg[4] * cfg[5],)].append(cfg)
    out = {}
    for layouts in groups.values():
        for cfg in layouts:
            others = [rows[c] for c in layouts if c != cfg]
            if len(others) < 2:
                continue
            tokens = set(rows[cfg]).intersection(*others)
            if not tokens:
                continue
            agree = max(_median([a[t] / b[t] for t in tokens]) for a in others for b in others if a is not b)
            ratio = _median([rows[cfg][t] / _median([o[t] for o in others]) for t in tokens])
            if ratio >= OUTLIER_SLOW and agree <= OUTLIER_AGREE:
                out[cfg] = ratio
    return out


def merged_moe_rows(
    wheel: Wheel, system: str, framework: str, dtype: str
) -> tuple[MoERows, dict[str, Any], dict[tuple[int, ...], dict[str, Any]]] | None:
    """``moe_rows`` of the newest collection with its rows at EP and TP above 1 (``_moe_version``'s
    `parallel`) less the failed layouts (``slow_outliers``, named in the source), and the
    configurations and layouts only an older collection of the same
    framework measured (same kernel, same routing), each with its own source: TRT-LLM 1.3.0rc20
    lacks DeepSeek-V3's 7,168 x 2,048 x 256 experts at bf16 and fp8, which 1.3.0rc10 measured (on
    the configurations both measured, rc10 / rc20 per configuration: medians 0.998-1.05 on H100
    and H200)."""
    newest = None
    for version in wheel.versions(system, "moe", framework, "moe_perf.parquet"):
        newest = _moe_version(wheel, system, framework, version, dtype, None, parallel=True)
        if newest:
            break
    if newest is None:
        return None
    by_cfg, source = newest
    merged, older = dict(by_cfg), {}
    for version in wheel.versions(system, "moe", framework, "moe_perf.parquet"):
        got = _moe_version(wheel, system, framework, version, dtype, source["distribution"], parallel=True)
        if not got or got[1]["kernel"] != source["kernel"] or version == source["version"]:
            continue
        for cfg, pts in got[0].items():
            if cfg not in merged:
                merged[cfg] = pts
                older[cfg] = {"path": got[1]["path"], "version": version}
    dropped = slow_outliers(merged)
    if dropped:
        source = {**source, "dropped": [
            {"hidden": c[0], "inter": c[1], "experts": c[2], "topk": c[3], "ep": c[4], "tp": c[5],
             "slower": round(r, 2)} for c, r in sorted(dropped.items())],
            "dropped_why": f"at least {OUTLIER_SLOW}x slower than the other layouts on as many GPUs, which "
                           f"agree within {OUTLIER_AGREE}x (bench/build_kernel_tables.py, OUTLIER_SLOW)"}
    return {c: p for c, p in merged.items() if c not in dropped}, source, older


def moe_tables(wheel: Wheel, system: str, framework: str = "vllm") -> list[dict[str, Any]]:
    """A framework's MoE layer per dtype (vLLM's ``fused_experts``: the gate/up grouped GEMM, the
    activation, the down grouped GEMM and the weighted sum over top_k; TRT-LLM's fused MoE op
    likewise; routing excluded), one tokens axis per (hidden, inter, experts, top_k) measured.
    vLLM's from its newest collection alone (``moe.json``); another framework's (``moe.<framework>
    .json``) with the configurations older collections add (``merged_moe_rows``), each naming its
    own collection."""
    out = []
    engine_only = ENGINE_MOE_DTYPES + ENGINE_BLOCK_MOE_DTYPES + ENGINE_FP4_MOE_DTYPES
    for dtype in ("bfloat16", "fp8", *(engine_only if framework != "vllm" else ())):
        if framework == "vllm":
            single = moe_rows(wheel, system, framework, dtype)
            got = None if single is None else ({(*c, 1, 1): p for c, p in single[0].items()}, single[1])
            older: dict[tuple[int, ...], dict[str, Any]] = {}
        else:
            merged = merged_moe_rows(wheel, system, framework, dtype)
            got = None if merged is None else merged[:2]
            older = {} if merged is None else merged[2]
        if not got:
            continue
        by_cfg, source = got
        configs = []
        for cfg, pts in sorted(by_cfg.items()):
            hidden, inter, experts, topk, ep, tp = cfg
            tokens = sorted(pts)
            configs.append(
                {
                    "hidden": hidden,
                    "inter": inter,
                    "experts": experts,
                    "topk": topk,
                    **({"ep": ep, "tp": tp} if (ep, tp) != (1, 1) else {}),
                    **({"source": older[cfg]} if cfg in older else {}),
                    "axes": {"tokens": tokens},
                    "time_s": [_round(pts[t]) for t in tokens],
                    "filled": [],
                }
            )
        out.append({"dtype": DTYPES[dtype], "source": source, "configs": configs})
    return out


def mla_rows(
    wheel: Wheel, system: str, framework: str, phase: str
) -> tuple[dict[str, dict[tuple[float, ...], float]], dict[str, Any]] | None:
    """One framework's MLA attention core (context: prefill; generation: absorbed decode), per
    KV cache dtype: (heads on the GPU, batch, seq) -> seconds; the newest collection."""
    file = f"{'context' if phase == 'prefill' else 'generation'}_mla_perf.parquet"
    for version in wheel.versions(system, "mla", framework, file):
        rows, source = wheel.read(system, "mla", framework, version, file)
        pts: dict[str, dict[tuple[float, ...], list[float]]] = defaultdict(lambda: defaultdict(list))
        kernels = set()
        for r in rows:
            if r["mla_dtype"] not in ("bfloat16", "float16") or r["kv_cache_dtype"] not in DTYPES:
                continue
            seq = int(r["isl"]) if phase == "prefill" else int(r["step"]) + DECODE_SEQ[framework]
            shape = (r["num_heads"], r["batch_size"], seq)
            pts[DTYPES[r["kv_cache_dtype"]]][shape].append(r["latency"] * 1e-3)
            kernels.add(r["kernel_source"])
        if pts:
            out = {kv: {s: _median(t) for s, t in by.items()} for kv, by in pts.items()}
            return out, {**source, "kernel": "/".join(sorted(kernels)), **MLA_DIMS}
    return None


def mla_tables(
    wheel: Wheel, system: str, frameworks: tuple[str, ...] = MLA_FRAMEWORKS
) -> tuple[dict[str, Any], str | None]:
    """The MLA core per phase from the first of `frameworks` that measured it, one
    (heads, batch, seq) table per KV cache dtype; and the framework taken."""
    out: dict[str, Any] = {}
    taken = None
    for framework in frameworks:
        for phase in ("prefill", "decode"):
            got = mla_rows(wheel, system, framework, phase)
            if not got or phase in out or taken not in (None, framework):
                continue
            by_kv, source = got
            taken = framework
            tables = []
            for kv_dtype, points in sorted(by_kv.items()):
                axes = [sorted({p[d] for p in points}) for d in range(3)]
                values, filled = _grid(points, axes, 1)
                tables.append(
                    {
                        "kv_dtype": kv_dtype,
                        "axes": {"heads": axes[0], "batch": axes[1], "seq": axes[2]},
                        "time_s": values,
                        "filled": filled,
                    }
                )
            out[phase] = {"source": source, "tables": tables}
    return out, taken


BmmPoints = dict[tuple[str, str], dict[tuple[float, ...], float]]  # (op, dtype) -> {(heads, tokens): s}


def mla_bmm_rows(
    wheel: Wheel, system: str, framework: str
) -> tuple[BmmPoints, dict[tuple[str, str], dict[str, Any]]] | None:
    """One framework's absorbed-MLA products (``mla_bmm_perf``), the newest collection: (op,
    dtype) -> {(heads, tokens): seconds}, and each table's source (its kernel_source)."""
    file = "mla_bmm_perf.parquet"
    for version in wheel.versions(system, "mla_bmm", framework, file):
        rows, source = wheel.read(system, "mla_bmm", framework, version, file)
        pts: dict[tuple[str, str], dict[tuple[float, ...], list[float]]]
        pts = defaultdict(lambda: defaultdict(list))
        kernels: dict[tuple[str, str], set[str]] = defaultdict(set)
        for r in rows:
            if r["op_name"] not in MLA_BMM_OPS or r["bmm_dtype"] not in DTYPES:
                continue
            key = (MLA_BMM_OPS[r["op_name"]], DTYPES[r["bmm_dtype"]])
            pts[key][(r["num_heads"], r["num_tokens"])].append(r["latency"] * 1e-3)
            kernels[key].add(r["kernel_source"])
        if pts:  # a shape measured twice (SGLang's H100 collection): the median
            out = {k: {s: _median(t) for s, t in by.items()} for k, by in pts.items()}
            return out, {k: {**source, "kernel": "/".join(sorted(kernels[k])), **MLA_BMM_DIMS} for k in out}
    return None


def mla_bmm_tables(wheel: Wheel, system: str, framework: str) -> list[dict[str, Any]]:
    """`framework`'s absorbed-MLA products, one (heads, tokens) table per (op, dtype); [] where
    it measured none."""
    got = mla_bmm_rows(wheel, system, framework)
    if not got:
        return []
    by_key, sources = got
    tables = []
    for (op, dtype), points in sorted(by_key.items()):
        axes = [sorted({p[d] for p in points}) for d in range(2)]
        values, filled = _grid(points, axes, 1)
        tables.append({"op": op, "dtype": dtype, "source": sources[(op, dtype)],
                       "axes": {"heads": axes[0], "tokens": axes[1]}, "time_s": values, "filled": filled})
    return tables


def mla_bmm_holdout(wheel: Wheel, system: str, framework: str) -> dict[str, Any]:
    """The other frameworks' absorbed-MLA products (not `framework`'s), as points [op, heads,
    tokens, s], one set per (framework, dtype): ``mla_bmm/bf16``."""
    out: dict[str, Any] = {}
    for other in ("sglang", "vllm", "trtllm"):
        got = mla_bmm_rows(wheel, system, other) if other != framework else None
        if not got:
            continue
        by_key, sources = got
        for dtype in sorted({d for _, d in by_key}):
            keys = sorted((op, *s) for (op, d), pts in by_key.items() if d == dtype for s in pts)
            keep = keys[:: max(1, len(keys) // 400)]
            points = [[*k, _round(by_key[(k[0], dtype)][k[1:]])] for k in keep]
            source = {**sources[("pre", dtype)], "kernel": "/".join(sorted(
                {sources[(op, dtype)]["kernel"] for op in ("pre", "post") if (op, dtype) in sources}))}
            out.setdefault(f"mla_bmm/{dtype}", []).append({"source": source, "points": points})
    return out


def moe_mla_holdout(
    wheel: Wheel, system: str, mla_framework: str | None, moe: list[dict[str, Any]]
) -> dict[str, Any]:
    """Other frameworks' MoE layers (at the routing the table was read at) and MLA cores, as
    points: moe [tokens, hidden, inter, experts, top_k, s]; mla [heads, batch, seq, kv dtype, s]."""
    out: dict[str, Any] = {}
    dists = {t["dtype"]: t["source"]["distribution"] for t in moe}
    for framework in ("sglang", "trtllm"):
        for dtype in ("bfloat16", "fp8"):
            if DTYPES[dtype] not in dists:
                continue
            got = moe_rows(wheel, system, framework, dtype, dists[DTYPES[dtype]])
            if got:
                by_cfg, source = got
                keys = sorted((t, *cfg) for cfg, pts in by_cfg.items() for t in pts)
                keep = keys[:: max(1, len(keys) // 400)]
                points = [[*k, _round(by_cfg[k[1:]][k[0]])] for k in keep]
                out.setdefault(f"moe/{DTYPES[dtype]}", []).append({"source": source, "points": points})
        if framework == mla_framework:
            continue
        for phase in ("prefill", "decode"):
            got_m = mla_rows(wheel, system, framework, phase)
            if got_m:
                by_kv, source = got_m
                mkeys = sorted((*s, kv) for kv, pts in by_kv.items() for s in pts)
                mkeep = mkeys[:: max(1, len(mkeys) // 400)]
                mpoints = [[*k, _round(by_kv[k[3]][k[:3]])] for k in mkeep]
                out.setdefault(f"mla/{phase}", []).append({"source": source, "points": mpoints})
    return out


def engine_moe_holdout(wheel: Wheel, system: str, engine: dict[str, list[dict[str, Any]]],
                       dtypes: tuple[str, ...] = ENGINE_MOE_DTYPES) -> dict[str, Any]:
    """The other frameworks' measurements of a MoE dtype only a serving framework's own table has
    (`dtypes`: ``ENGINE_MOE_DTYPES``, TRT-LLM's w4a16_mxfp4, which vLLM's default table lacks), as
    holdout points [tokens, hidden, inter, experts, top_k, s], restricted to the shapes both
    measured: the configurations the framework's table has at EP = TP = 1 and its token counts, at
    its routing."""
    out: dict[str, Any] = {}
    ours = {DTYPES[d]: d for d in dtypes}
    for framework, tables in engine.items():
        for t in tables:
            if t["dtype"] not in ours:
                continue
            own = {(c["hidden"], c["inter"], c["experts"], c["topk"]): set(c["axes"]["tokens"])
                   for c in t["configs"] if (c.get("ep", 1), c.get("tp", 1)) == (1, 1)}
            for other in ("vllm", "sglang"):
                got = moe_rows(wheel, system, other, ours[t["dtype"]], t["source"]["distribution"])
                if other == framework or not got:
                    continue
                by_cfg, source = got
                keys = sorted((n, *cfg) for cfg, pts in by_cfg.items() for n in pts if n in own.get(cfg, ()))
                if keys:
                    points = [[*k, _round(by_cfg[k[1:]][k[0]])] for k in keys]
                    out.setdefault(f"moe/{t['dtype']}", []).append({"source": source, "points": points})
    return out


def fp4_holdout(wheel: Wheel, system: str, engine: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """vLLM's and SGLang's NVFP4 GEMMs (``gemm/nvfp4``, thinned as ``holdout``'s) and MoE layers
    (``moe/nvfp4``, at the shapes TRT-LLM's table measured: ``engine_moe_holdout``): the other
    frameworks against TRT-LLM's nvfp4 tables (``NVFP4_GEMM``, ``ENGINE_FP4_MOE_DTYPES``)."""
    out: dict[str, Any] = {}
    for framework in ("vllm", "sglang"):
        got = gemm_rows(wheel, system, framework, NVFP4_GEMM[1])
        if got:
            points, source = got
            keep = sorted(points)[:: max(1, len(points) // 400)]
            out.setdefault(f"gemm/{DTYPES[NVFP4_GEMM[1]]}", []).append(
                {"source": source, "points": [[*s, _round(points[s])] for s in keep]}
            )
    return {**out, **engine_moe_holdout(wheel, system, engine, ENGINE_FP4_MOE_DTYPES)}


def build(wheel: Wheel, profile: str, system: str) -> None:
    folder = OUT / profile
    folder.mkdir(parents=True, exist_ok=True)
    header = {"gpu": profile, "built_by": "bench/build_kernel_tables.py", "units": "seconds"}
    gemms = []
    for dtype in ("bfloat16", "fp8"):
        got = gemm_rows(wheel, system, "vllm", dtype)
        if got:
            gemms.append(gemm_table(*got, dtype))
    block = gemm_rows(wheel, system, *BLOCK_GEMM)
    if block:
        gemms.append(gemm_table(*block, BLOCK_GEMM[1]))
    fp4 = gemm_rows(wheel, system, *NVFP4_GEMM)
    if fp4:
        gemms.append(gemm_table(*fp4, NVFP4_GEMM[1]))
    _write(folder / "gemm.json", {**header, "op": "gemm", "tables": gemms})
    attention: dict[str, Any] = {**header, "op": "attention"}
    for phase in ("prefill", "decode"):
        got_a = attention_rows(wheel, system, "vllm", phase)
        if got_a:
            rows, source = got_a
            attention[phase] = {"source": source, "tables": attention_tables(rows, phase, "vllm")}
    _write(folder / "attention.json", attention)
    got_c = nccl(wheel, system)
    if got_c:
        tables, source = got_c
        _write(
            folder / "collectives.json", {**header, "op": "collectives", "source": source, "tables": tables}
        )
    moe = moe_tables(wheel, system)
    if moe:
        _write(folder / "moe.json", {**header, "op": "moe", "tables": moe})
    mla, mla_framework = mla_tables(wheel, system)
    if mla:
        _write(folder / "mla.json", {**header, "op": "mla", **mla})
    engine = {framework: moe_tables(wheel, system, framework) for framework in ENGINE_FRAMEWORKS}
    sets = {**holdout(wheel, system, "vllm"), **moe_mla_holdout(wheel, system, mla_framework, moe),
            **engine_moe_holdout(wheel, system, engine), **mla_bmm_holdout(wheel, system, "trtllm"),
            **fp4_holdout(wheel, system, engine)}
    _write(folder / "holdout.json", {**header, "op": "holdout", "primary": "vllm", "sets": sets})
    for framework in ENGINE_FRAMEWORKS:
        build_framework(wheel, folder, header, system, framework, mla_framework, engine[framework])


def build_framework(
    wheel: Wheel, folder: Path, header: dict[str, Any], system: str, framework: str, mla_default: str | None,
    moe: list[dict[str, Any]],
) -> None:
    """A serving framework's own MoE and MLA tables (``moe.<framework>.json``,
    ``mla.<framework>.json``), which ``deploy --engine <framework>`` reads in place of the
    folder's defaults (``costmodel.devices.kernels``); none where the default already is that
    framework's (A100's MLA is TRT-LLM's) or the framework measured none; `moe`: its MoE tables
    (``moe_tables``). Its absorbed-MLA products (``mla_bmm.<framework>.json``) have no default
    to stand in for: only its engine reads them, on A100 too."""
    if moe:
        data = {**header, "op": "moe", "framework": framework, "tables": moe}
        _write(folder / f"moe.{framework}.json", data)
    if mla_default != framework:
        mla, taken = mla_tables(wheel, system, (framework,))
        if mla and taken == framework:
            _write(folder / f"mla.{framework}.json", {**header, "op": "mla", "framework": framework, **mla})
    bmm = mla_bmm_tables(wheel, system, framework)
    if bmm:
        _write(folder / f"mla_bmm.{framework}.json", {**header, "op": "mla_bmm", "framework": framework,
                                                       "tables": bmm})


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="aiconfigurator_core-0.12.0-*.whl")
    args = parser.parse_args(argv)
    wheel = Wheel(args.wheel)
    for profile, system in SYSTEMS.items():
        build(wheel, profile, system)


if __name__ == "__main__":
    main(sys.argv[1:])
