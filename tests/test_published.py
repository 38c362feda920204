"""Every bundled spec names its sources, and its parameter count matches what was published."""

from __future__ import annotations

import pytest

from costmodel.analysis import count_params
from costmodel.catalog import bundled_paths
from costmodel.spec import load_spec

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
