"""Every example of docs/memory.md, "Commands", and the memory and fit lines of docs/cli.md's
examples, run through typer's CliRunner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from costmodel.cli import app

runner = CliRunner()
N_7B = 6_738_415_616  # llama-2-7b parameters (its YAML's released exact count)


def run(*args: str, code: int = 0):
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def test_readme_memory_training_one_device() -> None:
    out = run("memory", "llama-2-7b", "--seq", "4096").stdout
    assert f"{2 * N_7B:,}" in out and f"{12 * N_7B:,}" in out  # bf16 weights; fp32 master + m + v
    assert "Korthikanti" in out and "By component" in out


def test_readme_memory_zero3_full_recompute() -> None:
    out = run("memory", "llama-2-7b", "--zero", "3", "--dp", "8", "--recompute", "full",
              "--hardware", "h100-sxm").stdout
    assert f"{2 * N_7B // 8:,}" in out and f"{12 * N_7B // 8:,}" in out
    # 32 layer inputs (2sbh) + ids 8s + final RMSNorm as one kernel (flash, the H100's default: its
    # input 2sh and fp32 1/rms 4s) + head input 2sh + loss 2sV + 8s + 2
    s, h, V = 2048, 4096, 32000
    acts = 32 * 2 * s * h + 8 * s + (2 * s * h + 4 * s) + 2 * s * h + 2 * s * V + 8 * s + 2
    assert f"{acts:,}" in out and "fits:" in out


def test_readme_memory_decode_does_not_fit() -> None:
    # printed in full, the reason on stderr, exit 1: it cannot run (issue 23)
    result = run("memory", "llama-2-7b", "-p", "decode", "--batch", "64", "--hardware", "h100-sxm", code=1)
    kv = 2 * 32 * 64 * 32 * 128 * 2048 * 2  # K and V, L, B, k, d_h, C, bf16
    assert f"{kv:,}" in result.stdout and "does not fit" in result.stdout
    assert result.stderr.startswith("error: llama-2-7b does not fit on one h100-sxm:")


def test_readme_memory_int4_fp8() -> None:
    out = run("memory", "llama-3-70b", "-p", "decode", "--batch", "8", "--weights-dtype", "int4",
              "--kv-dtype", "fp8", "--hardware", "h100-sxm").stdout
    kv = 2 * 80 * 8 * 8 * 128 * 2048 * 1
    assert f"{kv:,}" in out and "fits:" in out


def test_readme_memory_json() -> None:
    mem = json.loads(run("memory", "llama-2-7b", "-f", "json").stdout)["memory"]
    assert {"weights", "gradients", "optimizer", "activations", "kv_cache", "peak"} <= set(mem)
    assert mem["weights"] == 2 * N_7B and mem["kv_cache"] == 0 and "fits" not in mem


def test_readme_fit_batch() -> None:
    out = run("fit", "llama-2-7b", "--hardware", "h100-sxm").stdout
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith(("train",
                                                                                            "decode"))}
    assert "none fits" in lines["train"]
    # decode: (80e9 - 2 x N) / (KV 512 KiB x 2048 tokens per sequence + activations) -> 61
    assert lines["decode"].split()[1] == "61"


def test_readme_fit_seq() -> None:
    out = run("fit", "llama-3-8b", "--hardware", "h100-sxm", "--over", "seq", "-p", "train", "--zero", "3",
              "--dp", "8", "--recompute", "full", "--flash-attention").stdout
    assert "8,192" in out and "capped at the spec's max_seq_len" in out


def test_readme_analyze_warning() -> None:
    r = run("analyze", "llama-2-7b", "--hardware", "h100-sxm", "-p", "decode", "--batch", "64")
    assert r.stderr.strip() == ("warning: decode at B=64, seq=2047 needs 76.6 GiB per device, 2.06 GiB "
                                "more than h100-sxm's 80 GB (see `costmodel memory`)")


def test_memory_csv_and_markdown() -> None:
    csv_out = run("memory", "gpt2-small", "-f", "csv").stdout.splitlines()
    assert csv_out[0] == "spec,phase,batch,seq,category,component,bytes"
    assert csv_out[-1].startswith("gpt2-small,train,1,1024,peak,total,")
    assert run("memory", "gpt2-small", "-p", "prefill", "-f", "markdown").stdout.startswith("## gpt2-small")
    fit_csv = run("fit", "gpt2-small", "--hardware", "l4", "-f", "csv").stdout.splitlines()
    assert fit_csv[0] == "spec,phase,max_batch,peak" and len(fit_csv) == 4


def test_readme_fit_latent_absorbed() -> None:
    """DeepSeek-V2-Lite on an H100: absorbed decode holds no per-head keys or values, so more
    sequences fit than naive; training is naive either way (none fits). Absorbed is the GPU's
    default (runtime.kernels.default_mla)."""
    absorbed = run("fit", "deepseek-v2-lite", "--hardware", "h100-sxm", "--mla", "absorbed").stdout
    naive = run("fit", "deepseek-v2-lite", "--hardware", "h100-sxm", "--mla", "naive").stdout
    assert run("fit", "deepseek-v2-lite", "--hardware", "h100-sxm").stdout == absorbed

    def decode(out: str) -> int:
        line = next(x for x in out.splitlines() if x.strip().startswith("decode"))
        return int(line.split()[1].replace(",", ""))
    assert decode(absorbed) > decode(naive) and "training runs the naive form" in absorbed
