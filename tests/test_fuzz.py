"""Fuzzing the public CLI (issue 10): mutated bundled specs and Hugging Face configs.

Every run ends in exit 0 with valid JSON (no Infinity, no NaN), or exit 2 with only `error:`
(and `warning:`) lines; never a traceback (an escaping exception fails the test), and each run
stays within a time bound. Bounded to a few dozen examples each, so it adds seconds to CI.
"""

from __future__ import annotations

import json
import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.spec import Spec
from tests.hf_configs import CONFIGS

# Seconds each (full models, transformers, hypothesis): out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow


runner = CliRunner()
LINE = re.compile(r"^(error|warning): \S.*$")
BUNDLED = catalog.bundled_paths()
FIELDS = sorted(Spec.model_fields) + ["d_ff ", "dff", "nrom", "bias.qkv", "layers"]
HF_CONFIGS = [(t, c) for t, cs in CONFIGS.items() for c in cs if c]
HF_FIELDS = sorted({k for _, c in HF_CONFIGS for k in c}) + ["model_type", "num_experts", "layer_types",
                                                            "rope_scaling", "architectures"]

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 70000), st.sampled_from([0, -1, 2**31, 2**63, 2**64 + 1, 10**40, 10**99]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1e-300, 1e300, 1e308]),
    st.text(max_size=12), st.sampled_from(["local", "global", "rope", "swiglu", "rmsnorm", "0.1", "1e5"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)


def mutate(data: dict[str, Any], fields: list[str], draw: Any) -> dict[str, Any]:
    data = dict(data)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "delete", "rename"]))
        key = draw(st.sampled_from(fields))
        if op == "set":
            data[key] = draw(values)
        elif op == "delete":
            data.pop(key, None)
        elif data:
            old = draw(st.sampled_from(sorted(data)))
            data[old + draw(st.sampled_from(["s", "_", "x"]))] = data.pop(old)
    return data


def check(args: list[str]) -> None:
    start = time.perf_counter()
    result = runner.invoke(app, args)
    elapsed = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args}: {type(result.exception).__name__}: {result.exception}")
    assert elapsed < 20, (args, elapsed)
    if result.exit_code == 0:
        text = result.stdout
        assert "Infinity" not in text and "NaN" not in text, args
        json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    else:
        assert result.exit_code == 2, (args, result.exit_code, result.output)
        lines = result.stderr.strip().splitlines()
        assert lines and all(LINE.match(line) for line in lines), (args, result.stderr)
        assert "Traceback" not in result.output


@SETTINGS
@given(st.data())
def test_mutated_bundled_specs(tmp_path: Path, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(BUNDLED))
    spec = yaml.safe_load(path.read_text())
    mutated = mutate(spec, FIELDS, data.draw)
    target = tmp_path / "spec.yaml"
    target.write_text(yaml.safe_dump(mutated, sort_keys=False, allow_unicode=True))
    phase = data.draw(st.sampled_from([[], ["-p", "decode"], ["-p", "train"]]))
    hw = data.draw(st.sampled_from([[], ["--hardware", "h100-sxm"]]))
    check(["analyze", str(target), "-f", "json", *phase, *hw])


@SETTINGS
@given(st.data())
def test_mutated_yaml_text(tmp_path: Path, data: st.DataObject) -> None:
    """Byte-level damage to a bundled spec's text: cut, duplicated, or a character replaced."""
    text = data.draw(st.sampled_from(BUNDLED)).read_bytes()
    i = data.draw(st.integers(0, len(text) - 1))
    op = data.draw(st.sampled_from(["cut", "dup", "byte"]))
    if op == "cut":
        text = text[:i]
    elif op == "dup":
        j = data.draw(st.integers(i, min(len(text), i + 200)))
        text = text[:j] + text[i:j] + text[j:]
    else:
        text = text[:i] + bytes([data.draw(st.integers(0, 255))]) + text[i + 1:]
    target = tmp_path / "spec.yaml"
    target.write_bytes(text)
    check(["analyze", str(target), "-f", "json", "-p", "prefill"])


@SETTINGS
@given(st.data())
def test_mutated_hf_configs(tmp_path: Path, data: st.DataObject) -> None:
    model_type, config = data.draw(st.sampled_from(HF_CONFIGS))
    mutated = mutate({"model_type": model_type, **config}, HF_FIELDS, data.draw)
    target = tmp_path / "config.json"
    target.write_text(json.dumps(mutated, allow_nan=True))
    check(["analyze", str(target), "-f", "json", "-p", "decode"])


def test_fuzzing_stayed_within_memory() -> None:
    """Peak RSS of the whole test process (KiB on Linux): no run expanded anything huge."""
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 3 * 2**20
