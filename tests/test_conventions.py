"""Each paper's counting convention reproduces figures the paper (or a paper applying it) prints.

Published figures, with where they are printed:
- Kaplan et al. 2020 (arXiv:2001.08361), Table 1 and section 2.1; Kaplan's C = 6N per token as
  Brown et al. 2020 (GPT-3, arXiv:2005.14165) apply it in Table D.1.
- Hoffmann et al. 2022 (Chinchilla, arXiv:2203.15556), appendix F and Table A4.
- Narayanan et al. 2021 (Megatron-LM, arXiv:2104.04473), Table 1, Eq. 2-4 and section 5.1.
- Chowdhery et al. 2022 (PaLM, arXiv:2204.02311), section 4.1, appendix B and Table 22.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from costmodel import catalog
from costmodel.analysis import count_params
from costmodel.studies.conventions import (
    chinchilla_forward_flops,
    compare_conventions,
    kaplan_forward_flops_per_token,
    kaplan_params,
    megatron_flops_per_iteration,
    megatron_params,
    megatron_training_seconds,
    model_flops_utilization,
    palm_train_flops_per_token,
    paper_counts,
    selected,
)
from costmodel.studies.variants import variant

DAY = 86_400
PF_DAY = 1e15 * DAY  # Brown et al. 2020, Table D.1: "each of which are 8.64e+19 flops"


# --- Kaplan et al. 2020 ---------------------------------------------------------------------


def test_kaplan_n_is_12_l_d2_in_the_standard_shape():
    """Table 1: N = 2 d L (2 d_attn + d_ff) = 12 L d^2 with d_attn = d_ff / 4 = d."""
    L, d = 96, 12288
    assert kaplan_params(L, d, d, 4 * d) == 12 * L * d * d == 173_946_175_488


def test_kaplan_context_term_equals_2n_at_d_equal_n_ctx_over_12():
    """Section 2.1: the context term 2 L n_ctx d is small only for d_model > n_ctx / 12; at
    d = n_ctx / 12 it equals the 2N of the weights."""
    L, d = 24, 1024
    n = kaplan_params(L, d, d, 4 * d)
    assert kaplan_forward_flops_per_token(n, L, 12 * d, d) == 2 * n + 2 * n


# Brown et al. 2020, Table D.1: params (M), total train compute (flops), (PF-days), 300B tokens.
GPT3_TABLE_D1 = [
    ("GPT-3 Small", 125, "2.25E+20", "2.60E+00"),
    ("GPT-3 Medium", 356, "6.41E+20", "7.42E+00"),
    ("GPT-3 Large", 760, "1.37E+21", "1.58E+01"),
    ("GPT-3 XL", 1_320, "2.38E+21", "2.75E+01"),
    ("GPT-3 2.7B", 2_650, "4.77E+21", "5.52E+01"),
    ("GPT-3 6.7B", 6_660, "1.20E+22", "1.39E+02"),
    ("GPT-3 13B", 12_850, "2.31E+22", "2.68E+02"),
    ("GPT-3 175B", 174_600, "3.14E+23", "3.64E+03"),
]


@pytest.mark.parametrize("model, params_m, flops, pf_days", GPT3_TABLE_D1)
def test_gpt3_table_d1_is_kaplans_6n_per_token(model, params_m, flops, pf_days):
    """Brown et al. 2020, Table D.1: 6 FLOPs per parameter per token (Kaplan's C = 6N) x 300B tokens."""
    c = 6 * params_m * 1e6 * 300e9
    assert f"{c:.2E}" == flops
    assert f"{c / PF_DAY:.2E}" == pf_days


def test_gpt3_175b_table_d1_from_our_exact_count_and_the_kaplan_n_gap():
    """Our exact GPT-3 175B count with 6N gives Table D.1's 3.14E+23 FLOPs and 3.64E+03 PF-days;
    Kaplan's non-embedding N (no V*d, no position table) gives 3.13E+23, 0.4% less."""
    spec = catalog.load("gpt3-175b")
    c = 6 * count_params(spec) * 300e9
    assert (f"{c:.2E}", f"{c / PF_DAY:.2E}") == ("3.14E+23", "3.64E+03")
    kaplan = paper_counts(spec, 2048, ("kaplan",))[0]
    assert kaplan.params == 173_946_175_488
    assert f"{kaplan.extras['six_n'] * 300e9:.2E}" == "3.13E+23"


# --- Hoffmann et al. 2022 (Chinchilla) -------------------------------------------------------


def chinchilla_params(vocab: int, d: int, layers: int, ffw: int) -> int:
    """Chinchilla's parameter count as nanoGPT's scaling_laws.ipynb reconstructs it (an
    independent implementation): per layer QKV and output projections with biases, a
    Transformer-XL relative-position projection (d^2 + 2d), an FFN with biases and two
    LayerNorms; a final LayerNorm and the output projection d*V (the input table excluded)."""
    per_layer = (3 * d * d + 3 * d) + (d * d + 2 * d) + (d * d + d) + (d * ffw + ffw) + (ffw * d + d) + 4 * d
    return layers * per_layer + 2 * d + d * vocab


# Hoffmann et al. 2022, Table A4: num_layers, d_model, ffw_size, num_heads, k/q size, FLOP ratio.
CHINCHILLA_TABLE_A4 = [
    ("73M", 10, 640, 2560, 10, 64, 1.03),
    ("305M", 20, 1024, 4096, 16, 64, 1.10),
    ("552M", 24, 1280, 5120, 10, 128, 1.08),
    ("1.1B", 26, 1792, 7168, 14, 128, 1.04),
    ("1.6B", 28, 2048, 8192, 16, 128, 1.03),
    ("6.8B", 40, 3584, 14336, 28, 128, 0.99),
]


@pytest.mark.parametrize("label, layers, d, ffw, heads, kq, ratio", CHINCHILLA_TABLE_A4)
def test_chinchilla_table_a4_ratio_of_appendix_f_to_6nd(label, layers, d, ffw, heads, kq, ratio):
    """Table A4: appendix F's count over 6ND, per sequence (D = seq_len = 2048, vocabulary 32K).
    The ratios come out only without the embedding and logit terms: the authors' correction of
    appendix F, as nanoGPT's scaling_laws.ipynb reports it."""
    seq, vocab = 2048, 32_000
    train = 3 * chinchilla_forward_flops(seq, vocab, d, heads, kq, layers, ffw, embeddings_and_logits=False)
    n = chinchilla_params(vocab, d, layers, ffw)
    assert round(train / (6 * n * seq), 2) == ratio


def test_chinchilla_appendix_f_terms_for_one_layer():
    """Appendix F, by hand for S=2, V=3, d=4, H=2, k=2, L=1, f=8."""
    S, V, d, H, k, f = 2, 3, 4, 2, 2, 8
    ends = 2 * S * V * d + 2 * S * d * V
    attention = (2 * 3 * S * d * k * H + 2 * S * S * k * H + 3 * H * S * S + 2 * S * S * k * H
                 + 2 * S * k * H * d)
    dense = 2 * S * 2 * d * f
    assert (chinchilla_forward_flops(S, V, d, H, k, 1, f) == ends + attention + dense
            == 96 + (192 + 32 + 24 + 32 + 64) + 256)


# --- Narayanan et al. 2021 (Megatron-LM) ------------------------------------------------------

# Table 1 (vocabulary 51,200, sequence 2048): params (billion), heads, hidden size, layers.
MEGATRON_TABLE_1 = [
    (1.7, 24, 2304, 24),
    (18.4, 48, 6144, 40),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


@pytest.mark.parametrize("billions, heads, hidden, layers", MEGATRON_TABLE_1)
def test_megatron_table_1_params_from_eq_2(billions, heads, hidden, layers):
    assert round(megatron_params(layers, hidden, 51_200, 2048) / 1e9, 1) == billions


def test_megatron_training_time_estimates_from_eq_4():
    """Section 5.1: GPT-3 175B on 1024 A100s at 140 teraFLOP/s per GPU, 300B tokens, about 34
    days; the 1T model on 3072 GPUs at 163 teraFLOP/s, 450B tokens, about 84 days."""
    gpt3 = megatron_params(96, 12288, 51_200, 2048)
    one_t = megatron_params(128, 25600, 51_200, 2048)
    assert round(megatron_training_seconds(300e9, gpt3, 1024, 140e12) / DAY) == 34
    assert round(megatron_training_seconds(450e9, one_t, 3072, 163e12) / DAY) == 84


def test_megatron_eq_3_factored_form():
    """72 B s l h^2 (1 + s/(6h) + V/(12lh)) without recomputation; Eq. 3, with full
    recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16lh))."""
    B, s, l, h, V = 8, 2048, 96, 12288, 51_200
    lead = B * s * l * h * h
    assert megatron_flops_per_iteration(B, s, l, h, V) == \
        72 * lead * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * l * h))
    assert megatron_flops_per_iteration(B, s, l, h, V, recompute=True) == \
        96 * lead * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * l * h))


@pytest.mark.parametrize("name", ["gpt2-small", "gpt2-xl", "gpt3-125m", "gpt3-175b"])
def test_megatron_formula_equals_our_matmul_count_for_gpt_shapes(name):
    """On the architecture Megatron's formula assumes (MHA, d_ff = 4d, one V*d head) its FLOPs are
    exactly our dense matmul count: two independent counts agree to the FLOP."""
    spec = catalog.load(name)
    megatron = compare_conventions(spec, names=("megatron",))[0]
    assert megatron.count.convention == "megatron"
    assert megatron.count.train == megatron.ours_train_matmul


def test_megatron_params_of_gpt3_175b_miss_only_the_final_layernorm():
    """Eq. 2 counts 13h per layer (biases and two LayerNorms) but not the final LayerNorm (2h)."""
    rows = compare_conventions(catalog.load("gpt3-175b"), 2048, ("megatron",))
    assert rows[0].ours_params - rows[0].count.params == 2 * 12288


# --- Chowdhery et al. 2022 (PaLM) ------------------------------------------------------------

# Table 1 (params, layers, heads; head size always 256) and Table 22 (TFLOPs per token,
# non-attention + attention, no rematerialisation), sequence length 2048.
PALM_TABLE_22 = [(8.63e9, 32, 16, "0.0550"), (62.50e9, 64, 32, "0.388"), (540.35e9, 118, 48, "3.28")]


@pytest.mark.parametrize("params, layers, heads, tflops", PALM_TABLE_22)
def test_palm_table_22_flops_per_token(params, layers, heads, tflops):
    per_token = palm_train_flops_per_token(int(params), layers, heads, 256, 2048)
    assert round(per_token / 1e12, len(tflops.split(".")[1])) == float(tflops)


def test_palm_mfu_of_palm_540b():
    """Appendix B: 238.3K tokens/s on 6144 TPU v4 at 275 peak TFLOP/s: 45.7% without self-attention
    (6N, N = 540B as the appendix writes it) and 46.2% with it."""
    peak = 6144 * 275e12
    assert f"{model_flops_utilization(238.3e3, 6 * 540e9, peak):.1%}" == "45.7%"
    with_attention = palm_train_flops_per_token(int(540e9), 118, 48, 256, 2048)
    assert f"{model_flops_utilization(238.3e3, with_attention, peak):.1%}" == "46.2%"


def test_palm_convention_on_our_palm_540b_spec():
    """Through our spec (N = our exact 540,356,474,880): 3.28 TFLOPs per token, MFU 46.2%."""
    row = compare_conventions(catalog.load("palm-540b"), 2048, ("palm",))[0]
    assert f"{row.count.train / 1e12:.3g}" == "3.28"
    assert f"{model_flops_utilization(238.3e3, row.count.train, 6144 * 275e12):.1%}" == "46.2%"


@pytest.mark.parametrize("d, layers, heads, published", [(4096, 32, 16, 8.63), (8192, 64, 32, 62.50)])
def test_palm_8b_and_62b_as_variants_of_palm_540b(d, layers, heads, published):
    """Table 1: the smaller PaLMs differ only in d_model, layers and heads (d_ff = 4d, head 256)."""
    changes = {"d_model": d, "n_layers": layers, "n_heads": heads, "d_ff": 4 * d}
    spec = variant(catalog.load("palm-540b"), changes)
    assert round(count_params(spec) / 1e9, 2) == published


# --- what each leaves out, and the selection ----------------------------------------------------


def test_selection_of_conventions():
    assert selected(["exact"]) == ()
    assert selected(["palm", "kaplan"]) == ("kaplan", "palm")
    assert selected(["all"]) == ("kaplan", "chinchilla", "megatron", "palm")


def test_leaves_out_names_what_this_spec_has():
    """A gated GQA model with RoPE and an untied head: each formula says what it misses."""
    counts = {c.convention: c for c in paper_counts(catalog.load("llama-3-8b"), 2048)}
    assert any("gated FFN" in x for x in counts["kaplan"].leaves_out)
    assert any(x.startswith("GQA") for x in counts["chinchilla"].leaves_out)
    assert any("learned position table" in x for x in counts["megatron"].leaves_out)
    assert any("untied" in x for x in counts["palm"].leaves_out)
    gpt3 = paper_counts(catalog.load("gpt3-175b"), 2048, ("kaplan",))[0]
    assert all("gated" not in x for x in gpt3.leaves_out)


def test_encoder_decoder_gets_no_paper_count():
    for c in paper_counts(catalog.load("t5-11b"), 512):
        assert c.train is None and c.params is None
        assert "decoder-only" in c.leaves_out[0]


def test_kaplan_undercounts_a_gated_ffn_by_a_third_of_its_weights():
    """LLaMA 2 7B: Kaplan's N counts 2*d*d_ff per layer; the model has 3*d*d_ff."""
    L, d, f = 32, 4096, 11008
    kaplan = paper_counts(catalog.load("llama-2-7b"), 2048, ("kaplan",))[0]
    assert kaplan.params == 2 * d * L * (2 * d + f)
    assert kaplan.params + L * d * f == L * (4 * d * d + 3 * d * f)  # our layers' weights, norms aside
