"""The README and the docs cannot go stale: every output the README quotes is the tool's output.

- Each fenced ```console block holds `$ costmodel ...` lines, each followed by an excerpt of
  what that command prints: every excerpt line must be a line of the real output (whitespace
  runs compared as one space), in the same order; lines may be left out, none may be changed.
- The Python snippet runs, and prints the ```text block after it, exactly.
- The number of bundled specs, and the CPU time figures, are those of the tool and of
  docs/time-cpu.md.
- docs/cli.md is generated from the commands (tests/docs_cli.py); every docs page starts with a
  contents list naming its sections, and the README's list of docs pages is complete.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from tests.docs_cli import render as render_cli_doc

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Pages that keep their own layout, exempt from the contents-list rule: architecture.md is
# another engineer's; time-cpu.md is what `bench/time_validation.py --out docs/time-cpu.md` writes.
NO_CONTENTS = {"architecture.md", "time-cpu.md"}

runner = CliRunner()


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def quoted_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command line, excerpt lines) for every `$ costmodel` line of the console blocks."""
    out: list[tuple[str, list[str]]] = []
    for lang, body in fenced_blocks(text):
        if lang != "console":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                assert line.startswith("$ costmodel "), f"only costmodel commands are checked: {line}"
                out.append((line[2:], []))
            elif line.strip() and line.strip() != "...":
                assert out, f"output before any command in a console block: {line}"
                out[-1][1].append(line)
    return out


def norm(line: str) -> str:
    return " ".join(line.split())


def missing_lines(excerpt: list[str], output: str) -> list[str]:
    """The excerpt lines not found in `output`, matched in order (empty when all are there)."""
    real = [norm(line) for line in output.splitlines()]
    i, missing = 0, []
    for line in excerpt:
        want = norm(line)
        try:
            i = real.index(want, i) + 1
        except ValueError:
            missing.append(line)
    return missing


@pytest.fixture(autouse=True)
def _bundled_profiles_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's calibrated profiles must not change what the README's commands print."""
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path / "hardware"))
    monkeypatch.setenv("COSTMODEL_CLUSTER_DIR", str(tmp_path / "clusters"))


COMMANDS = quoted_commands(README.read_text())
# The docs' console blocks are held to the same rule (docs/memory.md, docs/compare.md, ...).
DOC_COMMANDS = [(f"docs/{p.name}", cmd, excerpt)
                for p in sorted(DOCS.glob("*.md")) if p.name not in NO_CONTENTS
                for cmd, excerpt in quoted_commands(p.read_text())]


def test_the_readme_quotes_the_tour() -> None:
    quoted = {shlex.split(cmd)[1] for cmd, _ in COMMANDS}
    assert {"analyze", "compare", "ablate", "memory", "inference", "serve", "train", "plan"} <= quoted
    assert all(excerpt for _, excerpt in COMMANDS)


def check_quote(page: str, command: str, excerpt: list[str]) -> None:
    result = runner.invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    missing = missing_lines(excerpt, result.output)
    assert not missing, (f"{page} quotes lines `{command}` does not print (or not in this order):\n"
                         + "\n".join(missing) + "\n--- it prints:\n" + result.output)


@pytest.mark.parametrize("command,excerpt", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_readme_output_is_the_tools_output(command: str, excerpt: list[str]) -> None:
    check_quote("README.md", command, excerpt)


@pytest.mark.parametrize("page,command,excerpt", DOC_COMMANDS, ids=[f"{p}: {c}" for p, c, _ in DOC_COMMANDS])
def test_docs_output_is_the_tools_output(page: str, command: str, excerpt: list[str]) -> None:
    check_quote(page, command, excerpt)


def test_the_check_fails_on_a_changed_number() -> None:
    """The comparison above can fail: one digit changed in a quoted line is caught."""
    command, excerpt = next((c, e) for c, e in COMMANDS if " memory " in f" {c} ")
    output = runner.invoke(app, shlex.split(command)[1:]).output
    assert not missing_lines(excerpt, output)
    changed = [excerpt[0].replace("1,684,603,904", "1,684,603,905", 1), *excerpt[1:]]
    assert changed != excerpt and missing_lines(changed, output) == [changed[0]]
    assert missing_lines(list(reversed(excerpt)), output)  # order matters too


def test_readme_python_snippet_prints_what_it_says() -> None:
    blocks = fenced_blocks(README.read_text())
    i = next(i for i, (lang, _) in enumerate(blocks) if lang == "python")
    code, (lang, expected) = blocks[i][1], blocks[i + 1]
    assert lang == "text"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102
    assert out.getvalue() == expected


def test_readme_counts_the_bundled_specs() -> None:
    counts = re.findall(r"(\d+) (?:architectures are bundled|bundled)", README.read_text())
    assert counts and {int(c) for c in counts} == {len(catalog.bundled_names())}
    for page in DOCS.glob("*.md"):
        for n in re.findall(r"(\d+) (?:architectures|bundled (?:specs|models))", page.read_text()):
            assert int(n) == len(catalog.bundled_names()), (page.name, n)


def test_readme_cpu_time_figures_are_the_validation_table() -> None:
    table = (DOCS / "time-cpu.md").read_text()
    found = re.search(r"Calibrated model: median \|error\| ([\d.]+%), worst ([\d.]+%)", table)
    assert found is not None
    median, worst = found.groups()
    assert f"median |error| of {median}, worst {worst}" in README.read_text()


def test_docs_cli_is_generated_from_the_commands(request: pytest.FixtureRequest) -> None:
    page = DOCS / "cli.md"
    text = render_cli_doc()
    if request.config.getoption("--update-snapshots"):
        page.write_text(text)
    stale = "docs/cli.md is stale: python -m pytest tests/test_readme.py --update-snapshots"
    assert page.read_text() == text, stale


def headings(text: str) -> list[str]:
    body = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [m.group(1).strip() for m in re.finditer(r"^## (.+)$", body, re.M)]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if p.name not in NO_CONTENTS))
def test_docs_page_starts_with_its_contents(page: str) -> None:
    text = (DOCS / page).read_text()
    first_section = text.find("\n## ")
    head = text if first_section < 0 else text[:first_section]
    assert "\nContents\n" in head, f"docs/{page}: no contents list before its first section"
    links = re.findall(r"^- \[.+?\]\(#([^)]+)\)", head, re.M)
    assert links == [anchor(h) for h in headings(text)], f"docs/{page}: contents differ from its sections"


def test_readme_lists_every_docs_page() -> None:
    listed = set(re.findall(r"^- (docs/[\w.-]+\.md)", README.read_text(), re.M))
    assert listed == {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    for line in re.findall(r"^- (\S+): ", README.read_text(), re.M):
        assert (ROOT / line).exists(), line
