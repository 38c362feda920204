"""MHA / GQA / MQA and window variants, what fits on a device, and Shazeer (2019)'s asymptotics."""

from __future__ import annotations

import json

import pytest
import sympy
from typer.testing import CliRunner

from costmodel import catalog
from costmodel import symbols as sym
from costmodel.analysis import analyze, formula
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.runtime.roofline import attention_total, fit
from costmodel.spec import SpecError
from costmodel.studies.asymptotics import CASES, bounded, is_big_o, leading_terms, shazeer
from costmodel.studies.attention_variants import (
    compare_kv_heads,
    compare_windows,
    kv_head_variants,
    window_variants,
    with_kv_heads,
)

runner = CliRunner()
H100 = load_hardware("h100-sxm")
LLAMA2_PARAMS = 6_738_415_616  # released implementation (Touvron et al. 2023)
KV_PER_TOKEN_LLAMA2 = 2 * 32 * 32 * 128 * 2  # K and V, 32 layers, 32 heads of 128, bf16: 512 KiB


# --- variants -------------------------------------------------------------------------------


def test_kv_head_variants_default_to_mha_own_and_mqa():
    spec = catalog.load("llama-3-8b")
    variants = kv_head_variants(spec)
    assert [(v.label, v.spec.n_kv_heads, v.own) for v in variants] == [
        ("MHA k=32", 32, False), ("GQA k=8", 8, True), ("MQA k=1", 1, False)]
    assert variants[1].spec is spec


def test_a_variant_is_a_revalidated_spec():
    """Changing k changes the K and V projections: 32 layers x 2 x 4096 x (4096 - 128) fewer weights."""
    spec = catalog.load("llama-2-7b")
    mqa = with_kv_heads(spec, 1)
    assert mqa.n_kv_heads == 1 and mqa.published is None and mqa.name == "llama-2-7b[n_kv_heads=1]"
    assert analyze(mqa, "decode", seq=1).total().params == LLAMA2_PARAMS - 32 * 2 * 4096 * (4096 - 128)


def test_invalid_variant_is_one_line():
    with pytest.raises(SpecError,
                       match=r"^llama-2-7b with n_kv_heads=5: n_kv_heads: n_heads \(32\) must be a "
                                        r"multiple of n_kv_heads \(5\)$"):
        with_kv_heads(catalog.load("llama-2-7b"), 5)
    result = runner.invoke(app, ["attention", "llama-2-7b", "--kv-heads", "32,5"])
    assert result.exit_code == 2
    assert result.output == ("error: llama-2-7b with n_kv_heads=5: n_kv_heads: n_heads (32) must be a "
                             "multiple "
                             "of n_kv_heads (5)\n")


def test_window_on_an_encoder_decoder_is_one_line():
    result = runner.invoke(app, ["attention", "t5-11b", "--window", "4096"])
    assert result.exit_code == 2
    assert result.output == ("error: t5-11b with window=4096, layer_pattern=[local], global_nope=null: "
                             "window: "
                             "sliding windows are supported for "
                             "decoder-only and encoder-only models\n")


def test_window_variants_of_a_local_global_spec():
    spec = catalog.load("gemma-3-27b")
    labels = [(v.label, v.own) for v in window_variants(spec)]
    assert labels == [("full", False), ("w=1024, all local", False), ("w=1024, 5 local : 1 global", True)]
    full = window_variants(spec)[0].spec
    assert full.window is None and set(full.layer_pattern) == {full.layer_pattern[0]}


# --- the key/value-head table ------------------------------------------------------------------


def test_llama2_heads_by_hand():
    """llama-2-7b on an H100 SXM, batch 1, 4096 tokens (decode: 4096 cached, C = 4097)."""
    rows = {(r.variant, r.phase): r for r in compare_kv_heads(catalog.load("llama-2-7b"), H100, seq=4096)}
    mha, mqa = rows["MHA k=32", "decode"], rows["MQA k=1", "decode"]
    assert mha.kv_per_token == KV_PER_TOKEN_LLAMA2 == 524_288
    assert mqa.kv_per_token == KV_PER_TOKEN_LLAMA2 / 32
    assert mha.kv_cache == KV_PER_TOKEN_LLAMA2 * 4097
    assert rows["MHA k=32", "prefill"].kv_cache == KV_PER_TOKEN_LLAMA2 * 4096
    # Largest batch: (80e9 - weights) / (KV per sequence), weights = params x 2 bytes.
    # MHA: (80e9 - 13,476,831,232) / (524,288 x 4097) = 30.97 -> 30.
    assert mha.fit.max_batch == 30
    # MQA drops 1,040,187,392 K/V weights: (80e9 - 11,396,456,448) / (16,384 x 4097) = 1022.0 -> 1022.
    assert mqa.fit.max_batch == 1022
    # Attention matmuls of one decode step, per layer: q, k, v, o = 4 x 2 x 4096 x 4096, scores and AV
    # = 2 x 2 x 32 heads x 128 x C; times 32 layers.
    assert mha.attention.flops_matmul == 32 * (4 * 2 * 4096 * 4096 + 2 * 2 * 32 * 128 * 4097)
    # Decode reads the whole cache for little work: memory-bound; fewer K/V heads, higher intensity.
    assert mha.attention_roofline.bound == mqa.attention_roofline.bound == "memory"
    assert rows["MHA k=32", "prefill"].attention_roofline.bound == "compute"
    assert mha.attention_roofline.intensity < mqa.attention_roofline.intensity
    assert set(rows) == {(v, p) for v in ("MHA k=32", "MQA k=1") for p in ("prefill", "decode")}


def test_attention_sums_every_attention_sub_block():
    """Gemma 2 alternates local and global layers: both groups count, FFNs do not."""
    a = analyze(catalog.load("gemma-2-9b"), "decode", seq=8000)
    att = attention_total(a)
    local, glob = a.total("layers[local]/attention"), a.total("layers[global]/attention")
    assert att.flops == local.flops + glob.flops and att.kv_cache == a.total().kv_cache
    t5 = analyze(catalog.load("t5-11b"), "decode", seq=100)
    assert attention_total(t5).params == (t5.total("encoder/layers/attention").params
                                          + t5.total("decoder/layers/attention").params
                                          + t5.total("decoder/layers/cross_attention").params)


def test_kv_cache_is_linear_in_batch():
    """fit() divides the cache by B: the formula is B times an expression free of B."""
    for name in ("llama-3-8b", "gemma-3-27b", "t5-11b"):
        expr = formula(catalog.load(name), "kv_cache", "decode", symbolic=True)
        assert sympy.degree(expr, sym.B) == 1 and expr.subs(sym.B, 0) == 0


def test_fit_when_weights_do_not_fit():
    """llama-3-70b in bf16 (141 GB of weights) does not fit in an L4's 24 GB."""
    a = analyze(catalog.load("llama-3-70b"), "decode")
    assert fit(a, load_hardware("l4")).max_batch == 0


# --- windows --------------------------------------------------------------------------------


def test_windows_keep_the_cache_bounded():
    """Mistral 7B (w = 4096, 32 layers, 8 K/V heads of 128): a rolling cache holds min(C, w) tokens."""
    rows = {(r.variant, r.context): r for r in compare_windows(catalog.load("mistral-7b"), H100,
                                                                contexts=[2048, 32768])}
    per_token = 2 * 32 * 8 * 128 * 2
    assert rows["full", 32768].kv_cache == per_token * 32768
    assert rows["w=4096, all local", 32768].kv_cache == per_token * 4096
    assert rows["w=4096, all local", 2048].kv_cache == rows["full", 2048].kv_cache == per_token * 2048
    # A decode step attends w keys instead of C: scores and AV shrink by 32768 / 4096.
    qk = lambda c: 32 * 2 * 2 * 32 * 128 * c  # noqa: E731  scores + AV, 32 query heads
    assert rows["full", 32768].decode.flops_matmul - rows["w=4096, all local", 32768].decode.flops_matmul == (
        qk(32768) - qk(4096))


def test_gemma3_pattern_by_hand():
    """Gemma 3 27B: 62 layers of pattern 5 local : 1 global -> 52 local, 10 global; 16 K/V heads of
    128 in bf16 = 8192 bytes per token per layer; local layers keep 1024 tokens."""
    rows = {(r.variant, r.context): r for r in compare_windows(catalog.load("gemma-3-27b"), H100,
                                                                contexts=[131072])}
    assert rows["w=1024, 5 local : 1 global", 131072].kv_cache == 8192 * (52 * 1024 + 10 * 131072)
    assert rows["full", 131072].kv_cache == 8192 * 62 * 131072


# --- Shazeer (2019) ---------------------------------------------------------------------------


def test_leading_terms_under_the_assumptions():
    """n <= d makes n**2 lower order than n*d; h <= d/h makes B*h*n**2 lower than B*d*n**2/h."""
    B, n, d, h = sym.B, sym.n, sym.d, sym.h
    lead = leading_terms(3 * n * d + n**2 + 7)
    assert lead.kept == 3 * n * d and lead.theta == n * d
    assert leading_terms(B * h * n**2 + B * d * n**2 / h).theta == B * d * n**2 / h
    assert leading_terms(B * n + d).theta == B * n + d  # neither bounds the other
    assert bounded((0, 1, -1, 0)) and not bounded((0, 1, 0, 0))
    assert is_big_o(1 / d + h * n / d**2, h / d) and not is_big_o(n**2 / d, n / d)


@pytest.mark.parametrize("name", ["llama-2-7b", "gpt2-small", "t5-11b", "gemma-3-27b"])
def test_shazeer_2019_from_our_formulas(name):
    """The three results of Shazeer (2019), sections 2.4.1, 2.4.2 and 3.1, hold for each spec's layer."""
    for r in shazeer(catalog.load(name)):
        assert r.flops_match, (r.case.name, r.flops.kept)
        assert r.memory_match, (r.case.name, r.memory.kept)
        assert r.ratio_match, (r.case.name, r.ratio)


def test_shazeer_leading_terms_by_hand():
    """GPT-2 small's layer (LayerNorm, biases), d_h = d/h, p = 1.

    Batched: q, k, v, o are 4 products of 2*B*n*d*d FLOPs: 8*B*n*d**2.
    Incremental MHA, step C: the score and AV products each read the C cached keys (values) of
    every head, B*C*d elements; summed over C = 1..n: 2 * B*d*n(n+1)/2, leading B*d*n**2; the four
    d x d weights are read at every step: 4*n*d**2.
    Incremental MQA: one K/V head of d/h reads B*C*d/h each: B*d*n**2/h.
    """
    B, n, d, h = sym.B, sym.n, sym.d, sym.h
    batched, mha, mqa = shazeer(catalog.load("gpt2-small"))
    assert [r.case for r in (batched, mha, mqa)] == list(CASES)
    assert batched.flops.kept == 8 * B * n * d**2
    assert sympy.expand(mha.memory.kept - (B * d * n**2 + 4 * n * d**2)) == 0
    assert mqa.memory.kept.coeff(n**2) == B * d / h
    assert sympy.expand(mha.ratio - (n / d + 1 / B)) == 0
    assert sympy.expand(mqa.ratio - (1 / d + n / (d * h) + 1 / B)) == 0


# --- CLI: docs/attention.md's examples -------------------------------------------------------


def test_readme_attention_example():
    result = runner.invoke(app, ["attention", "llama-3-8b", "--batch", "16", "--seq", "8192"])
    assert result.exit_code == 0, result.output
    for text in ("MHA k=32", "GQA k=8 (spec)", "MQA k=1", "bound (ridge 295)", "max batch", "Windows"):
        assert text in result.output
    # KV per token of llama-3-8b: 2 x 32 layers x 8 heads x 128 x 2 bytes = 128 KiB
    assert "128 KiB" in result.output
    # MHA: 8,030,261,248 + 32 x 2 x 4096 x (4096 - 1024) = 8,835,567,616 params, 17.67 GB in bf16;
    # 512 KiB x 8193 tokens per sequence: (80e9 - 17.67e9) / 4.295e9 = 14.5 -> 14 < 16 asked for.
    mha = [line for line in result.output.splitlines() if line.lstrip().startswith("MHA k=32")]
    assert len(mha) == 2 and all(line.rstrip().endswith("14 (< B)") for line in mha)


def test_readme_attention_kv_heads_example():
    result = runner.invoke(app, ["attention", "llama-2-7b", "--kv-heads", "32,8,4,1", "--hardware",
                                 "a100-80gb"])
    assert result.exit_code == 0, result.output
    assert all(f"k={k}" in result.output for k in (32, 8, 4, 1)) and "a100-80gb" in result.output


def test_readme_attention_windows_example():
    result = runner.invoke(app, ["attention", "mistral-7b", "--seq", "4096,32768,131072", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {r["context"] for r in data["windows"]} == {4096, 32768, 131072}
    assert {r["variant"] for r in data["windows"]} >= {"full", "w=4096, all local"}
    # the key/value-head table at the first length: prefill S = 4096
    assert data["kv_heads"][0]["shape"]["S"] == 4096


def test_attention_contexts_is_a_hidden_alias_of_seq():
    """Issue 23: the window table's context lengths are --seq, the vocabulary's name; the old
    --contexts still works for a release, with a note on stderr, and means the same."""
    new = runner.invoke(app, ["attention", "mistral-7b", "--seq", "4096,32768", "-f", "json"])
    old = runner.invoke(app, ["attention", "mistral-7b", "--contexts", "4096,32768", "-f", "json"])
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout
    assert "warning: --contexts is deprecated, use --seq" in old.stderr
    assert "--contexts" not in runner.invoke(app, ["attention", "--help"], env={"COLUMNS": "200"}).stdout


def test_readme_attention_json_example():
    result = runner.invoke(app, ["attention", "gemma-3-27b", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["hardware"]["name"] == "h100-sxm"
    assert {(r["variant"], r["phase"]) for r in data["kv_heads"]} == {
        (v, p) for v in ("MHA k=32", "GQA k=16", "MQA k=1") for p in ("prefill", "decode")}
    assert {r["variant"] for r in data["windows"]} == {"full", "w=1024, all local",
                                                       "w=1024, 5 local : 1 global"}
    row = data["kv_heads"][0]
    assert set(row["attention"]["roofline"]) >= {"time_s", "bound", "intensity", "ridge"}
    assert row["fit"]["max_batch"] > 0


def test_attention_csv_and_markdown():
    csv_out = runner.invoke(app, ["attention", "gpt2-small", "-f", "csv"]).output
    header = csv_out.splitlines()[0].split(",")
    assert header[:4] == ["table", "variant", "kv_heads", "own"] and "fit.max_batch" in header
    assert runner.invoke(app, ["attention", "gpt2-small", "-f",
                               "markdown"]).output.startswith("## gpt2-small")


def test_readme_formula_asymptotic_example():
    result = runner.invoke(app, ["formula", "llama-2-7b", "--asymptotic"])
    assert result.exit_code == 0, result.output
    for text in ("batched MHA", "incremental MHA", "incremental MQA", "Theta(B*d*n**2 + d**2*n)",
                 "O(1/d + n/(d*h) + 1/B)"):
        assert text in result.output
    assert " NO " not in result.output
    data = json.loads(runner.invoke(app, ["formula", "llama-2-7b", "--asymptotic", "-f", "json"]).output)
    assert [r["memory"]["match"] for r in data["results"]] == [True, True, True]


def test_formula_json():
    data = json.loads(runner.invoke(app, ["formula", "llama-2-7b", "-q", "kv_cache", "-p", "decode",
                                          "--symbolic", "-f", "json"]).output)
    assert data["formula"] == "2*B*C*L*d_h*k*p"



def test_tables_print_brackets_as_text():
    """Rich read "layers[local]" and "[local:global]" as markup and dropped them (report.render_rich)."""
    result = runner.invoke(app, ["analyze", "gemma-2-9b", "-p", "decode"])
    assert result.exit_code == 0, result.output
    assert "layers[local]/attention" in result.output and "layers[global]/ffn" in result.output
    assert "window 4096 [local:global]" in " ".join(result.output.split())
