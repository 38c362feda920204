"""Each design element of DESIGN.md against a case derived by hand.

The tiny spec (tests/helpers.py) has d=8, h=2, k=1, d_h=4, f=12, V=10, L=2, RMSNorm pre,
SwiGLU, RoPE, untied, no biases. Expected values are written as the arithmetic a reader
would do on paper, never read back from the code under test.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel import analyze
from costmodel.catalog import load
from costmodel.components import attention as attn
from costmodel.model import numeric_dims
from tests.helpers import tiny

d, h, k, d_h, f, V, L = 8, 2, 1, 4, 12, 10, 2
P = 2  # bf16


def leaf(spec, path: str, phase: str = "prefill", batch: int = 1, seq: int = 3, **kw):
    return analyze(spec, phase, batch=batch, seq=seq, **kw).total(path)


# --- parameters --------------------------------------------------------------------------


def test_tiny_parameters_by_hand() -> None:
    """q 8x8, k and v 8x4, o 8x8; SwiGLU 3 x 8x12; 2 RMSNorm gains per layer; V x d twice."""
    a = analyze(tiny(), "prefill", seq=3)
    per_layer = (8 * 8 + 8 * 4 + 8 * 4 + 8 * 8) + 3 * 8 * 12 + 2 * 8
    assert per_layer == 496
    assert a.total().params == 2 * per_layer + 10 * 8 + 8 + 10 * 8  # layers, embedding, final norm, head
    assert a.params_embedding == 80 and a.params_lm_head == 80
    assert a.total("layers/attention").params == 2 * (192 + 8)


def test_layernorm_has_gain_and_bias_rmsnorm_gain_only() -> None:
    """5 norms (2 per layer + final): LayerNorm adds 5 x d bias parameters."""
    assert analyze(tiny(norm="layernorm"), seq=3).total().params - analyze(tiny(),
                                                                           seq=3).total().params == 5 * d


def test_rmsnorm_skips_the_mean_fewer_flops_same_activation_bytes() -> None:
    """Per element: RMSNorm 3 + gain = 4 FLOPs, LayerNorm 5 + gain + bias = 7; bytes differ only by params."""
    T = 3  # B=1, S=3
    rms, ln = leaf(tiny(), "layers/attention/norm"), leaf(tiny(norm="layernorm"), "layers/attention/norm")
    assert rms.flops_other == L * 4 * T * d
    assert ln.flops_other == L * 7 * T * d
    assert rms.bytes_unfused == L * P * (2 * T * d + d)
    assert ln.bytes_unfused == L * P * (2 * T * d + 2 * d)


@pytest.mark.parametrize("position, norms_per_layer, final", [
    ("pre", 2, 1), ("post", 2, 0), ("sandwich", 4, 1), ("post_sublayer", 2, 1),
])
def test_norm_positions_count_norms(position: str, norms_per_layer: int, final: int) -> None:
    """DESIGN.md: 2, 2, 4 norms per block; a final norm except after post-norm."""
    spec = tiny(norm_position=position)
    a = analyze(spec, seq=3)
    norm_params = sum(r.params for r in a.rows if r.path.endswith("norm"))
    assert norm_params == (L * norms_per_layer + final) * d
    if position == "sandwich":
        assert a.total("layers/attention/post_norm").params == L * d


def test_biases_add_out_features_per_linear() -> None:
    """q +8, k +4, v +4, o +8, gate/up +12 each, down +8 per layer; lm_head +V."""
    base = analyze(tiny(), seq=3).total().params
    biased = analyze(tiny(bias={"qkv": True, "attn_out": True, "ffn": True, "lm_head": True}), seq=3)
    assert biased.total().params - base == L * (8 + 4 + 4 + 8 + 12 + 12 + 8) + V
    # the bias add is elementwise: T * out FLOPs, not matmul
    assert leaf(tiny(bias=True), "layers/attention/q").flops_other == L * 3 * 8
    assert leaf(tiny(bias=True), "layers/attention/q").flops_matmul == leaf(tiny(),
                                                                            "layers/attention/q").flops_matmul


# --- FFN and activations -----------------------------------------------------------------


@pytest.mark.parametrize("activation, matrices, act_flops_per_element", [
    ("relu", 2, 1), ("gelu", 2, 8), ("reglu", 3, 1 + 1), ("geglu", 3, 8 + 1), ("swiglu", 3, 4 + 1),
])
def test_ffn_matrices_and_activation_flops(activation: str, matrices: int,
                                           act_flops_per_element: int) -> None:
    """Gated FFNs hold 3 d x f matrices, others 2; each costs 2*T*d*f FLOPs (T = B*S = 6)."""
    spec = tiny(activation=activation)
    T = 2 * 3
    ffn = leaf(spec, "layers/ffn", batch=2, seq=3)
    assert ffn.params == L * (matrices * d * f + d)  # + the pre-norm gain
    assert ffn.flops_matmul == L * matrices * 2 * T * d * f
    assert leaf(spec, "layers/ffn/act", batch=2, seq=3).flops_other == L * act_flops_per_element * T * f


def test_gated_ffn_at_two_thirds_width_keeps_params() -> None:
    """f = 8/3 d gated vs f = 4d plain: the same FFN parameters (Shazeer 2020). d=12: 32 vs 48."""
    gated = tiny(d_model=12, n_heads=3, n_kv_heads=3, d_ff=32, activation="swiglu")
    plain = tiny(d_model=12, n_heads=3, n_kv_heads=3, d_ff=48, activation="gelu")
    assert (analyze(gated, seq=3).total("layers/ffn/up").params * 3
            == analyze(plain, seq=3).total("layers/ffn/up").params * 2)
    gp = sum(analyze(gated, seq=3).total(f"layers/ffn/{m}").params for m in ("gate", "up", "down"))
    pp = sum(analyze(plain, seq=3).total(f"layers/ffn/{m}").params for m in ("up", "down"))
    assert gp == pp == L * 3 * 12 * 32


# --- block layout ----------------------------------------------------------------------------


def test_parallel_block_same_matmuls_one_norm_fewer_bytes() -> None:
    """GPT-J/PaLM: both branches read one normed input; outputs join the residual in one add."""
    serial, parallel = analyze(tiny(), seq=3), analyze(tiny(block="parallel"), seq=3)
    T = 3
    assert parallel.total().flops_matmul == serial.total().flops_matmul
    assert serial.total().params - parallel.total().params == L * d  # one norm fewer per layer
    # per layer: one norm fewer (2*T*d activations + d gains) and one 4-tensor add instead of two
    # 3-tensor adds
    saved = L * P * ((2 * T * d + d) + (3 + 3 - 4) * T * d)
    assert serial.total().bytes_unfused - parallel.total().bytes_unfused == saved
    assert parallel.total("layers/residual").flops_other == L * 2 * T * d


def test_parallel_block_with_two_norms() -> None:
    """GPT-NeoX: x + Attn(norm1(x)) + FFN(norm2(x)) keeps two norms per layer."""
    two = analyze(tiny(block="parallel", shared_norm=False), seq=3)
    assert two.total().params == analyze(tiny(), seq=3).total().params
    assert two.total("layers/attention/norm").params == L * d


# --- positions -----------------------------------------------------------------------------


def test_learned_positions_table_and_add() -> None:
    spec = tiny(position="learned", max_seq_len=64)
    pos = leaf(spec, "embedding/positions", batch=2, seq=3)
    assert pos.params == 64 * d
    assert pos.flops_other == 2 * 3 * d  # one add per element of B*S*d
    assert analyze(spec, seq=3).params_embedding == V * d + 64 * d


def test_sinusoidal_positions_have_no_parameters() -> None:
    spec = tiny(position="sinusoidal")
    assert leaf(spec, "embedding/positions").params == 0
    assert leaf(spec, "embedding/positions").flops_other == 3 * d


def test_rope_rotates_q_and_k_every_layer() -> None:
    """3 FLOPs per rotated element; (B*S*h + B*S*k) * r elements; r = fraction * d_h."""
    T = 2 * 3
    assert leaf(tiny(), "layers/attention/rope", batch=2).flops_other == L * 3 * (T * h + T * k) * d_h
    half = tiny(rotary_fraction=0.5)
    assert leaf(half, "layers/attention/rope", batch=2).flops_other == L * 3 * (T * h + T * k) * (d_h // 2)
    assert leaf(tiny(), "layers/attention/rope").params == 0


def test_t5_relative_bias_one_table_per_stack() -> None:
    """buckets * h scalars, once per stack; the h x S x C bias is added to every layer's scores."""
    spec = tiny(position="t5_relative", relative_buckets=32)
    a = analyze(spec, batch=2, seq=3)
    assert a.total("position_bias").params == 32 * h
    assert a.total("layers/attention/position_bias").flops_other == L * 2 * h * 3 * 3


def test_alibi_no_parameters_slope_times_distance() -> None:
    a = analyze(tiny(position="alibi"), batch=2, seq=3)
    assert a.total().params == analyze(tiny(position="none"), seq=3).total().params
    assert a.total("position_bias").flops_other == h * 3 * 3
    assert a.total("layers/attention/position_bias").flops_other == L * 2 * h * 3 * 3


def test_nope_has_no_position_cost() -> None:
    a = analyze(tiny(position="none"), seq=3)
    assert not [r for r in a.rows if "rope" in r.path or "position" in r.path]


# --- embeddings -----------------------------------------------------------------------------


def test_tied_embeddings_counted_once_head_still_computed() -> None:
    """Tied: V*d parameters fewer, the same 2*T*d*V head FLOPs, the table still read."""
    untied, tied = analyze(tiny(), batch=2, seq=3), analyze(tiny(tied_embeddings=True), batch=2, seq=3)
    assert untied.total().params - tied.total().params == V * d
    assert tied.params_lm_head == 0
    assert tied.total("lm_head").flops_matmul == 2 * (2 * 3) * d * V
    assert tied.total("lm_head").bytes_fused == untied.total("lm_head").bytes_fused


def test_embedding_scale_is_one_multiply_per_element() -> None:
    assert leaf(tiny(embedding_scale=True), "embedding/tokens").flops_other == 3 * d
    assert leaf(tiny(), "embedding/tokens").flops_other == 0


# --- attention ------------------------------------------------------------------------------


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_kv_cache_is_2_L_B_C_k_dh_p(kv_heads: int) -> None:
    """Decode with 5 cached tokens attends to C = 6; the cache then holds 6 tokens per sequence."""
    spec = tiny(n_kv_heads=kv_heads)
    a = analyze(spec, "decode", batch=3, seq=5)
    assert a.total().kv_cache == 2 * L * 3 * 6 * kv_heads * d_h * P
    assert analyze(spec, "prefill", batch=3, seq=5).total().kv_cache == 2 * L * 3 * 5 * kv_heads * d_h * P
    assert analyze(spec, "train", batch=3, seq=5).total().kv_cache == 0


def test_mha_gqa_mqa_projection_parameters() -> None:
    """Q and O: d*h*d_h each; K and V: d*k*d_h each (Ainslie et al. 2023; Shazeer 2019)."""
    for kv_heads in (2, 1):
        a = analyze(tiny(n_kv_heads=kv_heads), seq=3)
        assert a.total("layers/attention/k").params == L * d * kv_heads * d_h
        assert a.total("layers/attention/q").params == L * d * h * d_h


def test_scores_and_av_dense_and_causal() -> None:
    """Dense: 2*B*h*S*C*d_h each; causal mask allows S(S+1)/2 pairs per head."""
    B, S = 2, 5
    sc = leaf(tiny(), "layers/attention/scores", batch=B, seq=S)
    assert sc.flops_matmul == L * 2 * B * h * S * S * d_h
    assert sc.flops_matmul_effective == L * 2 * B * h * (S * (S + 1) // 2) * d_h
    assert leaf(tiny(), "layers/attention/av", batch=B, seq=S).flops_matmul == sc.flops_matmul
    # decode: one query over C = 6 keys, nothing masked
    dec = leaf(tiny(), "layers/attention/scores", "decode", batch=B, seq=5)
    assert dec.flops_matmul == dec.flops_matmul_effective == L * 2 * B * h * 1 * 6 * d_h
    assert leaf(tiny(), "layers/attention/softmax", batch=B, seq=S).flops_other == L * 5 * B * h * S * S


def test_sliding_window_decode_cache_and_span() -> None:
    """w = 4, 9 cached: the new token attends to min(10, 4) keys; a rolling cache keeps 4."""
    spec = tiny(window=4)
    a = analyze(spec, "decode", batch=3, seq=9)
    assert a.total().kv_cache == 2 * L * 3 * 4 * k * d_h * P
    assert a.total("layers/attention/scores").flops_matmul == L * 2 * 3 * h * 4 * d_h


def test_sliding_window_prefill_dense_full_effective_banded() -> None:
    """Prefill S=10, w=4: the dense matrix is 10 x 10; the band allows sum_j min(j, 4) pairs."""
    S, w = 10, 4
    sc = leaf(tiny(window=w), "layers/attention/scores", seq=S)
    assert sc.flops_matmul == L * 2 * h * S * S * d_h
    assert sc.flops_matmul_effective == L * 2 * h * (1 + 2 + 3 + 4 * 7) * d_h
    assert analyze(tiny(window=w), seq=S).total().kv_cache == 2 * L * w * k * d_h * P


@given(st.integers(1, 40), st.integers(0, 40), st.integers(1, 50))
def test_window_pairs_match_brute_force(S: int, cached: int, w: int) -> None:
    """The closed form for sum over queries C-S+1..C of min(j, w) equals the loop."""
    C = S + cached
    dims = numeric_dims(tiny(window=w), dict(B=1, S=S, C=C, S_e=0, C_e=0), 2)
    shape = attn.causal(dims, window=True)
    assert shape.pairs == sum(min(j, w) for j in range(C - S + 1, C + 1))
    assert shape.span == min(C, w + S - 1)
    assert shape.cached == min(C, w)
    full = attn.causal(dims, window=False)
    assert full.pairs == sum(range(C - S + 1, C + 1))


def test_local_global_interleave_and_nope() -> None:
    """[local, global] over 2 layers: one keeps min(C, w) tokens, one keeps C; NoPE on global."""
    spec = tiny(window=4, layer_pattern=["local", "global"], global_nope=True)
    a = analyze(spec, "decode", batch=1, seq=9)
    assert a.total().kv_cache == 2 * 1 * (4 + 10) * k * d_h * P
    paths = {r.path for r in a.rows}
    assert "layers[local]/attention/rope" in paths
    assert "layers[global]/attention/rope" not in paths


def test_qk_norm_per_head_or_full() -> None:
    """head: one d_h gain for q and one for k; full: h*d_h and k*d_h gains."""
    base = analyze(tiny(), seq=3).total().params
    assert analyze(tiny(qk_norm="head"), seq=3).total().params - base == L * 2 * d_h
    assert analyze(tiny(qk_norm="full"), seq=3).total().params - base == L * (h + k) * d_h
    # the same elements are normalised either way: (T*h + T*k) * d_h, 4 FLOPs each (RMSNorm)
    for scope in ("head", "full"):
        assert leaf(tiny(qk_norm=scope),
                    "layers/attention/qk_norm").flops_other == L * 4 * (3 * h + 3 * k) * d_h


def test_soft_capping_three_flops_per_element() -> None:
    """cap * tanh(z / cap) on every score (B*h*S*C) and every logit (B*S*V)."""
    spec = tiny(attn_softcap=50.0, final_softcap=30.0)
    assert leaf(spec, "layers/attention/softcap", batch=2).flops_other == L * 3 * 2 * h * 3 * 3
    assert leaf(spec, "logit_softcap", batch=2).flops_other == 3 * 2 * 3 * V


def test_z_loss_only_in_training() -> None:
    """logsumexp over B*S*V logits (4 per logit) + square and scale per token; backward 2x."""
    spec = tiny(z_loss=1e-4)
    T = 2 * 3
    assert leaf(spec, "loss/z_loss", "train", batch=2).flops_other == 3 * (4 * T * V + 2 * T)
    assert leaf(spec, "loss/z_loss", "prefill", batch=2).flops_other == 0


def test_dropout_only_in_training() -> None:
    spec = tiny(dropout=0.1)
    assert leaf(spec, "layers/attention/dropout", "train").flops_other > 0
    assert leaf(spec, "layers/attention/dropout", "prefill").flops_other == 0
    # on the attention probabilities (h*S*C) and the branch output (S*d): 2 FLOPs each, x3
    assert leaf(spec, "layers/attention/dropout", "train").flops_other == L * 3 * 2 * (h * 3 * 3 + 3 * d)


# --- phases ---------------------------------------------------------------------------------


def test_training_matmuls_are_three_forward_passes() -> None:
    for name in ("llama-2-7b", "t5-11b", "gemma-2-9b"):
        spec = load(name)
        fwd, step = analyze(spec, "prefill", batch=2, seq=64), analyze(spec, "train", batch=2, seq=64)
        assert step.total().flops_matmul == 3 * fwd.total().flops_matmul


def test_gpt3_175b_training_flops_match_palm_formula() -> None:
    """PaLM appendix B: 6N + 12*L*H*Q*T FLOPs per token, N the matmul weights (LM head included),
    for a dense MHA decoder whose h*d_h = d (GPT-3 175B: L=96, d=12288, f=4d, V=50257)."""
    L_, d_, V_, S = 96, 12288, 50257, 2048
    N = L_ * (4 * d_ * d_ + 2 * d_ * 4 * d_) + V_ * d_
    per_token = 6 * N + 12 * L_ * d_ * S
    a = analyze(load("gpt3-175b"), "train", batch=1, seq=S)
    assert a.total().flops_matmul == S * per_token


# --- encoder-decoder ------------------------------------------------------------------------


def enc_dec(**changes):
    return tiny(
        architecture="encoder-decoder", n_layers=None, n_encoder_layers=1, n_decoder_layers=1,
        n_kv_heads=2, norm="layernorm", norm_position="post", activation="relu",
        position="sinusoidal", bias={"ffn": True}, tied_embeddings=True, **changes,
    )


def test_encoder_decoder_parameters_by_hand() -> None:
    """Encoder: attention 4*64, FFN 2*96 + 12 + 8, 2 LayerNorms 2*16. Decoder adds cross-attention
    and a third norm. One shared, tied embedding table; post-norm has no final norms."""
    a = analyze(enc_dec(), seq=3)
    encoder = 4 * 64 + (2 * 96 + 12 + 8) + 2 * 16
    decoder = 4 * 64 + 4 * 64 + (2 * 96 + 12 + 8) + 3 * 16
    assert (encoder, decoder) == (500, 772)
    assert a.total().params == encoder + decoder + V * d
    assert a.total("decoder/layers/cross_attention").params == 4 * 64 + 16


def test_cross_attention_scores_span_the_encoder() -> None:
    """Prefill: decoder queries S=3 over S_e=7 encoder outputs: 2*B*h*S*S_e*d_h."""
    sc = leaf(enc_dec(), "decoder/layers/cross_attention/scores", batch=2, seq=3, enc_seq=7)
    assert sc.flops_matmul == sc.flops_matmul_effective == 2 * 2 * h * 3 * 7 * d_h


def test_encoder_decoder_decode_reuses_cached_encoder() -> None:
    """Decode: the encoder does not run and cross K/V are not recomputed, but they are cached:
    self-attention holds C = 6 tokens, cross-attention C_e = 7, per decoder layer."""
    a = analyze(enc_dec(), "decode", batch=2, seq=5, enc_seq=7)
    assert a.total("encoder").flops == 0
    assert a.total("decoder/layers/cross_attention/k").flops_matmul == 0
    assert a.total("decoder/layers/cross_attention/q").flops_matmul == 2 * 2 * d * h * d_h
    assert a.total().kv_cache == 2 * 2 * (6 + 7) * 2 * d_h * P
