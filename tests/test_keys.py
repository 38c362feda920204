"""Component keys (issue 22): every component of the tree carries a structured ``Key`` whose
rendering is its path, and the package selects components by key. The old path-parsing rules
are kept here, as oracles only: each key-based selection picks exactly the rows they picked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel import catalog, model
from costmodel.analysis import analyze, phases_of, sum_rows
from costmodel.components.key import ATTENTION_CORE, TOKEN_TABLE, Key, Role
from costmodel.parallel import step
from costmodel.runtime import timing
from costmodel.runtime.memory import Run, activations
from costmodel.runtime.serving import HEAD
from costmodel.spec import Spec, spec_from_dict
from tests.helpers import is_layer, random_spec_data

BUNDLED = catalog.bundled_names()


# --- the old rules, read off the paths (what the package did before keys) -----------------------


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _in_attention(path: str) -> bool:
    return any(part in ("attention", "cross_attention") for part in path.split("/")[:-1])


def _group(path: str) -> str | None:
    top = path.split("/", 1)[0]
    return top[len("layers["):-1] if top.startswith("layers[") else None


def _stage(path: str) -> str:
    top = path.split("/", 1)[0]
    return "layers" if top.startswith("layers") else "first" if top == "embedding" else "last"


def _category(path: str) -> str:
    leaf, stage = _leaf(path), _stage(path)
    if stage == "first":
        return "embedding"
    if stage == "last":
        # the head's own ops (a decoder's scale and caps, an encoder's pooler or task head) and
        # the loss; the stack's own final norm (and DeBERTa's table) "final norm"
        head = leaf in ("lm_head", "head_scale", "logit_scale", "logit_softcap", "cross_entropy", "z_loss") \
            or path.startswith(("loss", "pooler/", "mlm/", "classifier"))
        return "lm_head + loss" if head else "final norm"
    if leaf in ("norm", "post_norm", "residual", "dropout"):
        return "norms, residuals, dropout"
    if "/ffn/" in path:
        return "ffn"
    if leaf in ATTENTION_CORE or leaf in ("rope", "qk_norm", "sinks"):
        return "attention core"
    return "attention projections"


def _layer_count(groups: dict, path: str) -> int:
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        name, _, kind = part.partition("[")
        if name == "layers":
            stack = parts[i - 1] if i > 0 else "layers"
            return groups.get((stack, kind.rstrip("]") or None), 1)
    return 1


def check_keys(spec: Spec, **shape: Any) -> None:
    """Every row of every phase: its key renders its path, and each key-based rule selects what
    the path-based rule did."""
    groups = model.layer_groups(spec)
    for phase in phases_of(spec):  # an encoder-only spec: no decode
        a = analyze(spec, phase, **shape)
        keys = [r.key for r in a.rows]
        assert len(set(keys)) == len(keys) == len({k.path for k in keys})
        # A sub-block has one parent path; in the layers, siblings share it exactly when their
        # paths share a parent (outside them, the head and the final norm both sit at the top).
        parents = {(k.sub_block, r.path.rpartition("/")[0]) for k, r in zip(keys, a.rows, strict=True)}
        assert len(parents) == len({p for p, _ in parents})
        inside = {(p, q) for p, q in parents if p[1]}
        assert len(inside) == len({q for _, q in inside})
        for r in a.rows:
            k, path, leaf = r.key, r.path, _leaf(r.path)
            assert isinstance(k, Key) and k.path == str(k) == path and k.leaf == leaf
            assert k.role is not Role.total
            assert k.layer == is_layer(path)
            assert k.attention_core == (leaf in ATTENTION_CORE and _in_attention(path)), path
            assert k.in_attention == _in_attention(path)
            assert k.routed_expert == ("/ffn/experts/" in path)
            # an encoder-only model's heads (components.heads) are no LM head: no path rule before keys
            encoder_head = spec.is_encoder and path.startswith(("pooler/", "mlm/", "classifier"))
            assert (k.role is Role.head) == (path in HEAD or encoder_head)
            assert (k.role is Role.router) == (leaf in ("router", "routing", "aux_loss"))
            unfusible = leaf in ("tokens", "positions", "token_types", "kv_cache", "cross_entropy", "z_loss")
            assert (k.role in timing.UNFUSIBLE) == unfusible
            assert (k == TOKEN_TABLE) == (path == "embedding/tokens")
            assert timing.layer_count(groups, k) == _layer_count(groups, path)
            if not spec.is_encoder_decoder:  # an encoder-decoder's step: not checked
                assert step._stage(k) == _stage(path)
                assert step.category(k) == _category(path), path
                if k.layer:
                    assert k.group == _group(path)


@pytest.mark.parametrize("name", BUNDLED)
def test_every_row_of_every_bundled_spec_has_a_key_that_renders_its_path(name: str) -> None:
    check_keys(catalog.load(name), seq=64)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.composite(lambda draw: random_spec_data(draw))())
def test_random_specs_keys_render_their_paths_and_select_as_the_paths_did(data: dict) -> None:
    check_keys(spec_from_dict(data, "hypothesis"), seq=5, batch=2)


def test_a_key_renders_each_kind_of_path() -> None:
    core = Role.attention_core
    expert = Key("up", Role.projection, "layers", True, "moe", "ffn", "experts")
    softmax = Key("softmax", core, "layers", True, "local", "attention")
    assert softmax.path == "layers[local]/attention/softmax"
    cross = Key("k", Role.projection, "decoder", True, None, "cross_attention")
    assert cross.path == "decoder/layers/cross_attention/k"
    assert expert.path == "layers[moe]/ffn/experts/up"
    assert Key("norm", Role.norm, "layers", True).path == "layers/norm"
    assert Key("final_norm", Role.norm, "encoder").path == "encoder/final_norm"
    assert Key("position_bias", Role.position, "layers").path == "position_bias"
    assert TOKEN_TABLE.path == "embedding/tokens" and Key("lm_head", Role.head).path == "lm_head"
    assert expert.block_path == "layers[moe]/ffn"
    assert Key("norm", Role.norm, "layers", True).block_path == "layers/norm"


@pytest.mark.parametrize("name", ["llama-2-7b", "deepseek-v2-lite", "gemma-2-9b", "t5-11b", "gpt-oss-20b",
                                  "llama-4-scout", "mixtral-8x7b"])
def test_the_attention_core_is_the_same_leaves_in_every_attention(name: str) -> None:
    """MHA/GQA, MLA, local/global, sinks, chunked and an encoder-decoder's self- and cross-
    attention: one definition, the leaves from the scores to AV, inside each attention sub-block."""
    a = analyze(catalog.load(name), "train", seq=64)
    by_block: dict[tuple, set[str]] = {}
    for r in a.rows:
        if r.key.in_attention:
            by_block.setdefault(r.key.sub_block, set())
        if r.key.attention_core:
            assert r.key.in_attention and r.key.layer, r.path
            by_block[r.key.sub_block].add(r.key.leaf)
    assert by_block
    for core in by_block.values():
        assert {"scores", "scale", "softmax", "av"} <= core <= ATTENTION_CORE
    # What one flash kernel folds and what selective recompute recomputes are that core.
    flash = timing.Kernels(flash_attention=True)
    assert {r.path for r in a.rows if flash.folds(r.key)} == {r.path for r in a.rows if r.key.attention_core}


def test_the_phantom_attention_dropout_leaf_is_gone() -> None:
    assert not hasattr(timing, "FLASH_LEAVES") and not hasattr(step, "ATTENTION_CORE")
    assert "attention_dropout" not in ATTENTION_CORE
    spec = catalog.load("gpt2-small")  # dropout on the attention probabilities
    assert spec.attention_dropout_rate > 0
    paths = [r.path for r in analyze(spec, "train", seq=64).rows]
    assert "layers/attention/dropout" in paths and not any(p.endswith("attention_dropout") for p in paths)


def test_memory_keys_render_the_paths_it_reports() -> None:
    """The tensors memory adds to the tree's (the causal mask, RoPE's tables, full recompute's
    layer inputs, flash attention's output) have keys too, and the shared ones say so."""
    for name in ("llama-2-7b", "t5-11b", "gemma-2-9b"):
        spec = catalog.load(name)
        a = analyze(spec, "train", seq=64)
        costs = model.tree(spec, model.numeric_dims(spec, dict(a.shape), 2))
        for run in (Run(), Run(recompute="full"), Run(flash=True), Run(recompute="selective")):
            acts = activations(spec, costs, dict(a.shape), 2, run)
            assert len({k.path for k in acts}) == len(acts)
            shared = {k.leaf for k in acts if k.role is Role.shared}
            assert shared <= {"causal_mask", "rope_tables", "position_bias", "encoder_output"}
            assert all(k.layer for k in acts if k.role in (Role.shared, Role.checkpoint))


def test_a_sum_is_keyed_by_its_name() -> None:
    a = analyze(catalog.load("llama-2-7b"), "decode", seq=16)
    total = sum_rows(a.rows, "layers/attention")
    assert total.key == Key.total("layers/attention") and total.key.path == "layers/attention"
    assert "key" not in a.rows[0].numbers() and a.to_dict()["components"][0] == a.rows[0].numbers()
