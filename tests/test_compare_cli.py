"""Every example of docs/compare.md and of docs/analysis.md, "Counting conventions"."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app

runner = CliRunner()
SPECS = str(catalog.specs_dir())


def run(line: str):
    args = [SPECS if a == "specs/" else a for a in shlex.split(line)]
    return runner.invoke(app, args)


def ok(line: str) -> str:
    result = run(line)
    assert result.exit_code == 0, result.output
    return result.output


def test_compare_a_folder():
    out = ok("compare specs/")
    assert f"{len(catalog.bundled_paths())} models compared" in out  # every bundled spec
    assert "transformer-base" in out and "gemma-3-27b" in out
    assert "64 !" in out  # T5 11B's d_ff/d_model
    assert out.index("transformer-base") < out.index("gemma-3-27b")


def test_compare_markdown():
    out = ok("compare llama-2-7b mistral-7b gemma-2-9b --seq 4096 --format markdown")
    assert "| choice | across | llama-2-7b | mistral-7b | gemma-2-9b |" in out
    assert "| norm | same | rmsnorm | rmsnorm | rmsnorm |" in out
    assert "| KV cache per cached token | varies (3) | 512 KiB |" in out  # 2*32*32*128*2 bytes
    assert "train and prefill over 4096 tokens, decode one token after 4096 cached" in out


def test_compare_with_all_conventions():
    out = ok("compare gpt2-small gpt3-175b llama-2-7b --convention all")
    for name in ("kaplan", "chinchilla", "megatron", "megatron-recompute", "palm"):
        assert f"{name} vs exact" in out


def test_ablate_table():
    out = ok("ablate llama-2-7b --set norm=layernorm --set n_kv_heads=8")
    assert re.search(r"n_kv_heads\s+32\s+8", out) and re.search(r"norm\s+rmsnorm\s+layernorm", out)
    decode = out.split("decode (batch 1, 2047 cached, bf16)")[1]
    assert re.search(r"KV cache\s+1 GiB\s+256 MiB\s+-768 MiB\s+-75.0%", decode)


def test_ablate_json():
    data = json.loads(ok("ablate llama-2-7b --set n_heads=64 --set head_dim=null --format json"))
    assert {"field": "head_dim", "before": "128", "after": "64"} in data["fields"]
    kv = next(d for d in data["deltas"] if d["phase"] == "decode" and d["quantity"] == "kv_cache")
    assert kv["relative"] == -0.5  # d_h halves; n_kv_heads stays 32


@pytest.mark.parametrize("line, message", [
    ("ablate llama-2-7b --set n_kv_heads=5",
     "error: llama-2-7b with n_kv_heads=5: n_kv_heads: n_heads (32) must be a multiple of n_kv_heads (5)"),
    ("ablate llama-2-7b --set nrom=layernorm", "nrom: unknown field (did you mean norm?)"),
    ("ablate llama-2-7b --set norm", "error: --set: expected FIELD=VALUE, got 'norm'"),
    ("compare llama-2-7b no-such-model", "no-such-model: no such file, nor a bundled spec"),
    ("elements llama-2-7b --by speed", "Invalid value"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(line, message):
    result = run(line)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_elements_of_one_model():
    out = ok("elements llama-2-7b")
    assert "attention heads: MHA k=32 -> MQA k=1" in out
    assert "-96.9%" in out
    assert "Which elements matter most" in out


def test_elements_markdown_by_kv_cache():
    out = ok("elements t5-11b --by kv_cache --format markdown")
    assert "| 1 | attention heads: MHA k=128 -> MQA k=1 |" in out
    assert "skipped: sliding window" in out


def test_elements_across_a_folder():
    out = ok("elements specs/")
    assert f"Which elements matter most, across {len(catalog.bundled_paths())} models" in out
    # The FFN's dense -> MoE swap (total params x ~4 at equal active) now leads; heads come next.
    top = [line for line in out.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert any("attention heads" in line for line in top), top


def test_analyze_with_conventions():
    out = ok("analyze gpt3-175b --convention megatron --convention palm")
    assert "Counting conventions" in out
    assert re.search(r"megatron\s+175 B .*1\.08 TFLOP\s+-0\.06%\s+0\s", out)  # matmuls: equal
    assert "kaplan" not in out.split("Counting conventions")[1]
    data = json.loads(ok("analyze gpt3-175b -p train --convention all --format json"))
    assert [r["convention"] for r in data["conventions"]["rows"]] == [
        "kaplan", "chinchilla", "megatron", "megatron-recompute", "palm"]


def test_readme_python_example():
    from costmodel.studies.compare import compare, expand
    from costmodel.studies.variants import ablate, rank_elements

    c = compare(expand(["llama-2-7b", "mistral-7b"]), conventions=("palm",))
    assert [ch.label for ch in c.choices if ch.invariant][:3] == ["year", "architecture", "layers"]
    assert ablate(catalog.load("llama-2-7b"), {"n_kv_heads": 8}).fields == (("n_kv_heads", 32, 8),)
    r = rank_elements(catalog.load("llama-2-7b"), by="kv_cache")
    assert (r.effects[0].swap.label, r.effects[0].relative("kv_cache")) == ("MHA k=32 -> MQA k=1", -0.96875)
