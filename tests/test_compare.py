"""compare: models side by side, oldest first; invariant and varying choices; rules of thumb;
costs at one common shape; pages that fit a terminal."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from unittest import mock

import pytest
from rich.console import Console

from costmodel import catalog
from costmodel.analysis import count_params
from costmodel.report import compare as compare_report
from costmodel.report import tables as report
from costmodel.spec import SpecError
from costmodel.studies.compare import compare, expand
from costmodel.studies.conventions import compare_conventions
from costmodel.studies.variants import ablate, rank_elements, variant


def choice(c, label):
    return next(ch for ch in c.choices if ch.label == label)


def cost(c, key, name):
    row = next(r for r in c.costs if r.key == key)
    return row.values[c.names.index(name)]


def test_a_folder_expands_to_its_specs_ordered_by_year_then_size():
    c = compare(expand([str(catalog.specs_dir())]))
    assert len(c.specs) == len(catalog.bundled_paths())  # every bundled spec, whatever their number
    years = [s.year for s in c.specs]
    assert years == sorted(years)
    assert c.names[:2] == ["transformer-base", "transformer-big"]
    latest = [sp for sp in c.specs if sp.year == years[-1]]
    assert c.names[-1] == max(latest, key=count_params).name  # the largest of the latest year
    gpt3 = [n for n in c.names if n.startswith("gpt3")]
    assert gpt3 == ["gpt3-125m", "gpt3-1.3b", "gpt3-175b"]


def test_an_empty_folder_or_missing_spec_is_one_clear_error(tmp_path):
    with pytest.raises(SpecError, match="no \\*.yaml specs"):
        expand([str(tmp_path)])
    with pytest.raises(SpecError, match="no-such-model"):
        expand(["no-such-model"])


def test_invariant_and_varying_choices():
    """LLaMA 2 7B and 70B share norm, activation, positions; 70B adds GQA (64 heads, 8 KV)."""
    c = compare(expand(["llama-2-7b", "llama-2-70b"]))
    for label in ("norm", "norm position", "activation", "position", "bias", "block"):
        assert choice(c, label).invariant, label
    attention = choice(c, "attention")
    assert not attention.invariant and attention.values == ("MHA", "GQA 8:1")
    assert "norm" in c.to_dict()["invariant"] and "attention" in c.to_dict()["varying"]


def test_rules_of_thumb_flag_the_outliers():
    """T5 11B f/d = 65536/1024 = 64; PaLM gated with f/d = 4 (1.5x the 8/3 rule); LLaMA 2 7B
    11008/4096 = 2.6875 within 25% of 8/3; GPT-2 XL d/L = 1600/48 = 33.3 < 64; Gemma 2
    h*d_h = 16*256 = 4096 != 3584."""
    c = compare(expand(["t5-11b", "palm-540b", "llama-2-7b", "gpt2-xl", "gemma-2-9b"]))
    flags = dict(zip(c.names, choice(c, "d_ff/d_model").flags, strict=True))
    assert flags == {"gpt2-xl": False, "t5-11b": True, "palm-540b": True, "llama-2-7b": False,
                     "gemma-2-9b": True}
    ratios = dict(zip(c.names, choice(c, "d_ff/d_model").values, strict=True))
    assert ratios["t5-11b"] == 64 and ratios["llama-2-7b"] == Fraction(11008, 4096)
    ratio = choice(c, "d_model/n_layers")
    aspect = dict(zip(c.names, zip(ratio.values, ratio.flags, strict=True), strict=True))
    assert aspect["gpt2-xl"] == (Fraction(1600, 48), True)
    assert aspect["llama-2-7b"] == (128, False)
    width = dict(zip(c.names, choice(c, "h*d_h/d_model").flags, strict=True))
    assert width["gemma-2-9b"] and not width["llama-2-7b"]


@pytest.mark.parametrize("vocab, flagged",
                         [(32_000, False), (26_999, True), (262_208, False), (300_000, True)])
def test_vocabulary_rule(vocab, flagged):
    """30k-50k monolingual to 100k-250k multilingual, with 10% slack: 27,000 to 275,000."""
    spec = variant(catalog.load("llama-2-7b"), {"vocab_size": vocab})
    assert choice(compare([spec]), "vocab V").flags == (flagged,)


def test_costs_at_a_common_shape():
    """KV cache per cached token by hand, 2 * L * k * d_h * 2 bytes: LLaMA 2 7B 2*32*32*128*2;
    Falcon 7B (MQA) 2*32*1*64*2; the shape is the longest every model allows (GPT-2: 1024)."""
    c = compare(expand(["llama-2-7b", "falcon-7b", "gpt2-small"]))
    assert c.seq == {"train": 1024, "prefill": 1024, "decode": 1023}
    assert cost(c, "kv_cache_per_token", "llama-2-7b") == 2 * 32 * 32 * 128 * 2
    assert cost(c, "kv_cache_per_token", "falcon-7b") == 2 * 32 * 1 * 64 * 2
    assert cost(c, "params", "llama-2-7b") == 6_738_415_616


def test_sliding_window_caps_the_kv_cache_per_token():
    """Mistral 7B keeps min(C, 4096) tokens: at an 8192-token context, half of them per token."""
    c = compare(expand(["mistral-7b"]), seq=8191)
    assert cost(c, "kv_cache_per_token", "mistral-7b") == 2 * 32 * 8 * 128 * 2 * Fraction(4096, 8192)


def test_a_model_that_cannot_run_the_shape_gets_no_costs_and_a_note():
    c = compare(expand(["gpt2-small", "llama-2-7b"]), seq=2048)
    assert cost(c, "params", "gpt2-small") is None
    assert cost(c, "params", "llama-2-7b") == 6_738_415_616
    assert any("gpt2-small" in n and "learned positions" in n for n in c.notes)


def test_conventions_across_models_and_json():
    c = compare(expand(["gpt3-175b", "t5-11b"]), conventions=("megatron", "palm"))
    assert set(c.conventions) == {"megatron", "megatron-recompute", "palm"}
    t5 = c.conventions["palm"][c.names.index("t5-11b")]
    assert t5.count.train is None
    data = json.loads(json.dumps(c.to_dict()))
    assert data["models"] == c.names
    assert data["conventions"]["megatron"][c.names.index("gpt3-175b")]["train_relative"] < 0.001


def render_at(tables, width):
    """What ``report.render_rich`` prints on a terminal `width` columns wide."""
    buf = io.StringIO()
    with mock.patch("rich.console.Console", lambda width=None, _w=width: Console(file=buf, width=_w)):
        report.render_rich(tables)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 120, 160])
def test_pages_fit_the_terminal_and_show_every_model_once(width):
    c = compare(expand([str(catalog.specs_dir())]), conventions=("kaplan",))
    for table in compare_report.comparison_tables(c):
        pages = compare_report.pages(table, width)
        models = [col for p in pages for col in p.columns[2:]]
        assert models == c.names
        assert all(p.columns[:2] == table.columns[:2] for p in pages)
        out = render_at(pages, width)
        assert "…" not in out  # nothing cropped
        assert max(len(line) for line in out.splitlines()) <= width


@pytest.mark.parametrize("tables", [
    lambda: compare_report.ablation_tables(ablate(catalog.load("llama-2-7b"), {"n_kv_heads": 8})),
    lambda: compare_report.elements_tables(rank_elements(catalog.load("gemma-3-27b"))),
    lambda: [compare_report.conventions_table(compare_conventions(catalog.load("llama-3-8b")), 2048)],
], ids=["ablate", "elements", "conventions"])
def test_ablate_elements_and_conventions_fit_80_columns(tables):
    out = render_at(tables(), 80)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_markdown_is_one_valid_table_per_section():
    c = compare(expand(["llama-2-7b", "mistral-7b"]))
    md = report.render_markdown(compare_report.comparison_tables(c))
    lines = [line for line in md.splitlines() if line.startswith("|")]
    widths = {line.count("|") - line.count("\\|") for line in lines}
    assert widths == {5}  # choice, across, two models: 4 cells, 5 pipes on every row
