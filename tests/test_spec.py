"""Validation at the edge: every bad input is one line naming the field, and exit code 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from costmodel.cli import app
from costmodel.spec import SpecError, parse_spec, spec_from_dict

GOOD = """\
name: ok
d_model: 64
n_layers: 2
n_heads: 4
d_ff: 256
vocab_size: 100
max_seq_len: 128
norm: rmsnorm
activation: swiglu
position: rope
"""


def with_line(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


BAD = {
    "malformed YAML": ("name: [unclosed\n", r"malformed YAML"),
    "not a mapping": ("- a\n- b\n", r"a spec is a YAML mapping"),
    "missing field": (with_line("d_ff: 256\n", ""), r"d_ff: field required"),
    "negative width": (with_line("d_model: 64", "d_model: -5"),
                       r":2: d_model: input should be greater than 0 \(got -5\)"),
    "zero heads": (with_line("n_heads: 4", "n_heads: 0"), r"n_heads: input should be greater than 0"),
    "wrong type": (with_line("d_model: 64", "d_model: wide"), r"d_model: input should be a valid integer"),
    "float width": (with_line("d_ff: 256", "d_ff: 256.5"), r"d_ff: input should be a valid integer"),
    "heads not divisible by kv heads": (GOOD + "n_kv_heads: 3\n",
                                        r"n_kv_heads: n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
    "more kv heads than heads": (GOOD + "n_kv_heads: 8\n", r"n_kv_heads: n_heads \(4\) must be a multiple"),
    "unknown activation": (with_line("activation: swiglu", "activation: swish"),
                           r"activation: unknown value 'swish'; expected one of relu, gelu, reglu, geglu, "
                           r"swiglu"),
    "unknown norm": (with_line("norm: rmsnorm", "norm: batchnorm"), r"norm: unknown value 'batchnorm'"),
    "unknown field": (GOOD + "n_head: 4\n", r"n_head: unknown field \(did you mean n_heads\?\)"),
    "head_dim needed": (with_line("d_model: 64", "d_model: 66"),
                        r"head_dim: required, since d_model \(66\) is not divisible by n_heads \(4\)"),
    "odd rotary dims": (GOOD + "rotary_fraction: 0.3\n",
                        r"rotary_fraction: .*RoPE rotates an even whole number"),
    "rotary without rope": (with_line("position: rope", "position: learned") + "rotary_fraction: 0.5\n",
                            r"rotary_fraction: only for position: rope"),
    "local layers without window": (GOOD + "layer_pattern: [local, global]\n",
                                    r"window: required, since layer_pattern has local layers"),
    "window with no local layer": (GOOD + "window: 16\nlayer_pattern: [global]\n",
                                   r"layer_pattern: a window is given but no layer is local"),
    "pattern as a string": (GOOD + "window: 16\nlayer_pattern: local\n", r"layer_pattern: should be a list"),
    "nope without global": (GOOD + "window: 16\nglobal_nope: true\n",
                            r"global_nope: layer_pattern has no global layer"),
    "nope on added positions": (with_line("position: rope",
                                          "position: learned")
                                + "window: 16\nlayer_pattern: [local, global]\nglobal_nope: true\n",
                                r"global_nope: position learned is added to the input"),
    "rmsnorm with bias": (GOOD + "bias: {norm: true}\n", r"bias.norm: RMSNorm has no bias"),
    "unknown bias part": (GOOD + "bias: {mlp: true}\n", r"bias.mlp: unknown field"),
    "encoder-decoder without stacks": (GOOD + "architecture: encoder-decoder\n",
                                       r"n_layers: an encoder-decoder gives n_encoder_layers and "
                                       r"n_decoder_layers"),
    "decoder with encoder layers": (GOOD + "n_encoder_layers: 2\n",
                                    r"n_encoder_layers: only for architecture: encoder-decoder"),
    "negative dropout": (GOOD + "dropout: -0.1\n", r"dropout: input should be greater than or equal to 0"),
    "zero softcap": (GOOD + "attn_softcap: 0\n", r"attn_softcap: input should be greater than 0"),
    "shared_norm on a serial block": (GOOD + "shared_norm: false\n",
                                      r"shared_norm: only for block: parallel"),
    "bad published count": (GOOD + "published: {params: about 7 billion, source: x}\n",
                            r"published.params: .*should look like 6.74B"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_spec_is_one_line_naming_the_field(case: str) -> None:
    """parse_spec raises SpecError whose one-line message names the origin and the field (a
    derived field missing because its source is bad is not a second problem)."""
    text, pattern = BAD[case]
    with pytest.raises(SpecError, match=pattern) as info:
        parse_spec(text, "x.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("x.yaml")


@pytest.mark.parametrize("case", ["malformed YAML", "negative width", "heads not divisible by kv heads",
                                  "unknown activation", "missing field"])
def test_cli_bad_spec_exit_code_2_without_traceback(case: str, tmp_path) -> None:
    """The CLI prints `error: <one line>` on stderr and exits 2."""
    path = tmp_path / "bad.yaml"
    path.write_text(BAD[case][0])
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]


def test_missing_file_and_unknown_name(tmp_path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "no such file" in result.stderr
    result = runner.invoke(app, ["analyze", "llama-9000"])
    assert result.exit_code == 2 and "nor a bundled spec" in result.stderr


def test_defaults_written_once() -> None:
    """Fields left out take the documented defaults: MHA, d/h head dim, pre-norm, serial, untied."""
    spec = parse_spec(GOOD)
    assert spec.n_kv_heads == 4 and spec.head_dim == 16
    assert spec.norm_position.value == "pre" and spec.block.value == "serial"
    assert not spec.tied_embeddings and spec.window is None
    assert [k.value for k in spec.layer_kinds()] == ["global", "global"]
    assert not spec.norm_bias and not spec.bias.qkv


def test_bias_shorthand_leaves_norms_alone() -> None:
    """`bias: true` sets every linear layer; a LayerNorm keeps its own bias default."""
    spec = parse_spec(GOOD.replace("norm: rmsnorm", "norm: layernorm") + "bias: true\n")
    assert spec.bias.qkv and spec.bias.attn_out and spec.bias.ffn and spec.bias.lm_head
    assert spec.norm_bias
    spec = parse_spec(GOOD.replace("norm: rmsnorm", "norm: layernorm") + "bias: {norm: false}\n")
    assert not spec.norm_bias and not spec.bias.qkv


def test_layer_pattern_repeats_and_is_cut_at_the_last_layer() -> None:
    """Gemma 3's 5:1 pattern over 8 layers: globals at indices 5 only; 7 local."""
    spec = parse_spec(GOOD.replace("n_layers: 2", "n_layers: 8")
                      + "window: 16\nlayer_pattern: [local, local, local, local, local, global]\n")
    kinds = [k.value for k in spec.layer_kinds()]
    assert kinds == ["local"] * 5 + ["global"] + ["local"] * 2
    assert {k.value: n for k, n in spec.kind_counts().items()} == {"local": 7, "global": 1}


# --- the FFN and attention unions (notes/SCHEMA.md) -------------------------------------------


def test_shorthand_is_the_dense_ffn_and_mha_attention():
    from tests.helpers import TINY

    flat = spec_from_dict(dict(TINY))
    data = {k: v for k, v in TINY.items() if k not in ("activation", "d_ff", "n_kv_heads")}
    nested = spec_from_dict({**data, "ffn": {"kind": "dense", "activation": "swiglu", "d_ff": 12},
                             "attention": {"kind": "mha", "n_kv_heads": 1}})
    assert flat == nested
    assert (flat.d_ff, flat.activation.value, flat.n_kv_heads, flat.head_dim) == (12, "swiglu", 1, 4)
    assert flat.ffn.kind == "dense" and flat.attention.kind == "mha"


@pytest.mark.parametrize("changes, message", [
    ({"attention": {"kind": "gqa"}, "n_kv_heads": None},
     "attention.kind: unknown kind 'gqa'; expected one of mha, mla"),
    ({"attention": {"kind": "mla"}, "n_kv_heads": None}, "attention.kv_lora_rank: field required"),
    ({"ffn": {"kind": "sparse"}, "d_ff": None, "activation": None},
     "ffn.kind: unknown kind 'sparse'; expected one of dense, moe"),
    ({"ffn": {"kind": "moe", "activation": "swiglu", "n_experts": 4, "top_k": 5, "d_ff_expert": 8},
      "d_ff": None, "activation": None}, "ffn.top_k: 5 experts per token, but only 4"),
    ({"ffn": {"kind": "moe", "activation": "swiglu", "n_experts": 4, "top_k": 2, "d_ff_expert": 8,
              "first_k_dense": 1}, "d_ff": None, "activation": None},
     "ffn.d_ff: required, since 1 layers are dense"),
    ({"ffn": {"kind": "dense", "activation": "relu", "d_ff": 4}},
     "give ffn or its shorthand fields, not both"),
    ({"d_ff": 0}, "d_ff: input should be greater than 0"),
    ({"ffn": {"kind": "dense", "activation": "relu", "d_ff": 0}, "d_ff": None, "activation": None},
     "ffn.d_ff: input should be greater than 0"),
])
def test_union_errors_name_the_field(changes, message):
    from tests.helpers import TINY

    data = {k: v for k, v in {**TINY, **changes}.items() if v is not None}
    with pytest.raises(SpecError, match=message):
        spec_from_dict(data)
