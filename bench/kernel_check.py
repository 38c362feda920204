"""The bundled kernel tables against this machine's device: GEMMs, fused attention (prefill and
decode) and, with several GPUs, an all-reduce, each timed here and set beside the table's lookup.

    python bench/kernel_check.py --gpu h200 [--out FILE]      # on an H200: its own tables
    python bench/kernel_check.py --device cpu --gpu h100-sxm --tiny   # a smoke test of the path

Shapes: the GEMMs of a Llama 3 8B decode (M = 1, 8, 64) and prefill (M = 2048) step and 8192^3;
flash attention through ``torch.nn.functional.scaled_dot_product_attention`` (the flash backend
on a GPU: FA2 in PyTorch's build, where vLLM's tables hold FA3, so some gap is the kernel's),
causal prefill at 2048 and 8192 tokens and decode of one token against 2048 and 8192 cached ones,
32 heads on 8 KV heads of 128 (Llama 3 8B's). Each time is the median of
``torch.utils.benchmark``'s ``blocked_autorange``. Writes a markdown table (shape, measured,
table, ratio) to stdout and to `--out`. On the CPU the ratios mean nothing: the run checks only
that every path executes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodel.devices.kernels import load_kernels  # noqa: E402

GEMMS = [
    (1, 4096, 4096),
    (8, 14336, 4096),
    (64, 4096, 14336),
    (2048, 4096, 4096),
    (2048, 14336, 4096),
    (8192, 8192, 8192),
]
ATTENTION = [("prefill", 1, 2048), ("prefill", 1, 8192), ("decode", 8, 2048), ("decode", 64, 8192)]
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def timed(fn, min_run_time: float) -> float:
    from torch.utils import benchmark

    m = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
    return statistics.median(m.times)


def gemm_rows(torch, device: str, tables, tiny: bool, t_min: float) -> list[list[str]]:
    rows = []
    for M, N, K in GEMMS[:2] if tiny else GEMMS:
        if tiny:
            M, N, K = M, N // 64, K // 64
        a = torch.randn(M, K, device=device, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=device, dtype=torch.bfloat16)
        got = timed(lambda a=a, w=w: torch.nn.functional.linear(a, w), t_min)
        ref = tables.gemm("bf16", M, N, K)
        rows.append(
            [
                f"gemm bf16 {M} x {N} x {K}",
                f"{got * 1e6:.1f} us",
                f"{ref.time_s * 1e6:.1f} us",
                f"{ref.time_s / got:.2f}",
                "yes" if ref.inside else "no",
            ]
        )
    return rows


def attention_rows(torch, device: str, tables, tiny: bool, t_min: float) -> list[list[str]]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for phase, batch, seq in ATTENTION[::2] if tiny else ATTENTION:
        if tiny:
            seq //= 64
        q_len = seq if phase == "prefill" else 1
        q = torch.randn(batch, HEADS, q_len, HEAD_DIM, device=device, dtype=torch.bfloat16)
        k = torch.randn(batch, KV_HEADS, seq, HEAD_DIM, device=device, dtype=torch.bfloat16)
        v = torch.randn_like(k)

        def run(q=q, k=k, v=v, causal=phase == "prefill") -> object:
            return sdpa(q, k, v, is_causal=causal, enable_gqa=True)

        got = timed(run, t_min)
        ref = tables.attention(phase, batch, seq, HEADS, KV_HEADS, HEAD_DIM, "bf16")
        rows.append(
            [
                f"attention {phase} b {batch} s {seq}",
                f"{got * 1e6:.1f} us",
                f"{ref.time_s * 1e6:.1f} us",
                f"{ref.time_s / got:.2f}",
                "yes" if ref.inside else "no",
            ]
        )
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpu", required=True, help="the specs/kernels/ folder to compare with")
    parser.add_argument("--tiny", action="store_true", help="small shapes: a smoke test of the path")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    tables = load_kernels(args.gpu)
    t_min = 0.01 if args.tiny else 0.2
    rows = gemm_rows(torch, args.device, tables, args.tiny, t_min)
    rows += attention_rows(torch, args.device, tables, args.tiny, t_min)
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    lines = [
        f"Kernel tables of {args.gpu} against {name} (torch {torch.__version__}); ratio = table / measured",
        "",
        "| op | measured | table | ratio | inside the grid |",
        "|---|---:|---:|---:|---|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
