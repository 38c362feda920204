"""Every bundled spec names its sources, and its parameter count matches what was published."""

from __future__ import annotations

import pytest

from costmodel import catalog
from costmodel.analysis import count_params
from costmodel.catalog import bundled_paths, load_spec

PATHS = bundled_paths()
IDS = [p.stem for p in PATHS]


def test_the_issue_list_is_bundled() -> None:
    wanted = {
        "transformer-base", "transformer-big", "gpt2-small", "gpt2-xl", "gpt3-125m", "gpt3-1.3b",
        "gpt3-175b", "gpt-j-6b", "llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
        "llama-3.1-405b", "mistral-7b", "gemma-2-9b", "t5-11b", "t5-v1.1-xxl", "palm-540b", "falcon-7b",
    }
    assert wanted <= set(IDS)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_spec_is_sourced_and_named_after_its_file(path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem
    assert spec.source, "every bundled spec names where its numbers come from"
    assert spec.published is not None and spec.published.source
    assert spec.year is not None and spec.family
    if spec.published.tolerance is not None:
        assert spec.published.note, "a tolerance wider than the rounding must say why"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_published_count_within_its_rounding(path) -> None:
    """'7B' allows 6.5B..7.5B, '6.74B' allows +-0.005B; a stated tolerance overrides, with a note."""
    spec = load_spec(path)
    ours = count_params(spec)
    pub = spec.published
    assert abs(ours - pub.value) <= pub.allowed_error, (
        f"{spec.name}: {ours:,} vs published {pub.params} (allowed +-{pub.allowed_error:,.0f})"
    )


@pytest.mark.parametrize("path", [p for p in PATHS if load_spec(p).published.exact], ids=lambda p: p.stem)
def test_exact_count_of_the_released_implementation(path) -> None:
    spec = load_spec(path)
    assert count_params(spec) == spec.published.exact


def test_llama_2_7b_is_exact() -> None:
    """The figure the issue names: 6,738,415,616, tensor for tensor."""
    assert count_params(load_spec([p for p in PATHS if p.stem == "llama-2-7b"][0])) == 6_738_415_616


def test_rounding_of_published_figures() -> None:
    from costmodel.spec import parse_count

    assert parse_count("7B") == (7e9, 0.5e9)
    assert parse_count("6.74B") == (6.74e9, pytest.approx(0.005e9))
    assert parse_count("175.0B") == (175e9, pytest.approx(0.05e9))
    assert parse_count("124M") == (124e6, 0.5e6)
    assert parse_count(124439808) == (124439808.0, 0.5)


# --- DeepSeek-V3, DeepSeek-V2-Lite, Kimi K2: the released config.json and what the papers count --

@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2-lite", "kimi-k2"])
def test_released_config_imports_as_the_bundled_spec(name: str) -> None:
    """The published config.json imports to the bundled spec's costs field for field, with no
    field left unread; its block-scaled fp8 quantization_config (DeepSeek-V3's and Kimi K2's) with
    one warning naming --weights-dtype fp8-block and nothing else changed; the balance loss is the
    spec's alone (transformers' DeepSeek classes add none)."""
    from costmodel import hf
    from costmodel.hf.export import cost_fields
    from tests.hf_configs import DEEPSEEK_RELEASED

    config = DEEPSEEK_RELEASED[name]
    imported = hf.spec_fields_from_hf(config, name)
    assert imported.ignored_fields == ()
    if "quantization_config" in config:
        assert len(imported.warnings) == 1 and "--weights-dtype fp8-block" in imported.warnings[0]
    else:
        assert imported.warnings == ()
    plain = {k: v for k, v in config.items() if k != "quantization_config"}
    ours, bundled = hf.spec_from_hf(config, name), load_spec(next(p for p in PATHS if p.stem == name))
    assert cost_fields(ours) == cost_fields(hf.spec_from_hf(plain, name))
    assert count_params(ours) == count_params(bundled) == bundled.published.exact
    theirs = cost_fields(bundled)
    theirs["ffn"] = {**theirs["ffn"], "aux_loss": 0.0}
    assert cost_fields(ours) == theirs


def test_deepseek_v3_counts_the_main_model_as_the_paper() -> None:
    """The paper's 671B is the main model (README_WEIGHTS.md: "Main Model Weights ... 671B";
    the checkpoint's 685B adds the multi-token-prediction module), which is what transformers
    builds and we count: 671,026,404,352. The MTP module's decoder layer is one more sparse
    layer, 11,507,286,016 by our count, the README's "11.5B unique parameters" (besides it the
    module holds eh_proj, d x 2d, and three RMSNorms of d)."""
    from costmodel.analysis import analyze

    spec = load_spec(next(p for p in PATHS if p.stem == "deepseek-v3"))
    assert count_params(spec) == 671_026_404_352
    moe = spec.moe
    assert moe is not None
    rows = analyze(spec, "decode").to_dict()["components"]
    sparse = sum(r["params"] for r in rows if r["path"].startswith("layers[moe]/"))
    layer = sparse // moe.sparse_count(spec.n_layers)
    d, E, f_e = 7168, 256, 2048
    attention = 187_107_328  # by hand in docs/latent.md (q_a, q_norm, q_b, kv_a, kv_norm, kv_b, out)
    by_hand = attention + 2 * d + d * E + E * 3 * d * f_e + 3 * d * f_e  # 2 norms, router, experts, shared
    assert layer * 58 == sparse and layer == by_hand == 11_507_286_016
    assert abs(layer - 11.5e9) <= 0.05e9
    assert layer + 2 * d * d + 3 * d == 11_610_067_968  # with eh_proj, enorm, hnorm, shared_head.norm


# --- the sparse specs of issue 11: both active conventions, by hand -----------------------------------

GPT_OSS_EXPERT = (2880 * 2 * 2880 + 2 * 2880) + (2880 * 2880
                                                 + 2880)  # gate_up_proj and down_proj, with biases
LLAMA4_EXPERT = 3 * 5120 * 8192  # gate, up, down; the shared expert has the same shape
# name: (total, the parameters of the experts a token skips, the input token table)
ACTIVE_BY_HAND = {
    "gpt-oss-20b": (20_914_757_184, 24 * 28 * GPT_OSS_EXPERT, 201_088 * 2880),
    "gpt-oss-120b": (116_829_156_672, 36 * 124 * GPT_OSS_EXPERT, 201_088 * 2880),
    "llama-4-scout": (107_769_861_120, 48 * 15 * LLAMA4_EXPERT, 202_048 * 5120),
    "llama-4-maverick": (400_711_848_960, 24 * 127 * LLAMA4_EXPERT, 202_048 * 5120),
}
# Both conventions, written out: (with the input embedding, without it).
ACTIVE = {
    "gpt-oss-20b": (4_187_440_704, 3_608_307_264),  # OpenAI publishes without: 3.61B
    "gpt-oss-120b": (5_711_982_912, 5_132_849_472),  # OpenAI publishes without: 5.13B
    "llama-4-scout": (17_172_894_720, 16_138_408_960),  # Meta publishes with: 17B
    "llama-4-maverick": (17_184_691_200, 16_150_205_440),  # Meta publishes with: 17B
}


def test_totals_of_the_sparse_specs_by_hand() -> None:
    """Per layer, from the released configs. Llama 4 Scout: attention 5120 * (5120 + 2 * 1024) +
    5120 * 5120, two norms, router 5120 * 16, 16 routed experts and one shared of 3 * 5120 * 8192,
    48 layers, two 202,048 x 5120 tables and the final norm. Maverick: 24 dense layers of
    3 * 5120 * 16384 and 24 sparse ones of 128 experts. gpt-oss-120b: q, k, v, o with biases and 64
    sinks, two norms, a biased router 2880 x 128, 128 biased experts, 36 layers."""
    att = 5120 * (5120 + 2 * 1024) + 5120 * 5120
    scout = 48 * (att + 2 * 5120 + 5120 * 16 + 17 * LLAMA4_EXPERT) + 2 * 202_048 * 5120 + 5120
    maverick = (24 * (att + 2 * 5120 + 3 * 5120 * 16384) + 24 * (att + 2 * 5120 + 5120 * 128 + 129
                                                                 * LLAMA4_EXPERT)
                + 2 * 202_048 * 5120 + 5120)
    oss_att = (2880 * 4096 + 4096) + 2 * (2880 * 512 + 512) + (4096 * 2880 + 2880) + 64
    oss = 36 * (oss_att + 2 * 2880 + 2880 * 128 + 128 + 128 * GPT_OSS_EXPERT) + 2 * 201_088 * 2880 + 2880
    oss20 = 24 * (oss_att + 2 * 2880 + 2880 * 32 + 32 + 32 * GPT_OSS_EXPERT) + 2 * 201_088 * 2880 + 2880
    assert (scout, maverick, oss, oss20) == tuple(ACTIVE_BY_HAND[n][0] for n in
                                                  ("llama-4-scout", "llama-4-maverick", "gpt-oss-120b",
                                                   "gpt-oss-20b"))
    for name, (total, _, _) in ACTIVE_BY_HAND.items():
        assert count_params(catalog.load(name)) == total == catalog.load(name).published.exact


@pytest.mark.parametrize("name", ACTIVE)
def test_active_params_in_both_conventions(name: str) -> None:
    """Active = total less the experts a token skips (with the embedding: Meta's Llama 4 convention),
    and less the input token table too (OpenAI's gpt-oss convention, keeping the unembedding).
    The published figure matches the publisher's convention within its rounding, and not the other."""
    from costmodel.analysis import analyze
    from costmodel.spec import ActiveConvention, parse_count

    total, skipped, table = ACTIVE_BY_HAND[name]
    assert ACTIVE[name] == (total - skipped, total - skipped - table)
    spec = catalog.load(name)
    a = analyze(spec, "decode", 1, 16)
    ours = tuple(a.params_active(c) for c in (ActiveConvention.with_embedding,
                                              ActiveConvention.without_embedding))
    assert ours == ACTIVE[name]
    pub = spec.published
    value, half_unit = parse_count(pub.active)
    theirs = ACTIVE[name][0 if pub.active_convention is ActiveConvention.with_embedding else 1]
    other = ACTIVE[name][1 if pub.active_convention is ActiveConvention.with_embedding else 0]
    assert abs(theirs - value) <= half_unit < abs(other - value)
    assert a.params_active() == theirs


def test_gpt_oss_table_1_breakdown() -> None:
    """The model card's Table 1 splits the totals: MLP 114.71B / 19.12B (router and experts),
    attention 0.96B / 0.64B (q, k, v, o with their biases, and the sinks), embed + unembed 1.16B
    for both; each within half a unit of its last digit (the norms, 0.2M, are in none)."""
    from costmodel.analysis import analyze

    for name, mlp, attention in (("gpt-oss-120b", 114.71e9, 0.96e9), ("gpt-oss-20b", 19.12e9, 0.64e9)):
        rows = analyze(catalog.load(name), "prefill", 1, 16).rows
        ffn = sum(r.params for r in rows if "/ffn/" in r.path and not r.path.endswith("/norm"))
        att = sum(r.params for r in rows if "/attention/" in r.path and not r.path.endswith("/norm"))
        tables = sum(r.params for r in rows if r.path in ("embedding/tokens", "lm_head"))
        assert abs(ffn - mlp) <= 0.005e9 and abs(att - attention) <= 0.005e9 and abs(tables
                                                                                     - 1.16e9) <= 0.005e9
