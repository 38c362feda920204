"""Weights and KV cache at other widths than the activations (costmodel.precision): what they
change, derived by hand for llama-3-8b (d 4096, 32 layers, 32 query heads and 8 K/V heads of
128, FFN 14336 SwiGLU, vocabulary 128,256, untied head, no biases)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.timing import Kernels, predict
from tests.helpers import calibrated_profile

runner = CliRunner()
L, D, K_HEADS, D_H, F, V = 32, 4096, 8, 128, 14336, 128_256
KV_ROW = 2 * K_HEADS * D_H  # K and V elements of one token in one layer
# the linear layers' matrices of one layer: q, k, v, out, gate, up, down
MATRICES = [D * D, D * K_HEADS * D_H, D * K_HEADS * D_H, D * D, D * F, D * F, F * D]


@pytest.fixture(scope="module")
def llama():
    return catalog.load("llama-3-8b")


def test_an_fp8_cache_halves_what_a_bf16_cache_holds_writes_and_reads_back(llama) -> None:
    B, cached = 2, 1000  # decode: 1000 tokens cached, the 1001st written and attended
    bf16 = analyze(llama, "decode", batch=B, seq=cached).total()
    fp8 = analyze(llama, "decode", batch=B, seq=cached, kv_dtype="fp8").total()
    held = L * B * KV_ROW * (cached + 1)  # bytes at 1 byte per element
    assert (bf16.kv_cache, fp8.kv_cache) == (2 * held, held)
    # one byte saved per element of every cached K and V read back (1000 tokens) and of the new
    # token's K and V written; this step's own K and V are read by the scores and AV at bf16
    saved = L * B * KV_ROW * (cached + 1)
    assert bf16.bytes_unfused - fp8.bytes_unfused == saved
    assert bf16.bytes_fused - fp8.bytes_fused == saved
    assert (fp8.flops, fp8.params) == (bf16.flops, bf16.params)


def test_an_fp8_cache_in_prefill_saves_only_the_write(llama) -> None:
    S = 300  # nothing cached yet: the scores read this pass's own keys, at bf16
    bf16 = analyze(llama, "prefill", seq=S).total()
    fp8 = analyze(llama, "prefill", seq=S, kv_dtype="fp8").total()
    assert bf16.bytes_unfused - fp8.bytes_unfused == L * KV_ROW * S
    assert bf16.kv_cache - fp8.kv_cache == L * KV_ROW * S


def test_int4_weights_hold_the_matrices_at_half_a_byte_and_a_scale_per_128(llama) -> None:
    bf16 = analyze(llama, "decode", seq=1000)
    int4 = analyze(llama, "decode", seq=1000, weights_dtype="int4")
    # each matrix: 2 bytes a weight at bf16, 1/2 at int4 plus an fp16 scale per 128 weights
    # (every matrix here divides by 128); embedding, head and norms stay at bf16
    saved = L * sum(2 * m - (m // 2 + m // 128 * 2) for m in MATRICES)
    params = bf16.total().params
    assert bf16.bytes_weights == 2 * params
    assert int4.bytes_weights == 2 * params - saved
    # a decode step reads every matrix once: the bytes it moves fall by as much
    assert bf16.total().bytes_fused - int4.total().bytes_fused == saved
    assert bf16.total().bytes_unfused - int4.total().bytes_unfused == saved
    # the memory model holds the same bytes (one rule, costmodel.precision)
    held = memory(llama, "decode", 1, 1000, None, Run(weights_dtype="int4"))
    assert held.total("weights") == int4.bytes_weights
    assert int4.to_dict()["weights_dtype"] == "int4" and int4.to_dict()["group_size"] == 128


def test_a_serving_curve_with_int4_weights_and_an_fp8_cache(llama) -> None:
    h100 = load_hardware("h100-sxm")
    seventy = catalog.load("llama-3-70b")
    out = runner.invoke(app, ["inference", "llama-3-70b", "--hardware", "h100-sxm", "--batch", "1",
                              "--weights-dtype", "int4", "--kv-dtype", "fp8", "-f", "json"])
    assert out.exit_code == 0, out.output
    quantised = json.loads(out.output)
    # bf16 does not fit: the JSON on stdout, exit 1 and the reason on stderr (issue 23)
    plain = json.loads(runner.invoke(app, ["inference", "llama-3-70b", "--hardware", "h100-sxm", "--batch",
                                           "1",
                                           "-f", "json"]).stdout)
    assert (quantised["weights_dtype"], quantised["kv_dtype"]) == ("int4", "fp8")
    # 70.6 B parameters: 141 GB at bf16 does not fit in 80 GB; about 38 GB at int4 does
    assert plain["batches"][0]["fits"] is False and quantised["batches"][0]["fits"] is True
    # decode reads the weights: at least 2.5x faster (the head and embedding stay at bf16)
    assert quantised["batches"][0]["tpot_s"] < plain["batches"][0]["tpot_s"] / 2.5
    assert analyze(seventy, "decode", seq=2048, weights_dtype="int4").bytes_weights < 40e9
    # h100-sxm's GEMMs were measured with bf16 weights: an int4 decode is the roofline, and says so
    int4 = predict(analyze(llama, "decode", seq=8, weights_dtype="int4"), h100)
    assert not int4.calibrated and "int4 weights" in int4.note and int4.time_s == int4.roofline_s
    # an fp8 cache alone, read by flash attention whose tables were measured at fp8: timed
    flash = Kernels(flash_attention=True)
    fp8 = predict(analyze(llama, "decode", batch=8, seq=4096, kv_dtype="fp8"), h100, flash)
    bf16 = predict(analyze(llama, "decode", batch=8, seq=4096), h100, flash)
    assert fp8.calibrated and fp8.time_s < bf16.time_s


def test_a_table_over_shapes_cannot_time_other_widths_and_says_so(llama) -> None:
    hw = calibrated_profile(("bf16",), realistic=True)  # a matmul table over (M, N, K), as calibrate's
    p = predict(analyze(llama, "decode", seq=8, kv_dtype="fp8"), hw)
    assert not p.calibrated and p.time_s == p.roofline_s
    assert "bf16 weights and a fp8 cache" in p.note and "roofline" in p.note
    assert predict(analyze(llama, "decode", seq=8), hw).calibrated


@pytest.mark.parametrize("kwargs, message", [
    ({"phase": "train", "weights_dtype": "int4"}, "weights-dtype, kv-dtype: inference options"),
    ({"phase": "decode", "weights_dtype": "int3"}, "weights-dtype: unknown 'int3'"),
    ({"phase": "decode", "kv_dtype": "int8"}, "kv-dtype: unknown 'int8'"),
    ({"phase": "decode", "weights_dtype": "int4", "group_size": 0}, "group-size: must be at least 1"),
])
def test_bad_widths_are_one_line(llama, kwargs, message) -> None:
    with pytest.raises(AnalysisError, match=message):
        analyze(llama, kwargs.pop("phase"), seq=8, **kwargs)


def test_a_latent_cache_at_another_width_is_refused() -> None:
    with pytest.raises(AnalysisError, match="latent .MLA. cache at another width"):
        analyze(catalog.load("deepseek-v2-lite"), "decode", seq=8, kv_dtype="fp8")


def test_the_command_line_takes_the_widths_and_refuses_them_in_training() -> None:
    both = runner.invoke(app, ["analyze", "llama-3-8b", "--kv-dtype", "fp8", "-f", "json"])
    assert both.exit_code == 0, both.output
    assert set(json.loads(both.output)["phases"]) == {"prefill", "decode"}  # without --phase: inference
    table = runner.invoke(app, ["analyze", "llama-3-8b", "--weights-dtype", "int4", "--kv-dtype", "fp8"])
    assert "in int4 (groups of 128) · KV cache in fp8" in table.output
    bad = runner.invoke(app, ["analyze", "llama-3-8b", "-p", "train", "--weights-dtype", "int4"])
    assert bad.exit_code == 2 and bad.output.startswith("error: weights-dtype, kv-dtype: inference options")
    assert len(bad.output.strip().splitlines()) == 1


def test_compare_holds_prefill_and_decode_at_the_widths() -> None:
    out = runner.invoke(app, ["compare", "llama-3-8b", "mistral-7b", "deepseek-v2-lite", "--kv-dtype", "fp8",
                              "-f", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    kv = next(r["values"] for r in data["costs"] if r["quantity"] == "kv_cache_per_token")
    # an fp8 cache: one byte per element, 2 x 8 heads x 128 x 32 layers a token for both
    assert (kv[data["models"].index("llama-3-8b")] == kv[data["models"].index("mistral-7b")]
            == 2 * 8 * 128 * 32)
    assert kv[data["models"].index("deepseek-v2-lite")] is None  # a latent cache is refused, with its reason
    assert any("deepseek-v2-lite: kv-dtype" in n for n in data["notes"]) and data["kv_dtype"] == "fp8"
    plain = json.loads(runner.invoke(app, ["compare", "llama-3-8b", "mistral-7b", "-f", "json"]).output)
    train = [next(r["values"] for r in d["costs"] if r["quantity"] == "train_flops_per_token") for d in (data,
                                                                                                         plain)]
    assert train[0][:2] == train[1]  # training runs at --dtype (and FLOPs do not change anyway)


def test_ablate_holds_both_sides_inference_at_the_widths() -> None:
    out = runner.invoke(app, ["ablate", "llama-3-8b", "--set", "n_kv_heads=1", "--kv-dtype", "fp8", "-s",
                              "1000",
                              "-f", "json"])
    assert out.exit_code == 0, out.output
    kv = next(d for d in json.loads(out.output)["deltas"] if d["phase"] == "decode" and d["quantity"]
              == "kv_cache")
    # 1001 tokens x 32 layers x K and V x 128 at one byte: 8 K/V heads before, 1 after
    assert (kv["before"], kv["after"]) == (2 * 8 * 128 * 32 * 1001, 2 * 1 * 128 * 32 * 1001)
    table = runner.invoke(app, ["ablate", "llama-3-8b", "--set", "n_kv_heads=1", "--kv-dtype", "fp8"])
    assert "decode (batch 1, 2047 cached, bf16 (fp8 KV cache))" in table.output
    assert "train (batch 1, seq 2048, bf16)" in table.output


def test_attention_tables_hold_the_cache_at_its_width() -> None:
    out = runner.invoke(app, ["attention", "llama-3-8b", "--kv-dtype", "fp8", "--seq", "4096", "-f",
                              "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    per_token = {r["variant"]: r["kv_bytes_per_token"] for r in data["kv_heads"] if r["phase"] == "decode"}
    # K and V x heads x 128 x 32 layers at one byte: MHA 32 heads, the spec's 8, MQA 1
    assert per_token == {"MHA k=32": 2 * 32 * 128 * 32, "GQA k=8": 2 * 8 * 128 * 32, "MQA k=1": 2 * 128 * 32}
    assert data["kv_dtype"] == "fp8"
    table = runner.invoke(app, ["attention", "llama-3-8b", "--kv-dtype", "fp8"])
    assert "Key/value heads: MHA, GQA, MQA on h100-sxm (fp8 KV cache)" in table.output


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_sweep_at_other_widths_is_analyze_at_them(llama, phase) -> None:
    """The sweep's lambdified tree (costmodel.analysis.symbolic_tree at widths) against analyze, point by
    point: fused bytes (through intensity) and the KV cache, int4 weights and an fp8 cache."""
    import numpy as np

    from costmodel.precision import Widths
    from costmodel.studies.sweep import Evaluator

    widths = Widths("int4", "fp8", 128)
    ev = Evaluator(llama, phase, "bf16", widths=widths)
    seqs, batches = [1, 300, 4095], [1, 8]
    got = ev(np.array(batches)[np.newaxis, :], np.array(seqs)[:, np.newaxis])
    for i, s in enumerate(seqs):
        for j, b in enumerate(batches):
            t = analyze(llama, phase, batch=b, seq=s, **widths.options()).total()
            assert got["bytes_fused"][i, j] == t.bytes_fused and got["kv_cache"][i, j] == t.kv_cache
            assert got["flops"][i, j] == t.flops
    out = runner.invoke(app, ["sweep", "llama-3-8b", "-q", "kv_cache", "--over", "seq=1024,2048",
                              "--kv-dtype", "fp8",
                              "-f", "json"])
    assert out.exit_code == 0, out.output
    series = json.loads(out.output)["series"]
    assert [row[0] for row in next(x for x in series if x["variant"] == "GQA k=8")["values"]] == [
        2 * 8 * 128 * 32 * 1025, 2 * 8 * 128 * 32 * 2049]  # decode: seq + 1 tokens at one byte


def test_serve_holds_each_ranks_shard_at_the_widths() -> None:
    args = ["serve", "llama-3-70b", "--cluster", "dgx-h100", "--tp", "8", "--seq", "2048", "-f", "json"]
    plain = json.loads(runner.invoke(app, args).output)["results"][0]
    out = runner.invoke(app, [*args, "--weights-dtype", "int4", "--kv-dtype", "fp8"])
    assert out.exit_code == 0, out.output
    low = json.loads(out.output)["results"][0]
    assert (low["weights_dtype"], low["kv_dtype"]) == ("int4", "fp8")
    # one rank holds 1/8 of the cache: 80 layers x 8 K/V heads / 8 ranks x 128 x K and V x 2049 tokens
    assert plain["memory"]["per_gpu"]["kv_cache"] == 80 * 1 * 128 * 2 * 2049 * 2
    assert low["memory"]["per_gpu"]["kv_cache"] == 80 * 1 * 128 * 2 * 2049
    assert low["memory"]["per_gpu"]["weights"] < plain["memory"]["per_gpu"]["weights"] / 3
    assert low["compute_s"] < plain["compute_s"] and low["comm_s"] == plain["comm_s"]  # activations stay bf16


def test_elements_rank_decode_at_the_widths() -> None:
    out = runner.invoke(app, ["elements", "llama-3-8b", "--kv-dtype", "fp8", "-s", "1000", "-f", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["baseline"]["kv_cache"] == 2 * 8 * 128 * 32 * 1001  # one byte a cached element
    # the swap to latent attention cannot hold an fp8 cache: skipped, with the reason
    assert any("MLA" in s["swap"] and "latent (MLA) cache at another width" in s["reason"] for s
               in data["skipped"])
    assert not any("MLA" in s["swap"] for s in data["swaps"])
