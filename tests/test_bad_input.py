"""Issue 10: bad input never crashes, hangs or eats memory; nothing silently wrong; the
documented Python API. Every case found by the outside fuzzers is kept here, explicitly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import costmodel
from costmodel import cli, loading, units
from costmodel.analysis import AnalysisError, ContextWarning, analyze
from costmodel.cli import app
from costmodel.devices.hardware import load_hardware
from costmodel.spec import LayerKind, SpecError, parse_spec
from costmodel.studies.sweep import MAX_POINTS, parse_axis
from tests.helpers import TINY, tiny

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
GOOD = yaml.safe_dump(TINY, sort_keys=False)
ERROR_LINE = re.compile(r"^(error|warning): \S.*$")


def fails(*args: str, code: int = 2) -> str:
    """The command exits `code` with only `error:`/`warning:` lines on stderr (no traceback)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert lines and all(ERROR_LINE.match(line) for line in lines), result.stderr
    return result.stderr


def write(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


# --- memory and time bounded by meaning ------------------------------------------------------


def test_a_billion_layers_are_counted_not_listed() -> None:
    """kind_counts is arithmetic: 1e9 layers with a pattern take no list of 1e9 entries."""
    spec = tiny(n_layers=10**9, window=4, layer_pattern=["local", "local", "global"])
    start = time.perf_counter()
    # 10^9 = 3 * 333,333,333 + 1: the cut pattern adds one more local layer.
    assert spec.kind_counts() == {LayerKind.local: 666_666_667, LayerKind.global_: 333_333_333}
    a = analyze(spec, "decode", seq=1)
    assert time.perf_counter() - start < 5
    assert a.total().params > 10**9


def test_pattern_counts_match_the_list() -> None:
    spec = tiny(n_layers=7, window=4, layer_pattern=["local", "global", "local"])
    kinds = spec.layer_kinds()
    assert spec.kind_counts() == {k: kinds.count(k) for k in dict.fromkeys(kinds)}


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


def test_alias_bomb_is_refused_before_expanding() -> None:
    assert len(BOMB) < 1024  # a 1 KB file that would expand to 10^9 nodes
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"x\.yaml:\d+: expands past 100,000 nodes"):
        parse_spec(BOMB, "x.yaml")
    assert time.perf_counter() - start < 2


def test_self_referencing_alias_is_refused() -> None:
    with pytest.raises(SpecError, match="an alias refers to itself"):
        parse_spec("a: &x [1, *x]\n", "x.yaml")


def test_small_aliases_still_work() -> None:
    text = GOOD.replace("name: tiny", "name: &n tiny") + "family: *n\n"
    assert parse_spec(text).family == "tiny"


def test_deep_nesting_is_one_line() -> None:
    with pytest.raises(SpecError, match="nested deeper than 64 levels"):
        parse_spec("a: " + "[" * 500 + "]" * 500 + "\n", "x.yaml")
    with pytest.raises(SpecError, match="nested deeper"):
        parse_spec("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)), "x.yaml")


def test_dev_zero_and_fifo_and_directories_are_refused_in_one_line(tmp_path: Path) -> None:
    assert "not a regular file" in fails("analyze", "/dev/zero")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    start = time.perf_counter()
    assert "not a regular file" in fails("analyze", str(fifo))  # and does not block
    assert time.perf_counter() - start < 5
    assert "is a directory" in fails("analyze", "llama-2-7b", "--hardware", str(tmp_path))
    assert "not a regular file" in fails("analyze", "llama-2-7b", "--hardware", "/dev/zero")


def test_files_over_ten_mib_are_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(loading.MAX_BYTES + 1)
    start = time.perf_counter()
    assert "a spec is at most 10,485,760" in fails("analyze", str(path))
    assert time.perf_counter() - start < 2


def test_sweep_grids_are_capped() -> None:
    with pytest.raises(AnalysisError, match=f"at most {MAX_POINTS:,}"):
        parse_axis("seq=1:1000000000:10000000")
    with pytest.raises(AnalysisError, match="2\\^53"):
        parse_axis("seq=1:99999999999999999999")
    assert "at most" in fails("sweep", "llama-2-7b", "--over", "seq=1:1000000000:10000000")
    assert "grid of" in fails("sweep", "llama-2-7b", "--over", "seq=1:4096:1000", "--over",
                              "batch=1:4096:1000")


def test_measure_meta_allocates_no_token_ids(monkeypatch) -> None:
    """--seq 10^8 on the meta device: the token ids are meta tensors, not 800 MB on the host."""
    torch = pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")
    from costmodel.measure import run
    from costmodel.measure.reference import build

    model = build(tiny(max_seq_len=2 * 10**8), device="meta")
    monkeypatch.setattr(torch, "randint", lambda *a, **k: pytest.fail("token ids drawn on the host"))
    run.phase_runner(model, "prefill", {"B": 1, "S": 10**8, "C": 10**8, "S_e": 0, "C_e": 0})


# --- no traceback, ever --------------------------------------------------------------------


@pytest.mark.parametrize("raw, pattern", [
    (b"name: \xff\xfe\n", r"s\.yaml:1: not UTF-8 text"),
    (GOOD.replace("d_model: 8", "d_model: 1" + "0" * 5000).encode(), r"an integer of 5001 digits"),
    (GOOD.replace("d_model: 8", "d_model: 1e200").encode(), r"d_model: input should be a valid integer"),
    ((GOOD + "published: {params: 0, source: x}\n").encode(),
     r"published.params: input should be greater than 0"),
    ((GOOD + "published: {params: '0.0B', source: x}\n").encode(), r"published.params: .*should look like"),
])
def test_bad_specs_are_lines_not_tracebacks(tmp_path: Path, raw: bytes, pattern: str) -> None:
    assert re.search(pattern, fails("analyze", write(tmp_path, raw)))


def test_counts_past_float_range_are_refused(tmp_path: Path) -> None:
    huge = "1" + "0" * 99
    text = GOOD.replace("d_model: 8", f"d_model: {huge}").replace("n_layers: 2", f"n_layers: {huge}")
    text = text.replace("vocab_size: 10", f"vocab_size: {huge}").replace("n_heads: 2", "n_heads: 1")
    text = text.replace("n_kv_heads: 1", "n_kv_heads: 1")
    path = write(tmp_path, text)
    err = fails("analyze", path, "--hardware", "h100-sxm", "--batch", "100000000000", "--seq", "60")
    assert "floating-point figures" in err
    fails("sweep", path, "--batch", "100000000000")
    out = runner.invoke(app, ["analyze", path, "-f", "json", "--hardware", "h100-sxm"])  # 1e300: fine
    assert out.exit_code == 0 and "Infinity" not in out.stdout
    json.loads(out.stdout)


def test_units_past_float_range() -> None:
    assert units.count(10**400) == "1.00e+388 T"
    assert units.flops(10**20) == "100000 PFLOP" and units.flops(10**40) == "1e+25 PFLOP"
    assert units.nbytes(-(10**400)).startswith("-8.8")


def test_long_spec_name_and_huge_seq() -> None:
    err = fails("analyze", "x" * 300)
    assert len(err) < 300 and "File name too long" in err
    huge = runner.invoke(app, ["analyze", "llama-2-7b", "--seq", "99999999999999999999", "-f", "json"])
    assert huge.exit_code == 0 and json.loads(huge.stdout)["phases"]["decode"]["seq"] == 10**20 - 1
    fails("sweep", "llama-2-7b", "--over", "seq=1:99999999999999999999")
    fails("sweep", "llama-2-7b", "--over", "batch=" + "9" * 30)


def test_profile_with_infinite_memory(tmp_path: Path) -> None:
    text = (ROOT / "specs/hardware/h100-sxm.yaml").read_text().replace("memory_bytes: 80.0e9",
                                                                       "memory_bytes: .inf")
    assert "memory_bytes: Input should be a finite number" in fails(
        "analyze", "llama-2-7b", "--hardware", write(tmp_path, text, "hw.yaml"))
    fails("analyze", "llama-2-7b", "--hardware", write(tmp_path, b"name: \xff", "hw2.yaml"))


def test_last_resort_handler_is_one_line_and_exit_3(monkeypatch, capsys) -> None:
    def broken() -> None:
        raise ZeroDivisionError("division by zero\nsecond line")

    with pytest.raises(SystemExit) as info:
        cli.last_resort(broken)
    assert info.value.code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: internal error, a bug in costmodel")
    assert "ZeroDivisionError: division by zero second line" in err and "Reporting a bug" in err


def test_last_resort_passes_exit_codes_through() -> None:
    def exits() -> None:
        sys.exit(2)

    with pytest.raises(SystemExit) as info:
        cli.last_resort(exits)
    assert info.value.code == 2


# --- nothing silently wrong ------------------------------------------------------------------


@pytest.mark.parametrize("line, pattern", [
    ("z_loss: true", r"z_loss: input should be a valid number"),
    ("dropout: '0.1'", r"dropout: input should be a valid number"),
    ("attn_softcap: .inf", r"attn_softcap: input should be a finite number"),
    ("final_softcap: .nan", r"final_softcap: input should be a finite number"),
    ("logit_scale: .inf", r"logit_scale: input should be a finite number"),
    ("z_loss: .inf", r"z_loss: input should be a finite number"),
    ("n_layers: 1", r"x\.yaml:12: n_layers: duplicate key"),
    ("max_seq_len: 1:30", r"x\.yaml:11: '1:30': ambiguous number"),
    ("max_seq_len: 0b101", r"'0b101': ambiguous number"),
    ("max_seq_len: 1_000", r"'1_000': ambiguous number"),
    ("logit_scale: 1:30.5", r"ambiguous number"),
])
def test_strict_numbers_and_yaml(line: str, pattern: str) -> None:
    text = GOOD.replace("max_seq_len: 64\n", "") if line.startswith("max_seq_len") else GOOD
    with pytest.raises(SpecError, match=pattern):
        parse_spec(text + line + "\n", "x.yaml")


def test_yaml_12_ints_and_floats() -> None:
    assert parse_spec(GOOD.replace("vocab_size: 10", "vocab_size: 011000")).vocab_size == 11000
    assert parse_spec(GOOD.replace("vocab_size: 10", "vocab_size: 0x10")).vocab_size == 16
    assert parse_spec(GOOD + "logit_scale: 1e-2\n").logit_scale == 0.01
    assert parse_spec(GOOD + "z_loss: 1\n").z_loss == 1.0


def test_rotary_dims_are_integer_arithmetic() -> None:
    big = 2**60  # past 2^53, where float loses whole dimensions
    spec = tiny(d_model=big * 2, n_heads=2, n_kv_heads=1, rotary_fraction=0.25)
    assert spec.head_dim == big and spec.rotary_dims == big // 4
    assert tiny(d_model=160, n_heads=2, rotary_fraction=0.4).rotary_dims == 32
    with pytest.raises(SpecError, match="rotary_fraction"):
        tiny(d_model=2 * (2**60 + 2), n_heads=2, rotary_fraction=0.5 - 2**-53)


def test_global_nope_needs_a_local_layer() -> None:
    with pytest.raises(SpecError, match="global_nope: every layer is global"):
        tiny(global_nope=True)


def test_rope_past_max_seq_len_warns_in_one_line() -> None:
    with pytest.warns(ContextWarning, match="past the 64 positions"):
        analyze(tiny(), "prefill", seq=65)
    result = runner.invoke(app, ["analyze", "llama-2-7b", "--seq", "8192"])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "warning: seq: attends past the 4096 positions llama-2-7b was trained on (RoPE computes "
        "the counts; the model's quality there is another matter)"]


def test_plot_without_suffix_names_the_file_written(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sweep", "gpt2-small", "--plot", str(tmp_path / "chart")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "chart.svg").is_file()
    assert f"wrote {tmp_path / 'chart.svg'}" in result.stderr


# --- the documented API and formats ----------------------------------------------------------


def test_load_spec_takes_bundled_names_and_modules_are_attributes() -> None:
    assert costmodel.load_spec("llama-2-7b").name == "llama-2-7b"
    assert costmodel.hf.load_hf.__module__.startswith("costmodel.hf")
    assert costmodel.sweep.parse_axis is parse_axis
    with pytest.raises(AttributeError):
        costmodel.nothing  # noqa: B018


def test_analyze_with_hardware_from_python() -> None:
    spec = costmodel.load_spec("llama-2-7b")
    a = costmodel.analyze(spec, "decode", hardware="h100-sxm")
    hw = load_hardware("h100-sxm")
    t = a.total()
    # decode at batch 1 is memory-bound: time = fused bytes / bandwidth, by hand
    assert a.roofline["bound"] == "memory"
    assert a.roofline["time_s"] == pytest.approx(t.bytes_fused / hw.memory_bandwidth)
    assert a.to_dict()["roofline"] == a.roofline
    assert costmodel.analyze(spec, "decode").roofline is None


def test_every_problem_at_once_with_lines_and_guesses() -> None:
    text = GOOD.replace("d_ff: 12", "dff: 12").replace("norm: rmsnorm", "nrom: rmsnorm")
    text += "activaton: gelu\n"
    with pytest.raises(SpecError) as info:
        parse_spec(text, "x.yaml")
    lines = str(info.value).splitlines()
    assert "x.yaml:6: dff: unknown field (did you mean d_ff?)" in lines
    assert "x.yaml:9: nrom: unknown field (did you mean norm?)" in lines
    assert "x.yaml:12: activaton: unknown field (did you mean activation?)" in lines
    assert "x.yaml: d_ff: field required" in lines and "x.yaml: norm: field required" in lines
    err = fails("analyze", write_tmp(text))
    assert err.count("error: ") == len(lines)


def write_tmp(text: str) -> str:
    import tempfile

    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    f.write(text)
    f.close()
    return f.name


@pytest.mark.parametrize("name", ["h100-sxm", "H100-SXM", "h100_sxm", "H100 SXM"])
def test_hardware_names_resolve(name: str) -> None:
    assert load_hardware(name).name == "h100-sxm"


def test_hardware_name_suggests() -> None:
    # Issue 23: a prefix is not a name (it resolved silently, "h1" to h100-sxm); the closest are named.
    assert "did you mean a100-80gb" in fails("analyze", "llama-2-7b", "--hardware", "a100")
    # the closest first: h100-sxm one letter away, v100-sxm2 (issue 25's V100) two
    assert "did you mean h100-sxm or v100-sxm2?" in fails("analyze", "llama-2-7b", "--hardware", "h100-sxn")
    assert "did you mean h100-sxm or h200" in fails("analyze", "llama-2-7b", "--hardware", "h")


def test_attention_footer_agrees_with_json_on_c() -> None:
    data = json.loads(runner.invoke(app, ["attention", "llama-2-7b", "-f", "json"]).stdout)
    contexts = {r["phase"]: r["shape"]["C"] for r in data["kv_heads"]}
    table = runner.invoke(app, ["attention", "llama-2-7b"]).stdout
    assert f"prefill S = C = {contexts['prefill']:,}" in table
    assert f"decode {contexts['decode'] - 1:,} cached, C = {contexts['decode']:,}" in table


def test_help_is_readable_at_80_columns() -> None:
    """No option's metavar is broken across lines (the choices are in the help text)."""
    for command in ("analyze", "formula", "sweep", "compare", "elements", "calibrate", "measure",
                    "attention", "ablate", "import-hf", "list", "hardware", "inference", "memory", "fit"):
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"}).stdout
        assert out, command
        for line in out.splitlines():
            assert len(line) <= 80, (command, line)
            assert not re.search(r"<[^>]*$", line), (command, line)


def test_formula_symbolic_prints_a_legend() -> None:
    result = runner.invoke(app, ["formula", "gemma-2-9b", "-q", "kv_cache", "-p", "decode", "--symbolic"])
    assert result.stdout.strip() == "2*B*C*L_global*d_h*k*p + 2*B*L_local*d_h*k*p*Min(C, w)"
    legend = dict(line.split(None, 1) for line in result.stderr.strip().splitlines())
    assert legend["B"] == "batch size" and legend["w"] == "sliding-window length"
    assert legend["L_local"] == "layers of kind local" and set(legend) == {
        "B", "C", "k", "d_h", "w", "p", "L_global", "L_local"}
    data = json.loads(runner.invoke(app, ["formula", "llama-2-7b", "-q", "kv_cache", "-p", "decode",
                                          "--symbolic", "-f", "json"]).stdout)
    assert set(data["symbols"]) == {"B", "C", "L", "d_h", "k", "p"}


def test_docs_reference_ships_every_symbol_and_nothing_points_outside() -> None:
    from costmodel.symbols import ALPHABET

    ref = (ROOT / "docs/reference.md").read_text()
    assert all(f"| `{name}` |" in ref for name in ALPHABET)
    for path in [ROOT / "README.md", *sorted((ROOT / "costmodel").rglob("cli*.py"))]:
        assert "shared/DESIGN.md" not in path.read_text(), path


def test_readme_second_command_runs_the_whole_suite() -> None:
    first, second = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()[2:4]]
    assert first.startswith("python3 -m venv .venv") and "costmodel analyze" in first
    assert "measure" in second and "torch==2.13.0" in second
    assert second.endswith("python -m pytest -q -n auto")


def test_memory_limit_is_respected_by_a_bad_file(tmp_path: Path) -> None:
    """The alias bomb under a 1 GiB address-space limit in a child: refused, not killed."""
    path = write(tmp_path, BOMB)
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({2**30 * 3}, {2**30 * 3}))\n"
            "import sys; from costmodel.cli import main\n"
            f"sys.argv = ['costmodel', 'analyze', {path!r}]; main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "expands past" in out.stderr and "Traceback" not in out.stderr


def test_measure_seq_past_a_c_long() -> None:
    pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")
    err = fails("measure", "llama-2-7b", "-p", "prefill", "--seq", "99999999999999999999", "--layers", "1")
    assert "past 2^63 elements" in err
