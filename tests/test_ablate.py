"""ablate: a spec before and after some --set changes; variants are re-validated specs."""

from __future__ import annotations

import json

import pytest

from costmodel import catalog
from costmodel.spec import Norm, SpecError
from costmodel.studies.variants import ablate, parse_sets, variant

LLAMA = catalog.load("llama-2-7b")  # d 4096, L 32, h = k = 32, d_h 128, f 11008, no biases


def delta(a, phase, quantity):
    return next(d for d in a.deltas if d.phase == phase and d.quantity == quantity)


def test_set_values_follow_yaml_scalar_rules():
    assert parse_sets(["n_kv_heads=1", "z_loss=0.0001", "tied_embeddings=true", "window=null",
                       "layer_pattern=[local, global]", "norm=layernorm", "head_dim="]) == {
        "n_kv_heads": 1, "z_loss": 0.0001, "tied_embeddings": True, "window": None,
        "layer_pattern": ["local", "global"], "norm": "layernorm", "head_dim": None}


@pytest.mark.parametrize("item, message", [
    ("norm", "expected FIELD=VALUE"),
    ("=1", "expected FIELD=VALUE"),
    ("n_heads=[1", "malformed value"),
])
def test_malformed_set_is_one_line(item, message):
    with pytest.raises(SpecError, match=message) as err:
        parse_sets([item])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("changes, message", [
    ({"nrom": "layernorm"}, "nrom: unknown field (did you mean norm?)"),
    ({"norm": "batchnorm"}, "norm: unknown value 'batchnorm'"),
    ({"n_kv_heads": 5}, "n_kv_heads: n_heads (32) must be a multiple of n_kv_heads (5)"),
    ({"norm.x": 1}, "norm.x: norm is not a mapping"),
])
def test_an_invalid_variant_is_one_line_naming_the_change(changes, message):
    with pytest.raises(SpecError) as err:
        variant(LLAMA, changes)
    assert str(err.value).startswith("llama-2-7b with ")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_change_changes_only_its_field_and_null_rederives():
    """n_heads=64 keeps head_dim 128 (h*d_h = 8192); with head_dim=null it is d/h = 64 again."""
    v = variant(LLAMA, {"n_heads": 64, "n_kv_heads": 64})
    assert (v.n_heads, v.head_dim) == (64, 128)
    v = variant(LLAMA, {"n_heads": 64, "head_dim": None})
    assert (v.n_heads, v.head_dim, v.n_kv_heads) == (64, 64, 32)
    assert v.published is None and v.name != LLAMA.name


def test_a_variant_of_a_parallel_block_can_drop_its_shared_norm():
    palm = catalog.load("palm-540b")  # sets shared_norm, which a serial block refuses
    with pytest.raises(SpecError, match="shared_norm: only for block: parallel"):
        variant(palm, {"block": "serial"})
    assert variant(palm, {"block": "serial", "shared_norm": None}).block.value == "serial"


def test_gqa_ablation_by_hand():
    """k 32 -> 8 removes 2 * L * d * (32 - 8) * d_h weights and 3/4 of the KV cache."""
    a = ablate(LLAMA, {"n_kv_heads": 8})
    assert delta(a, "all", "params").change == -2 * 32 * 4096 * 24 * 128
    kv = delta(a, "decode", "kv_cache")
    assert kv.before == 2 * 32 * 32 * 128 * 2 * 2048  # 2047 cached + the new token, bf16
    assert kv.relative == -0.75
    assert a.fields == (("n_kv_heads", 32, 8),)


def test_layernorm_ablation_adds_one_bias_per_norm():
    """65 norms (2 per layer + final), each gaining a d-wide bias; FLOPs per element 3+1 -> 5+1+1."""
    a = ablate(LLAMA, {"norm": "layernorm"})
    assert delta(a, "all", "params").change == 65 * 4096
    assert [f[0] for f in a.fields] == ["norm"]
    assert a.after.norm is Norm.layernorm


def test_dotted_field_reaches_into_bias():
    """bias.qkv adds out_features per projection: q h*d_h, k and v k*d_h each, in 32 layers."""
    a = ablate(LLAMA, {"bias.qkv": True})
    assert delta(a, "all", "params").change == 32 * 3 * 4096
    assert a.fields == (("bias.qkv", False, True),)


def test_every_phase_is_reported_and_json_carries_it():
    a = ablate(LLAMA, {"n_kv_heads": 1}, batch=2, seq=512)
    assert {d.phase for d in a.deltas} == {"all", "train", "prefill", "decode"}
    assert not any(d.phase == "train" and d.quantity == "kv_cache" for d in a.deltas)
    data = json.loads(json.dumps(a.to_dict()))
    assert data["seq"] == {"train": 512, "prefill": 512, "decode": 512}
    assert data["batch"] == 2
    assert data["fields"] == [{"field": "n_kv_heads", "before": "32", "after": "1"}]
