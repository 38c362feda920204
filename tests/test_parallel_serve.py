"""Decode at scale with expert parallelism: DeepSeek-V3 on 8 x H200 (issue 14). Figures by hand
from the spec (DeepSeek-AI 2024, arXiv:2412.19437; the released config.json): d 7168, 61 layers of
which the first 3 dense and 58 sparse, 256 routed experts of f_e 2048 (SwiGLU: 3 x d x f_e each),
top-8, MLA caching a 512 latent + 64 RoPE key per token per layer (specs/deepseek-v3.yaml)."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.layout import LayoutError
from costmodel.parallel.serve import decode, moe_layers

SPEC = "deepseek-v3"
H200 = load_cluster("dgx-h200")
D, L_MOE, E, K, F = 7168, 58, 256, 8, 2048


@pytest.fixture(scope="module")
def v3():
    return catalog.load(SPEC)


@pytest.fixture(scope="module")
def ep8(v3):
    """EP 8, TP 1 (each GPU an attention replica), 64 sequences, 2048 cached tokens, fp8."""
    return decode(v3, H200, tp=1, batch=64, context=2048, ep=8, dtype="fp8", mla="absorbed")


def test_the_dispatch_and_combine_all_to_alls(ep8, v3):
    """Per sparse layer a dispatch and a combine; each GPU sends its 64/8 = 8 tokens' 8 copies of
    d fp8 elements, 7/8 of them to the other GPUs: 401,408 bytes an all-to-all, 116 a step."""
    assert moe_layers(v3) == L_MOE
    a2a = dict(ep8.to_dict()["comm"]["by_collective"])["ep/all_to_all"]
    assert a2a["calls"] == 2 * L_MOE
    assert a2a["bytes_sent"] == 2 * L_MOE * 7 * (K * 8 * D) // 8 == 2 * 58 * 401_408
    assert a2a["link"] == "intra_node" and a2a["ranks"] == 8
    assert ep8.comm_s == pytest.approx(a2a["time_s"])  # TP 1: no all-reduce
    assert ep8.tpot_s == pytest.approx(ep8.compute_s + ep8.comm_s)
    assert ep8.tokens_per_s == pytest.approx(64 / ep8.tpot_s)


#: What an FP8 checkpoint (ModelOpt) holds in bf16, one byte more than fp8 each: the embedding
#: and the head (129,280 x 7,168 each), every MoE layer's router (256 x 7,168), the norms (two of
#: 7,168 a layer, the latent q and kv norms of 1,536 and 512, 61 layers; the final 7,168).
WIDE = 2 * 129_280 * D + L_MOE * E * D + 61 * (2 * D + 1536 + 512) + D


def fp8_matrices(ep: int) -> int:
    """Weight matrices an FP8 checkpoint quantises on one GPU, each with an fp32 weight and input
    scale (8 bytes): 5 attention projections a layer (q_a, q_b, kv_a, kv_b, o) x 61, 3 dense FFN
    layers' 3, and in 58 MoE layers the shared expert's 3 and the local routed experts' 3 each."""
    return 5 * 61 + 3 * 3 + L_MOE * 3 + L_MOE * 3 * (E // ep)


def test_each_gpu_holds_an_eighth_of_the_routed_experts(ep8, v3):
    """All of the model but 7/8 of the routed experts (58 x 256 x 3 x 7168 x 2048 parameters);
    the router scores all 256 experts on every replica, and every replica holds it whole; fp8 as
    an FP8 checkpoint holds it (one byte a quantised parameter, bf16 where ``WIDE`` says, 8
    bytes of scales a quantised matrix)."""
    total = analyze(v3, "decode", batch=1, seq=1).total().params
    assert total == 671_026_404_352  # the published exact count (spec: transformers' sum of numel)
    routed = L_MOE * E * 3 * D * F
    assert WIDE == 1_960_795_136 and fp8_matrices(8) == 6_056
    assert ep8.weights_bytes == total - routed * 7 // 8 + WIDE + 8 * fp8_matrices(8) == 100_817_073_472
    assert ep8.fits


def test_the_kv_cache_of_a_replicas_sequences(ep8):
    """8 sequences per replica, 2049 tokens each (the cache and the new one), 61 layers x 576."""
    assert ep8.kv_cache_bytes == 8 * 2049 * 61 * 576


def test_tensor_parallel_replicates_the_latent_cache(v3):
    """TP 8 splits the heads, but MLA's one latent per token is on every rank: 64 sequences' cache
    on each GPU, 8 x EP 8's; the two all-reduces a layer of 64 x d fp8."""
    tp8 = decode(v3, H200, tp=8, batch=64, context=2048, ep=1, dtype="fp8", mla="absorbed")
    assert tp8.kv_cache_bytes == 64 * 2049 * 61 * 576
    ar = tp8.to_dict()["comm"]["by_collective"]["tp/all_reduce"]
    assert ar["calls"] == 2 * 61 and ar["bytes_sent"] == pytest.approx(2 * 61 * 2 * 7 / 8 * 64 * D)


def test_ep_refusals_are_one_line(v3):
    with pytest.raises(LayoutError, match="--batch: 4 sequences do not split over the 8"):
        decode(v3, H200, tp=1, batch=4, context=2048, ep=8)
    # 256 experts over 72 ranks: 4 on some, 3 on others; deploy models that placement, serve points there
    with pytest.raises(LayoutError, match=r"^--ep: 72 does not divide the 256 experts of deepseek-v3; "
                                          r"`costmodel deploy` serves"):
        decode(v3, H200, tp=1, batch=72, context=2048, ep=72)


def test_wide_expert_parallelism_across_nodes(v3):
    """EP 64 (issue 23: it was refused, 4 experts a rank being fewer than top_k 8): each GPU holds
    4 of the 256 routed experts; the all-to-all spans 8 nodes of 8 GPUs, its 63/64 off the GPU."""
    ep64 = decode(v3, H200, tp=1, batch=64, context=2048, ep=64, dtype="fp8", mla="absorbed")
    total, routed = 671_026_404_352, L_MOE * E * 3 * D * F
    assert ep64.weights_bytes == total - routed * 63 // 64 + WIDE + 8 * fp8_matrices(64) == 29_295_762_688
    a2a = ep64.to_dict()["comm"]["by_collective"]["ep/all_to_all"]
    assert a2a["ranks"] == 64 and a2a["link"] == "inter_node" and a2a["calls"] == 2 * L_MOE
    assert a2a["bytes_sent"] == pytest.approx(2 * L_MOE * 63 / 64 * K * 1 * D)


def test_serve_that_fits_at_no_batch_exits_1_with_the_reason() -> None:
    """Llama 3.1 405B on TP 2 of 80 GB H100s: 406 GB of bf16 weights over two GPUs; the table in
    full on stdout, the reason on stderr, exit 1 (issue 23: a setup that cannot run says so)."""
    from typer.testing import CliRunner

    from costmodel.cli import app

    args = ["serve", "llama-3.1-405b", "--cluster", "dgx-h100", "--tp", "2", "--batch", "1"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1 and "llama-3.1-405b" in out.stdout
    assert out.stderr.strip() == ("error: llama-3.1-405b does not fit on TP2 h100-sxms at any batch asked "
                                  "for (memory/GPU above)")
