"""Every command of the examples in docs/cli.md (the README's tour before issue 22), run through
typer's CliRunner; tests/test_readme.py checks the README's quoted output line by line."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from typer.testing import CliRunner

from costmodel.cli import app

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_list_shows_published_and_ours() -> None:
    out = run("list").stdout
    assert "llama-2-7b" in out and "6,738,415,616" in out and "t5-11b" in out
    data = json.loads(run("list", "--format", "json").stdout)
    entry = next(d for d in data if d["name"] == "gpt2-small")
    assert entry["params"] == 124_439_808 and entry["published"] == "124M"


def test_analyze_all_phases_table() -> None:
    out = run("analyze", "specs/llama-2-7b.yaml").stdout
    for word in ("Parameters", "6,738,415,616", "train", "prefill", "decode", "KV cache", "intensity"):
        assert word in out


def test_bundled_names_with_dots() -> None:
    assert "405,853,388,800" in run("analyze", "llama-3.1-405b", "-p", "decode").stdout


def test_analyze_does_not_import_sympy() -> None:
    """Numbers are evaluated on integers: the CLI's hot path never pays for sympy's import."""
    import subprocess
    import sys

    code = ("import sys; from costmodel import analyze; from costmodel.catalog import load; "
            "analyze(load('gemma-2-9b'), 'decode'); print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_commands_map_to_the_modules_that_register_them() -> None:
    """costmodel.cli.COMMANDS names each module's commands (the console script imports one
    command's module alone): it must be what the modules register."""
    from costmodel.cli import COMMANDS, app, modules_for

    registered = {c.name: c.callback.__module__ for c in app.registered_commands if c.callback}
    assert registered == {n: m for m, names in COMMANDS.items() for n in names}
    assert modules_for(["/venv/bin/costmodel", "memory", "llama-2-7b", "--zero",
                        "3"]) == ["costmodel.cli.memory"]
    assert modules_for(["/venv/bin/costmodel", "--help"]) == list(COMMANDS)
    assert modules_for(["/venv/bin/costmodel", "no-such-command"]) == list(COMMANDS)
    assert modules_for(["pytest", "analyze"]) == list(COMMANDS)


def test_the_analyze_command_imports_neither_the_planner_nor_the_hf_families() -> None:
    """`costmodel analyze` (the console script) loads its own module: the parallel planner and
    the Hugging Face families stay out of its start-up; and it still works."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['costmodel', 'analyze', 'llama-2-7b']; from costmodel.cli import main\n"
            "try: main()\nexcept SystemExit: pass\n"
            "print([m for m in ('costmodel.parallel.step', 'costmodel.hf.families', 'costmodel.cli.train', "
            "'costmodel.studies.compare', 'costmodel.studies.variants', 'costmodel.runtime.timing') "
            "if m in sys.modules], file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "6,738,415,616" in out.stdout and out.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_every_command_runs_from_the_console_script_that_imports_its_module_alone() -> None:
    """The console script imports one command's module: a module that registers one command
    (inference, import-hf) must still be run by name, not as the whole program."""
    import subprocess
    import sys

    from costmodel.cli import COMMANDS

    for name in (names[0] for names in COMMANDS.values()):  # one per module: the group is the module's
        code = (f"import sys; sys.argv = ['costmodel', {name!r}, '--help']; from costmodel.cli import main\n"
                "try: main()\nexcept SystemExit as e: sys.exit(e.code)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, (name, out.stderr)
        assert f"Usage: costmodel {name} [OPTIONS]" in out.stdout, (name, out.stdout[:300])


def test_analyze_one_phase_components() -> None:
    out = run("analyze", "llama-2-7b", "--phase", "decode", "--batch", "8", "--seq", "4096").stdout
    assert "decode: components" in out and "layers/attention/scores" in out
    assert "B=8 S=1 C=4097" in out


def test_analyze_json_has_every_field_and_integers_stay_integers() -> None:
    whole = json.loads(run("analyze", "specs/mistral-7b.yaml", "-p", "prefill", "--format", "json").stdout)
    assert set(whole) == {"spec",
                          "phases"} and list(whole["phases"]) == ["prefill"]  # one shape, --phase or not
    data = whole["phases"]["prefill"]
    for key in ("spec", "phase", "batch", "seq", "dtype", "kv_cache_bytes", "arithmetic_intensity"):
        assert key in data
    for key in ("total", "embedding", "lm_head", "non_embedding", "by_component"):
        assert key in data["params"]
    for key in ("total", "matmul", "matmul_effective", "by_component"):
        assert key in data["flops"]
    for key in ("unfused", "fused_min", "weights"):
        assert key in data["bytes"]
    assert isinstance(data["params"]["total"], int) and data["params"]["total"] == 7_241_732_096
    assert isinstance(data["flops"]["matmul"], int) and isinstance(data["kv_cache_bytes"], int)
    assert data["phase"] == "prefill" and data["seq"] == 2048 and data["dtype"] == "bf16"
    # mistral-7b: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes x 2048 tokens
    assert data["kv_cache_bytes"] == 32 * 8 * 128 * 2 * 2 * 2048


def test_analyze_json_without_phase_has_all_three() -> None:
    data = json.loads(run("analyze", "gpt2-small", "--format", "json").stdout)
    assert set(data["phases"]) == {"train", "prefill", "decode"}
    assert data["phases"]["decode"]["seq"] == 1023  # decode caches one token fewer: 1024 positions


def test_analyze_markdown_and_csv() -> None:
    md = run("analyze", "llama-2-7b", "-p", "prefill", "--format", "markdown").stdout
    assert md.startswith("## llama-2-7b") and "| component |" in md and "|---|" in md
    rows = list(csv.DictReader(io.StringIO(run("analyze", "llama-2-7b", "--format", "csv").stdout)))
    totals = {r["phase"]: r for r in rows if r["component"] == "total"}
    assert set(totals) == {"train", "prefill", "decode"}
    assert int(totals["prefill"]["params"]) == 6_738_415_616


def test_formula_numbers_substituted() -> None:
    out = run("formula", "llama-2-7b", "--quantity", "flops_matmul", "--phase", "prefill").stdout.strip()
    # 4*L*h*d_h = 524288 for the dense scores and AV; 2 x (matmul weights) per token
    assert out == "524288*B*S**2 + 13214154752*B*S"


def test_formula_symbolic_kv_cache() -> None:
    out = run("formula", "llama-2-7b", "-q", "kv_cache", "-p", "decode", "--symbolic").stdout.strip()
    assert out == "2*B*C*L*d_h*k*p"


def test_formula_latex_for_a_component() -> None:
    out = run("formula", "gemma-2-9b", "-q", "flops", "-p", "decode", "-c", "layers[local]/attention",
              "--latex").stdout
    assert "\\min" in out and "B" in out


@pytest.mark.parametrize("args, message", [
    (["formula", "llama-2-7b", "-c", "layers/mlp"], "no component 'layers/mlp'"),
    (["analyze", "gpt2-small", "--seq", "4096"], "beyond the 1024 learned positions"),
    (["analyze", "llama-2-7b", "--enc-seq", "10"], "enc_seq: only for encoder-decoder"),
    (["analyze", "llama-2-7b", "--batch", "0"], "--batch"),
])
def test_bad_requests_one_line_exit_2(args, message) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args, expect", [
    (["analyze", "llama-2-7b", "--hardware", "h100-sxm"], "bound"),
    (["attention", "llama-3-8b", "--batch", "16", "--seq", "8192"], "MQA k=1"),
    (["compare", "llama-2-7b", "mistral-7b", "gemma-2-9b"], "varies"),
    (["elements", "llama-2-7b"], "MQA"),
])
def test_tour_commands(args, expect) -> None:
    """The tour's one-line examples of the other commands run and say what they promise."""
    assert expect in run(*args).stdout


@pytest.mark.slow
def test_tour_measure_check() -> None:
    pytest.importorskip("torch", reason="costmodel measure needs the [measure] extra (torch)")
    result = runner.invoke(app, ["measure", "llama-2-7b", "--check"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("equal") >= 9  # params, matmul FLOPs, KV cache in three phases
