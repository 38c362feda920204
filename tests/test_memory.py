"""Memory formulas against hand-derived counts and published figures (ZeRO; Korthikanti et al.)."""

from __future__ import annotations

import json

import pytest
import sympy
from typer.testing import CliRunner

from costmodel import catalog, model
from costmodel import symbols as sym
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.runtime.memory import (
    MemoryConfigError,
    Parallel,
    Run,
    fit,
    korthikanti,
    memory,
    model_states,
)
from tests.helpers import is_layer, tiny

runner = CliRunner()
N = 1160  # tiny's parameters: 2 x 496 per layer, 80 embedding, 8 final norm, 80 untied head
FACTORED = 2 * (8 + 16 + 12 + 12 + 16 + 8 + 20 + 20 + 20) + 18 + 8 + 18  # rows + cols / vectors


# --- ZeRO, Rajbhandari et al. 2020 ------------------------------------------------------------


@pytest.mark.parametrize("stage, expected, paper", [
    (0, 120_000_000_000, 120.0), (1, 31_406_250_000, 31.4), (2, 16_640_625_000, 16.6), (3, 1_875_000_000,
                                                                                        1.9),
])
def test_zero_paper_section5(stage: int, expected: int, paper: float) -> None:
    """7.5B parameters, AdamW bf16-mixed (K = 12), 64 data-parallel ranks: 120, 31.4, 16.6, 1.9 GB."""
    s = model_states(7_500_000_000, 0, Run(), Parallel(dp=64, zero=stage))
    total = s["weights"] + s["gradients"] + s["optimizer"]
    assert total == expected
    assert round(total / 1e9, 1) == paper


# --- model states by optimizer and recipe, hand-derived ------------------------------------------


@pytest.mark.parametrize("optimizer, precision, weights, grads, optim", [
    ("adamw", "bf16-mixed", 2 * N, 2 * N, 12 * N),
    ("sgd", "bf16-mixed", 2 * N, 2 * N, 8 * N),
    ("adam8bit", "bf16-mixed", 2 * N, 2 * N, 2 * (N + 4) + 4 * N),  # one 2048-block of absmax each
    ("adafactor", "bf16-mixed", 2 * N, 2 * N, 4 * FACTORED + 4 * N),
    ("adamw", "bf16", 2 * N, 2 * N, 4 * N),
    ("adamw", "fp32", 4 * N, 4 * N, 8 * N),
    ("adamw", "fp8-mixed", 3 * N, 2 * N, 12 * N),
])
def test_states_by_recipe(optimizer: str, precision: str, weights: int, grads: int, optim: int) -> None:
    m = memory(tiny(), "train", 2, 8, run=Run(optimizer=optimizer, precision=precision))
    assert (m.total("weights"), m.total("gradients"), m.total("optimizer")) == (weights, grads, optim)


def test_zero_shards_a_real_spec() -> None:
    m = memory(tiny(), "train", 1, 8, parallel=Parallel(dp=8, zero=3))
    assert (m.total("weights"), m.total("gradients"), m.total("optimizer")) == (-(-2 * N // 8),
                                                                                -(-2 * N // 8),
                                                                                 -(-8 * N // 8) + 4 * N // 8)


def test_tiny_activations_by_hand() -> None:
    """B=2, S=8 (T=16), bf16, two layers; masks 1 byte."""
    T, d, f, V, h, k, d_h, S, L = 16, 8, 12, 10, 2, 1, 4, 8, 2
    rms = 4 * (2 * T * d + T)  # fp32 copy, fp32 normalised x, fp32 1/rms per row
    attention = rms + 2 * T * d + 2 * (2 * h * S * d_h + 2 * k * S * d_h) + 2 * 2 * h * S * S \
        + 2 * 2 * k * S * d_h + 2 * T * h * d_h
    ffn = rms + 2 * T * d + 3 * 2 * T * f + 2 * T * f  # gate in; silu in, both factors; down in
    outside = 8 * T + rms + 2 * T * d + (2 * T * V + 8 * T + 2)  # ids; final norm; head in; loss
    shared = S * S + 2 * S * d_h * 2  # causal mask; cos and sin
    assert memory(tiny(), "train", 2, 8).total("activations") == L * (attention + ffn) + outside + shared


@pytest.mark.parametrize("name, masks", [
    ("llama-3-8b", 1), ("gemma-3-27b", 2),  # global; local and global
    ("deepseek-v2-lite", 1), ("kimi-k2", 1),  # dense and sparse layers, all global: one mask
    ("llama-4-maverick", 2)])  # chunked and global, each dense and sparse
def test_one_causal_mask_per_attention_kind_not_per_layer_group(name: str, masks: int) -> None:
    """The reference builds one S x S bool mask per (window, chunk) and every layer of that kind
    reads it (``measure.reference``: ``step.once(("mask", window, chunk))``); a stack's dense and
    sparse layers of one kind share it (it was once counted per layer group: 64 B too many at
    S = 8 on DeepSeek-V2-Lite and Kimi K2)."""
    items = {i.path: i.bytes for i in memory(catalog.load(name), "train", 2,
                                             8).items if i.category == "activations"}
    assert items["layers/causal_mask"] == masks * 8 * 8


def test_the_balance_loss_keeps_the_expert_counts() -> None:
    """Switch's loss alpha E sum_i f_i P_i: the product keeps f (E counts in the scores' dtype)
    for P's gradient, per sparse layer: Mixtral 8 x 2 B, DeepSeek-V3 (fp32 router) 256 x 4 B."""
    for name, per_layer in (("mixtral-8x7b", 8 * 2), ("deepseek-v3", 256 * 4)):
        spec = catalog.load(name)
        items = {i.path: i.bytes for i in memory(spec, "train", 2, 8).items if i.category == "activations"}
        aux = next(v for k, v in items.items() if k.endswith("ffn/aux_loss"))
        assert aux == per_layer * sum(spec.sparse_layers())


def test_recompute_modes_by_hand() -> None:
    spec = tiny()
    none = memory(spec, "train", 2, 8).total("activations")
    selective = memory(spec, "train", 2, 8, run=Run(recompute="selective")).total("activations")
    full = memory(spec, "train", 2, 8, run=Run(recompute="full")).total("activations")
    flash = memory(spec, "train", 2, 8, run=Run(flash=True)).total("activations")
    probs = 2 * 2 * 2 * 8 * 8  # B h S S p, per layer
    assert none - selective == 2 * probs
    rms, T, d = 4 * (2 * 16 * 8 + 16), 16, 8
    assert full == 2 * 2 * T * d + 8 * T + rms + 2 * T * d + (2 * T * 10 + 8 * T + 2)
    # flash: the output (B h S d_h p) and fp32 log-sum-exp (B h S 4) instead of P; no mask; its
    # RMSNorms (two a layer, the final one) keep their bf16 input, not the fp32 copy and normalised
    # x (6 T d fewer bytes each), SwiGLU gate and up without SiLU(gate) (2 T f a layer)
    one_kernel = (2 * 2 + 1) * 6 * T * d + 2 * 2 * T * 12
    assert flash == none - 2 * probs - 64 + 2 * (2 * 2 * 8 * 4 * 2 + 2 * 2 * 8 * 4) - one_kernel


# --- Korthikanti et al. 2022, Table 2 -------------------------------------------------------------


def _gpt_layer_symbolic(recompute: str = "none") -> sympy.Expr:
    """Our per-layer kept bytes for their GPT layer, symbolically: s, b, h (hidden), a (heads)."""
    spec = catalog.load("gpt2-small")  # LayerNorm, 4h GeLU, dropout everywhere, MHA
    costs = model.components(spec, model.symbolic_dims(spec))
    s, b, hid, a = sympy.symbols("s b h a", positive=True)
    subs = {sym.S: s, sym.C: s, sym.B: b, sym.d: hid, sym.h: a, sym.k: a, sym.d_h: hid / a, sym.f: 4 * hid,
            sym.p: 2,
            sym.layer_count("layers", None): 1}
    total = 0
    for path, c in costs.items():
        if not is_layer(path):
            continue
        kept = c.saved + c.mask_elements  # 1-byte masks
        leaf = path.rsplit("/", 1)[1]
        if recompute == "selective":
            scores = sym.B * sym.h * sym.S * sym.C
            kept -= {"softmax": 2 * scores, "av": 2 * scores, "dropout": scores if "attention" in path else 0
                     }.get(leaf, 0)
        total += sympy.sympify(kept).xreplace(subs)
    return sympy.expand(total), (s, b, hid, a)


def test_korthikanti_per_layer_symbolic() -> None:
    """sbh(34 + 5as/h) and, with selective recompute, 34sbh: ours equals theirs plus the 16sb of
    the two LayerNorms' fp32 statistics (mean and 1/std of every row), which they leave out."""
    ours, (s, b, hid, a) = _gpt_layer_symbolic()
    assert sympy.expand(ours - korthikanti(s, b, hid, a)) == 16 * s * b
    assert sympy.expand(korthikanti(s, b, hid, a) - s * b * hid * (34 + 5 * a * s / hid)) == 0
    selective, _ = _gpt_layer_symbolic("selective")
    assert sympy.expand(selective - korthikanti(s, b, hid, a, recompute="selective")) == 16 * s * b


def test_korthikanti_table2_variants() -> None:
    s, b, hid, a, t = sympy.symbols("s b h a t", positive=True)
    table = {
        (False, "none"): s * b * hid * (10 + 24 / t + 5 * a * s / (hid * t)),
        (True, "none"): s * b * hid / t * (34 + 5 * a * s / hid),
        (False, "selective"): s * b * hid * (10 + 24 / t),
        (True, "selective"): 34 * s * b * hid / t,
        (False, "full"): 2 * s * b * hid,
    }
    for (sp, rec), expected in table.items():
        assert sympy.simplify(korthikanti(s, b, hid, a, t, sp, rec) - expected) == 0, (sp, rec)


# --- inference ----------------------------------------------------------------------------------


def test_weight_only_int4_with_group_scales() -> None:
    """Layer matrices at 4 bits plus an fp16 scale per 4 weights; the rest (embedding, norms,
    the LM head) at bf16."""
    m = memory(tiny(), "decode", 1, 7, run=Run(weights_dtype="int4", group_size=4))
    matrices = 2 * (64 + 32 + 32 + 64 + 96 + 96 + 96)
    assert m.total("weights") == matrices // 2 + (matrices // 4) * 2 + (N - matrices) * 2


def test_kv_cache_dtype() -> None:
    """decode B=2 after 7 cached: C=8; 2 (K,V) x B x k x d_h x C x p per layer, two layers."""
    bf16 = memory(tiny(), "decode", 2, 7).total("kv_cache")
    fp8 = memory(tiny(), "decode", 2, 7, run=Run(kv_dtype="fp8")).total("kv_cache")
    assert bf16 == 2 * (2 * 2 * 1 * 4 * 8 * 2) and fp8 == bf16 // 2


#: tiny with latent attention: d=8, h=2, r_q=6, r_kv=4, d_n=4, d_r=2, d_v=3 (RoPE), f=12, V=10, L=2.
TINY_MLA = dict(kind="mla", q_lora_rank=6, kv_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=2,
                v_head_dim=3)


def _sites(spec, phase: str, batch: int, seq: int, run: Run) -> dict[str, int]:
    from costmodel.runtime.memory import live_peak

    m = memory(spec, phase, batch, seq, run=run)
    return live_peak(spec, m.shape, 2, run.flash, False, m.mla or "naive")


def test_latent_attention_live_peak_by_hand() -> None:
    """Both conventions of tiny MLA, bf16 (p = 2), B = 2. Every site holds the stream 2*p*B*S*d;
    latent attention the queries p*B*S*h*(d_n + d_r) and their rotated part p*B*S*h*d_r; naive
    the C latents re-expanded p*B*h*C*(d_n + d_v), keys p*B*h*C*(d_n + d_r), values p*B*h*C*d_v,
    scores and probabilities 2*p*B*h*S*C; absorbed the absorbed queries p*B*S*h*r_kv, then the
    larger of 3 score tensors (two products and their sum) and scores + probabilities + AV's
    latent output (twice, head-major copy, when B > 1 and S > 1) + values p*B*S*h*d_v."""
    spec = tiny(n_kv_heads=None, attention=TINY_MLA)
    naive, absorbed = Run(mla="naive"), Run(mla="absorbed")
    # decode after 31 cached: S = 1, C = 32
    stream, queries = 2 * 2 * 2 * 1 * 8, 2 * 2 * 1 * 2 * (4 + 2 + 2)  # 64, 64
    assert _sites(spec, "decode", 2, 31, naive) == {
        "attention": stream + queries + 2 * 2 * 2 * 32 * (7 + 6 + 3) + 2 * 2 * 2 * 2 * 1 * 32,  # 4,736
        "ffn": stream + 3 * 2 * 2 * 1 * 12, "lm_head": stream + 2 * 2 * 1 * 10}
    one = 2 * 2 * 2 * 1 * 32  # a tensor of scores: 256
    latent = 2 * 2 * 1 * 2 * 4  # 32
    assert _sites(spec, "decode", 2, 31, absorbed)["attention"] == stream + queries + latent + max(
        3 * one, 2 * one + latent + 2 * 2 * 1 * 2 * 3) == 928
    # prefill of 16: S = C = 16
    stream, queries, one, latent = 1024, 1024, 2 * 2 * 2 * 16 * 16, 2 * 2 * 16 * 2 * 4
    values = 2 * 2 * 16 * 2 * 3
    assert _sites(spec, "prefill", 2, 16,
                  naive)["attention"] == stream + queries + 2 * 2 * 2 * 16 * 16 + 2 * one == 8192
    assert _sites(spec, "prefill", 2, 16,
                  absorbed)["attention"] == stream + queries + latent + 3 * one == 8704
    assert 2 * one + 2 * latent + values == 5504 < 3 * one  # W_UV's moment is the lesser here
    # flash keeps no scores: absorbed is then W_UV's moment alone, naive the expanded C terms
    flash = _sites(spec, "prefill", 2, 16, Run(mla="absorbed", flash=True))["attention"]
    assert flash == stream + queries + latent + 2 * latent + values == 3968
    assert _sites(spec, "prefill", 2, 16, Run(flash=True))["attention"] == 4096
    # the peak is the attention site; weights and the latent cache are the same in both
    for phase, seq, expected in (("decode", 31, (4736, 928)), ("prefill", 16, (8192, 8704))):
        a, b = (memory(spec, phase, 2, seq, run=r) for r in (naive, absorbed))
        assert (a.peak_activations, b.peak_activations) == expected
        assert a.total("weights") == b.total("weights")
        assert a.total("kv_cache") == b.total("kv_cache") == 2 * 2 * (seq + (phase == "decode")) * (4 + 2) * 2
        assert (a.mla, b.mla) == ("naive", "absorbed")


def test_training_runs_latent_attention_naive() -> None:
    """--mla absorbed changes no training figure: the activations are the naive pass's, said."""
    spec = tiny(n_kv_heads=None, attention=TINY_MLA)
    naive, absorbed = (memory(spec, "train", 2, 8, run=Run(mla=c)) for c in ("naive", "absorbed"))
    assert absorbed.items == naive.items and absorbed.mla == naive.mla == "naive"
    assert any("training runs the naive form" in n for n in absorbed.notes)
    assert memory(tiny(), "train", 2, 8).mla is None and "mla_convention" not in memory(tiny()).to_dict()
    with pytest.raises(MemoryConfigError, match="mla: unknown convention 'fused'"):
        memory(spec, "decode", run=Run(mla="fused"))


def test_memory_and_fit_take_mla() -> None:
    """`memory` and `fit` --mla: JSON says the convention per phase (train: naive); absorbed
    decode holds no per-head keys, so more sequences fit."""
    def json_of(*args: str) -> dict:
        r = runner.invoke(app, list(args))
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    naive = json_of("memory", "deepseek-v2-lite", "-p", "decode", "-b", "2", "-f", "json")
    absorbed = json_of("memory", "deepseek-v2-lite", "-p", "decode", "-b", "2", "--mla", "absorbed", "-f",
                       "json")
    assert (naive["mla_convention"], absorbed["mla_convention"]) == ("naive", "absorbed")
    assert absorbed["memory"]["activations"] < naive["memory"]["activations"]
    assert absorbed["memory"]["kv_cache"] == naive["memory"]["kv_cache"]
    fits = json_of("fit", "deepseek-v2-lite", "--hardware", "h100-sxm", "--mla", "absorbed", "-f",
                   "json")["phases"]
    assert {ph: v["mla_convention"] for ph, v in fits.items()} == {
        "train": "naive", "prefill": "absorbed", "decode": "absorbed"}
    plain = json_of("fit", "deepseek-v2-lite", "--hardware", "h100-sxm", "-p", "decode", "--mla", "naive",
                    "-f", "json")["phases"]
    assert fits["decode"]["max_batch"] > plain["decode"]["max_batch"]
    gpu = json_of("fit", "deepseek-v2-lite", "--hardware", "h100-sxm", "-p", "decode", "-f", "json")
    assert gpu["phases"]["decode"]["max_batch"] == fits["decode"]["max_batch"]  # absorbed: a GPU's default
    assert "mla_convention" not in json_of("fit", "gpt2-small", "--hardware", "l4", "-f",
                                           "json")["phases"]["decode"]


def test_analyze_fit_warning_follows_mla() -> None:
    """analyze --hardware warns on the peak of its own convention: DeepSeek-V2-Lite decode at
    B = 600 on an H100 needs more than 80 GB naive (the re-expanded keys), not absorbed."""
    args = ["analyze", "deepseek-v2-lite", "--hardware", "h100-sxm", "-p", "decode", "-b", "600", "-f",
            "json"]
    naive = runner.invoke(app, [*args, "--mla", "naive"])
    absorbed = runner.invoke(app, [*args, "--mla", "absorbed"])
    assert naive.exit_code == absorbed.exit_code == 0
    assert naive.stderr.startswith("warning: decode at B=600") and absorbed.stderr == ""
    assert runner.invoke(app, args).stderr == ""  # absorbed, a GPU's default


def test_fit_is_the_boundary() -> None:
    hw = load_hardware("h100-sxm")
    spec = catalog.load("llama-2-7b")
    n, m = fit(spec, "decode", hw.memory_bytes, "batch", seq=2047)
    assert m is not None and m.fits(hw.memory_bytes)
    assert not memory(spec, "decode", n + 1, 2047).fits(hw.memory_bytes)
    assert fit(catalog.load("llama-3-70b"), "train", hw.memory_bytes)[0] == 0


def test_unmodelled_split_is_refused() -> None:
    with pytest.raises(MemoryConfigError, match="tp/pp"):
        memory(tiny(), "train", parallel=Parallel(tp=2))


# --- CLI ----------------------------------------------------------------------------------------


def test_memory_json_keys_exact_ints() -> None:
    r = runner.invoke(app, ["memory", "llama-2-7b", "--hardware", "h100-sxm", "--format", "json"])
    assert r.exit_code == 1, r.output  # the JSON in full; it does not fit: exit 1, the reason on stderr
    mem = json.loads(r.stdout)["memory"]
    for key in ("weights", "gradients", "optimizer", "activations", "kv_cache", "peak"):
        assert isinstance(mem[key], int)
    assert mem["fits"] is False and mem["headroom"] < 0
    assert mem["peak"] == mem["weights"] + mem["gradients"] + mem["optimizer"] + mem["activations"]


@pytest.mark.parametrize("args, message", [
    (["--zero", "2"], "zero: stage 2 shards over data-parallel ranks; give --dp N"),
    (["--optimizer", "lion"], "optimizer: unknown optimizer 'lion'"),
    (["--dp", "0"], "dp: must be at least 1 (got 0)"),
    (["--recompute", "sometimes"], "recompute: unknown mode 'sometimes'"),
    (["-p", "decode", "--recompute", "full"], "--recompute: only for --phase train"),
])
def test_memory_bad_input(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["memory", "gpt2-small", *args])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: " + message) and r.stderr.count("\n") == 1


def test_analyze_warns_when_it_does_not_fit() -> None:
    r = runner.invoke(app, ["analyze", "llama-3-70b", "--hardware", "h100-sxm", "-p", "train"])
    assert r.exit_code == 0 and r.stderr.startswith("warning: AdamW bf16-mixed training")
    assert "more than h100-sxm's 80 GB" in r.stderr
    ok = runner.invoke(app, ["analyze", "gpt2-small", "--hardware", "h100-sxm", "-p", "decode"])
    assert ok.exit_code == 0 and ok.stderr == ""


def test_attention_warns_past_the_largest_batch() -> None:
    r = runner.invoke(app, ["attention", "llama-2-7b", "--batch", "64", "--format", "json"])
    assert r.exit_code == 0 and "warning: decode at B=64" in r.stderr
    json.loads(r.stdout)  # the warning stays off stdout
