"""One language across commands (issue 23): one option name per idea (old names kept, hidden,
for a release), `--version`, usage errors as one line, tables that fit the terminal (`--wide`
for all of them, piped output never cut), CSV cells that are numbers."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from costmodel.cli import app
from costmodel.cli.app import ALIASES
from costmodel.report.tables import Table, render_rich

runner = CliRunner()
APP = sys.modules["costmodel.cli.app"]  # the module; `costmodel.cli.app` is the typer app


def test_version_is_the_package_metadata() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"costmodel {version('costmodel')}"


@pytest.mark.parametrize("args,line", [
    (["analyze", "gpt2-small", "--batch", "x"], r"error: --batch: Invalid value: .*valid integer"),
    (["analyze", "gpt2-small", "--batch", "0"], r"error: --batch: .*greater than or equal to 1"),
    (["analyze", "gpt2-small", "--batc", "2"], r"error: --batc: no such option \(did you mean --batch\?\)"),
    (["analyze"], r"error: SPEC: missing, a required argument"),
    (["fit", "gpt2-small"], r"error: --hardware: missing, a required option"),
    (["analyze", "gpt2-small", "-p", "lunch"], r"error: --phase: .*'lunch'"),
    (["no-such-command"], r"error: no such command 'no-such-command'"),
])
def test_usage_errors_are_one_line(args: list[str], line: str) -> None:
    """Not a box: one `error:` line naming the option, exit code 2 (stderr is not a terminal)."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and re.match(line, result.stderr), result.stderr


def test_usage_errors_are_one_line_from_the_console_script() -> None:
    out = subprocess.run([sys.executable, "-c", "from costmodel.cli import main; main()",
                          "analyze", "gpt2-small", "-b", "x"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: --batch: ") and out.stderr.count("\n") == 1


@pytest.mark.parametrize("old,new", [
    (["inference", "gpt2-small", "--hardware", "l4", "--prompt", "64", "--output", "8", "-f", "json"],
     ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--output-tokens", "8", "-f", "json"]),
    (["inference", "gpt2-small", "--hardware", "l4", "--prompt=64", "-f", "json"],
     ["inference", "gpt2-small", "--hardware", "l4", "-s", "64", "-f", "json"]),
    (["serve", "llama-3-8b", "--cluster", "dgx-h100", "--context", "1024", "-f", "json"],
     ["serve", "llama-3-8b", "--cluster", "dgx-h100", "--seq", "1024", "-f", "json"]),
    (["serve", "llama-3-8b", "--cluster", "dgx-h100", "-c", "1024", "-f", "json"],
     ["serve", "llama-3-8b", "--cluster", "dgx-h100", "-s", "1024", "-f", "json"]),
    (["memory", "gpt2-small", "--flash", "-f", "json"],
     ["memory", "gpt2-small", "--kernels", "flash", "-f", "json"]),
    (["memory", "gpt2-small", "--flash-attention", "-f", "json"],
     ["memory", "gpt2-small", "--kernels=flash", "-f", "json"]),
    (["fit", "gpt2-small", "--hardware", "l4", "--no-flash", "-f", "json"],
     ["fit", "gpt2-small", "--hardware", "l4", "--kernels", "eager", "-f", "json"]),
    (["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--flash-attention", "-f", "json"],
     ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--kernels", "flash", "-f", "json"]),
])
def test_old_names_still_work_with_a_note(old: list[str], new: list[str]) -> None:
    before, after = runner.invoke(app, old), runner.invoke(app, new)
    assert before.exit_code == after.exit_code == 0, before.output
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert re.search(r"^warning: \S+ is deprecated", before.stderr, re.M) and not after.stderr


def test_old_names_are_hidden_and_values_left_alone() -> None:
    for command, table in ALIASES.items():
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        for old in table:
            assert not re.search(rf"(^|[\s│,]){re.escape(old)}([\s,]|$)", shown), (command, old)
    # an option's value that looks like an old name is a value: import-hf's --name, say
    renamed = APP.renamed("serve", ["--cluster", "--context", "-c", "5"], APP.typer.main.get_command(app)
                          .commands["serve"].params)
    assert renamed == ["--cluster", "--context", "--seq", "5"]
    assert APP.renamed("serve", ["--", "-c", "--context"], []) == ["--", "-c", "--context"]


def test_one_name_per_idea() -> None:
    """No two commands use one option name for things of different kinds, and the ideas the
    issue names have one name each."""
    import typer.main

    group = typer.main.get_command(app)
    names = {o for cmd in group.commands.values() for p in cmd.params  # type: ignore[attr-defined]
             if not getattr(p, "hidden", False) for o in getattr(p, "opts", ())}
    assert "--prompt" not in names and "--context" not in names and "--flash" not in names
    assert "--flash-attention" not in names and "--fused" not in names and "--kernels" in names
    shorts: dict[str, set[str]] = {}
    for cmd in group.commands.values():  # type: ignore[attr-defined]
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            long = next((o for o in p.opts if o.startswith("--")), None)
            for o in p.opts:
                if len(o) == 2 and long:
                    shorts.setdefault(o, set()).add(long)
    # -f: the report format, or import-hf's spec format; every other short flag names one option
    assert {k: v for k, v in shorts.items() if len(v) > 1} == {}


WIDE = Table("Wide", ("name", *(f"column {i}" for i in range(12))),
             [("row with a long label", *(f"{i * 1234.5:,.1f} GiB" for i in range(12)))], ("a note",))


def test_a_table_fits_an_80_column_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    render_rich([WIDE], width=80)
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80 and "…" not in out
    assert "left out to fit 80 columns: column" in out and "(--wide for all)" in out
    render_rich([WIDE], width=80, wide=True)
    out = capsys.readouterr().out
    assert "column 11" in out and "13,579.5 GiB" in out and "left out" not in out


def test_piped_output_is_never_cut(capsys: pytest.CaptureFixture[str]) -> None:
    render_rich([WIDE], width=None)
    out = capsys.readouterr().out
    assert "…" not in out and "13,579.5 GiB" in out and max(map(len, out.splitlines())) > 160


def test_the_attention_table_fits_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The widest table of the tour: at 80 columns, cut to fit, nothing truncated mid-cell."""
    monkeypatch.setattr(APP, "_terminal", lambda: 80)
    out = runner.invoke(app, ["attention", "llama-3-8b"]).stdout
    assert max(map(len, out.splitlines())) <= 80 and "…" not in out and "--wide for all" in out
    wide = runner.invoke(app, ["attention", "llama-3-8b", "--wide"]).stdout
    assert "max batch" in wide and "…" not in wide and "left out to fit" not in wide


UNIT = re.compile(r"^-?[\d.,]+\s*(K|M|B|T|ms|µs|s|KiB|MiB|GiB|TiB|GB|TB|B/s|GB/s|TB/s|[KMGTP]?FLOP(/s)?|%)$")


@pytest.mark.parametrize("command", [
    "compare llama-2-7b mistral-7b", "measure gpt2-small",
    "train gpt2-small --cluster dgx-h100 --gpus 8 -G 8", "plan gpt2-small --cluster dgx-h100 --gpus 8 -G 8",
    "serve llama-3-8b --cluster dgx-h100 -b 1,8", "clusters", "inference gpt2-small --hardware l4 --seq 512",
    "fit gpt2-small --hardware l4", "memory gpt2-small",
    "attention llama-3-8b --seq 4096", "hardware",
])
def test_csv_cells_are_numbers_not_units(command: str) -> None:
    result = runner.invoke(app, [*command.split(), "-f", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert len(rows) >= 2
    assert not [c for r in rows[1:] for c in r if UNIT.match(c.strip())]


# Issue 23: at 80 columns each table keeps its essential columns (a name and what the command is
# for), leaving out the least essential first. Per command: the table title's start -> the
# columns that must stay.
ESSENTIAL = {
    "analyze llama-2-7b --phase decode --hardware h100-sxm": {
        "Parameters": {"component", "exact"}, "Phases": {"quantity", "decode"},
        "decode: components": {"component", "FLOPs", "bytes"}},
    "compare llama-2-7b mistral-7b gemma-2-9b": {
        "Design choices": {"choice", "llama-2-7b", "mistral-7b", "gemma-2-9b"},
        "Costs at a common shape": {"quantity", "llama-2-7b", "mistral-7b", "gemma-2-9b"}},
    "inference llama-3-8b --hardware h100-sxm --batch 1,8,64": {
        "Serving": {"batch", "TTFT", "TPOT mean", "tokens/s", "fits"}},
    "train gpt2-small --cluster dgx-a100-80gb --gpus 16 --tp 2 --pp 2 -G 16": {
        "Training step": {"", "value"}, "Where the step goes": {"part", "time", "share"},
        "Collectives per step": {"group/kind", "time", "exposed"},
        "Memory per GPU": {"", "first stage", "last stage"}},
    "plan gpt2-small --cluster dgx-a100-80gb --gpus 8 --global-batch 8": {
        "Best layouts": {"#", "layout", "step", "memory/GPU"}},
    "serve llama-3-8b --cluster dgx-h100 --tp 2 --batch 1,8,64": {
        "Decode on TP2": {"batch", "TPOT", "tokens/s", "memory/GPU", "fits"}},
    "deploy gpt2-small --cluster dgx-h100 --gpus 2 --seq 512 --output-tokens 128 -b 16": {
        "Deployments of": {"#", "layout", "TTFT p90", "TPOT p90", "tok/s/GPU", "tok/s/user"},
        "Pareto front": {"#", "layout", "TTFT p90", "TPOT p90", "tok/s/GPU", "tok/s/user"}},
}


@pytest.mark.parametrize("command", ESSENTIAL)
def test_tables_keep_their_essential_columns_at_80(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """In an 80-column terminal every table of the command fits, nothing is cut mid-cell, and
    the columns that say what the command is for are among those shown (report.tables.fit); the
    ones left out are named under the table; --wide shows them all."""
    from costmodel.report import tables

    seen: list[Table] = []
    real = tables.render_rich

    def capture(ts, header=None, width=None, wide=False):  # type: ignore[no-untyped-def]
        seen.extend(ts)
        real(ts, header, width, wide)

    monkeypatch.setattr(APP, "_terminal", lambda: 80)
    monkeypatch.setattr(APP.report, "render_rich", capture)
    result = runner.invoke(app, command.split())
    assert result.exit_code == 0, result.output
    assert max(map(len, result.stdout.splitlines())) <= 80 and "…" not in result.stdout
    expected = ESSENTIAL[command]
    checked = set()
    for t in seen:
        key = next((k for k in expected if t.title.startswith(k)), None)
        if key is None:
            continue
        checked.add(key)
        shown, dropped = tables.fit(t, 80)
        assert expected[key] <= {t.columns[i] for i in shown}, (t.title, [t.columns[i] for i in dropped])
        for i in dropped:
            assert t.columns[i] in result.stdout.split("left out to fit 80 columns: ", 1)[1]
    assert checked == set(expected)
