"""elements: every design element swapped for each alternative, ranked by its effect."""

from __future__ import annotations

import json

import pytest

from costmodel import catalog
from costmodel.analysis import AnalysisError
from costmodel.studies.variants import equal_params_d_ff, gqa_kv_heads, rank_elements, swaps

LLAMA = catalog.load("llama-2-7b")


@pytest.mark.parametrize("d_ff, to_gated, expected", [
    (11008, False, 16512),  # 3/2 exactly
    (3072, True, 2048),     # 2/3 exactly
    (65536, True, 43691),   # 43690.67 -> nearest
    (3, False, 5),          # 4.5: halves up
    (1, True, 1),           # 0.67 -> 1
])
def test_equal_params_d_ff(d_ff, to_gated, expected):
    assert equal_params_d_ff(d_ff, to_gated) == expected


@pytest.mark.parametrize("heads, kv", [(32, 8), (48, 8), (12, 6), (25, 5), (71, None), (2, None)])
def test_gqa_kv_heads(heads, kv):
    """8 when it divides h (LLaMA 2 70B, LLaMA 3, Mistral), else the divisor nearest 8."""
    assert gqa_kv_heads(heads) == kv


def test_every_element_of_design_md_is_swapped():
    elements = {s.element for s in swaps(LLAMA)}
    assert elements == {"norm", "norm position", "activation", "attention heads", "sliding window",
                        "embeddings", "block layout", "biases", "positions", "QK-norm",
                        "logit soft-capping", "z-loss", "dropout", "head scale", "logit scale",
                        "chunked attention", "attention sinks", "segments and embedding norm"}


def test_attention_heads_matter_most_for_llama_2_7b():
    """MQA keeps 1 of 32 KV heads: the KV cache falls by 31/32 (-96.875%)."""
    r = rank_elements(LLAMA)
    # Since the MoE swap (dense -> 8 experts top-2 at equal active params, total params x ~4)
    # exists, it leads the overall ranking; on the KV cache the heads still lead.
    top = max(r.effects, key=lambda e: abs(e.relative("kv_cache")))
    assert top.swap.label == "MHA k=32 -> MQA k=1"
    assert top.relative("kv_cache") == -31 / 32
    assert "attention heads" in [name for name, *_ in r.elements()[:2]]


def test_swaps_by_hand():
    r = rank_elements(LLAMA)  # train 2048 tokens; decode after 2047 cached: C = 2048
    by_label = {e.swap.label: e for e in r.effects}
    window = by_label["full -> window 1024 on every layer"]
    assert window.relative("kv_cache") == -0.5  # min(C, w) / C = 1024 / 2048
    assert window.relative("params") == 0
    equal = by_label["swiglu -> gelu, d_ff 11008 -> 16512 (equal params)"]
    assert equal.relative("params") == 0  # 3 * d * 11008 == 2 * d * 16512, no biases
    same = by_label["swiglu -> gelu, same d_ff"]
    assert same.after["params"] - same.before["params"] == -32 * 4096 * 11008
    tied = by_label["untied -> tied"]
    assert tied.after["params"] - tied.before["params"] == -32000 * 4096


def test_invalid_swaps_are_skipped_with_their_reason():
    """A sliding window on an encoder-decoder is not allowed: a note, not a crash."""
    r = rank_elements(catalog.load("t5-11b"))
    skipped = {s.label: why for s, why in r.skipped}
    assert skipped and all("decoder-only" in why for why in skipped.values())
    assert all(e.swap.element != "sliding window" for e in r.effects)


def test_default_window_is_half_a_short_context():
    """GPT-2 runs at its 1024-token context: a 1024 window would change nothing, so 512."""
    labels = [e.swap.label for e in rank_elements(catalog.load("gpt2-small")).effects]
    assert "full -> window 512 on every layer" in labels


def test_ranking_by_one_quantity():
    r = rank_elements(LLAMA, by="params")
    effects = [abs(e.relative("params")) for e in r.effects]
    assert effects == sorted(effects, reverse=True)
    with pytest.raises(AnalysisError, match="by: unknown ranking"):
        rank_elements(LLAMA, by="speed")


def test_json_lists_swaps_elements_and_skips():
    data = json.loads(json.dumps(rank_elements(catalog.load("t5-11b")).to_dict()))
    assert data["swaps"][0]["element"] == "attention heads"
    assert {"element", "swap", "changes", "after", "change", "relative"} <= set(data["swaps"][0])
    assert data["skipped"][0]["reason"].startswith("window:")
    assert data["elements"][0]["element"] == "attention heads"
