"""A property test over every command and every option (issue 23, "Done when").

For each command of the app (read from its click parameters, so a new option is fuzzed without
a change here), hypothesis draws a few options and a value for each from interesting sets (0,
-1, huge integers, 1e400, nan, '', a long string, bundled names, valid values) and runs it.
Every run must:

- end with exit code 0, 1 or 2, never an escaping exception (an internal error);
- on exit 2, write exactly one `error: ...` line to stderr (`warning:` lines aside);
- leave no half-written file behind in the folder its `--plot` / `-o` outputs go to;
- take under 20 s and stay under 2 GB of resident memory.

Fixed seed (`derandomize=True`), a few hundred examples in all. Beside tests/test_fuzz.py, which
mutates the specs and configs instead.
"""

from __future__ import annotations

import json
import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from costmodel.cli import app

# Tens of seconds in all: out of the day-to-day `-m "not slow"` run.
pytestmark = pytest.mark.slow

runner = CliRunner()
GROUP = typer.main.get_command(app)
COMMANDS: dict[str, Any] = dict(GROUP.commands)  # type: ignore[attr-defined]
LINE = re.compile(r"^(error|warning): \S.*$")
SECONDS = 20
RSS_BYTES = 2 << 30

#: What each command needs to get past its required inputs (the spec, --hardware, --cluster ...);
#: the fuzzed options come after, so they override these.
BASE: dict[str, list[str]] = {
    "analyze": ["gpt2-small"], "formula": ["gpt2-small"], "list": [], "compare": ["gpt2-small", "llama-3-8b"],
    "ablate": ["gpt2-small", "--set", "n_layers=6"], "elements": ["gpt2-small"],
    "attention": ["gpt2-small", "--seq", "1024"], "sweep": ["gpt2-small"], "hardware": [],
    "measure": ["gpt2-small", "--layers", "1", "--seq", "16"],
    "calibrate": ["--no-tables", "--matmul-size", "16", "--copy-mib", "1", "--repeats", "1"],
    "inference": ["gpt2-small", "--hardware", "l4"], "memory": ["gpt2-small"],
    "fit": ["gpt2-small", "--hardware", "l4"],
    "train": ["gpt2-small", "--cluster", "dgx-h100", "--gpus", "8", "-G", "8"],
    "plan": ["gpt2-small", "--cluster", "dgx-h100", "--gpus", "8", "-G", "8"],
    "serve": ["llama-3-8b", "--cluster", "dgx-h100"], "clusters": [],
    "deploy": ["llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--batch", "16,64"],
    "report": ["gpt2-small", "-o", "{dir}/r.html"],
}
#: import-hf reads a config file: one written into the run's folder (``{dir}``).
CONFIG = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
          "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512}
BASE["import-hf"] = ["{dir}/config.json"]

NUMBERS = ["0", "-1", "1", "2", "8", "64", "3", "2048", str(2**31), str(2**63), "1" + "0" * 20, "1e400",
           "nan", "inf", "-inf", "0.5", "1e-300"]
TEXT = ["", "x" * 300, "1,8,64", "0,1", "a,b", "gpt2-small", "llama-3-8b", "h100-sxm", "l4", "dgx-h100",
        "local", "layers/attention", "seq=512:2048", "batch=1,8", "n_layers=4", "d_model=null", "train",
        "decode", "bf16", "fp8", "int4", "none", "full", "selective", "-", "{dir}/missing/x.png"]
#: Values of options that name a file the command writes: into the run's folder, or nowhere.
OUT_PATHS = ["{dir}/out.png", "{dir}/out.svg", "{dir}/out.yaml", "{dir}/out.html", "{dir}/out",
             "{dir}/missing/out.png", ""]
FILE_OPTIONS = {"--plot", "--output", "-o"}


def known(command: str, args: list[str]) -> str | None:
    """Cases left out, each named: only `calibrate --tables`, about 50 s of measuring (time, not
    a bug). The crashes and hangs issue 23 listed (plan --cp 0, huge -G, train --tokens inf,
    --plot paths, calibrate bounds, ablate --set, huge integers and --batch lists) are fixed and
    drawn like any other value."""
    if command == "calibrate" and "--tables" in args:
        return "calibrate --tables (about 50 s of measuring: time, not a bug)"
    return None


SKIPPED: list[tuple[str, str | None]] = []  # the known cases drawn and left out, for a report


def options(command: str) -> list[Any]:
    return [p for p in COMMANDS[command].params
            if getattr(p, "param_type_name", "") == "option" and p.name != "help"
            and not getattr(p, "hidden", False)]


def choices(p: Any) -> list[str]:
    found = getattr(getattr(p, "type_descriptor", None), "choices", None) or []
    return [str(getattr(c, "value", c)) for c in found]


@st.composite
def invocation(draw: Any, command: str) -> list[str]:
    args = list(BASE[command])
    opts = options(command)
    for p in draw(st.lists(st.sampled_from(opts), max_size=3, unique_by=lambda p: p.name)) if opts else []:
        name = draw(st.sampled_from([*p.opts, *getattr(p, "secondary_opts", [])]))
        if p.is_flag:
            args.append(name)
            continue
        if set(p.opts) & FILE_OPTIONS:
            value = draw(st.sampled_from(OUT_PATHS))
        else:
            pool = choices(p) + NUMBERS + TEXT
            value = draw(st.one_of(st.sampled_from(pool), st.integers(-2, 2**64).map(str)))
        args += [name, value]
    return args


def settle(folder: Path, spec_files: bool) -> list[str]:
    """Files in `folder` that are half-written: empty, or not what their name says (`spec_files`:
    each is a spec, YAML, whatever its name, as import-hf writes it)."""
    bad = []
    for f in folder.rglob("*"):
        if not f.is_file() or f.name == "config.json":
            continue
        data = f.read_bytes()
        if not data:
            bad.append(f"{f.name}: empty")
        elif spec_files:
            try:
                yaml.safe_load(data)
            except yaml.YAMLError:
                bad.append(f"{f.name}: not YAML")
        elif f.suffix == ".png" and not (data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")):
            bad.append(f"{f.name}: not a whole PNG")
        elif f.suffix == ".svg" and not data.rstrip().endswith(b"</svg>"):
            bad.append(f"{f.name}: not a whole SVG")
        elif f.suffix == ".html" and not data.rstrip().endswith(b"</html>"):
            bad.append(f"{f.name}: not a whole HTML page")
        elif f.suffix == ".yaml":
            try:
                yaml.safe_load(data)
            except yaml.YAMLError:
                bad.append(f"{f.name}: not YAML")
    return bad


#: Examples per command: a few hundred in all, about a minute on 2 cores. measure builds and runs a
#: PyTorch model (on cpu when --device cpu is drawn): fewer.
EXAMPLES = {"measure": 6, "formula": 6, "plan": 8}  # the slowest commands: fewer draws
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


def test_every_command_is_fuzzed() -> None:
    """A new command gets its base arguments here (BASE), so that it is fuzzed too."""
    assert set(BASE) == set(COMMANDS)


@pytest.fixture(autouse=True)
def _own_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """User profiles (calibrate writes one) go into a folder of the test's own."""
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path / "hardware"))
    monkeypatch.setenv("COSTMODEL_CLUSTER_DIR", str(tmp_path / "clusters"))


@pytest.mark.parametrize("command", sorted(BASE))
def test_any_options_end_in_a_clear_exit(command: str, tmp_path: Path) -> None:
    runs = iter(range(10**6))

    @settings(SETTINGS, max_examples=EXAMPLES.get(command, SETTINGS.max_examples))
    @given(args=invocation(command))
    def check(args: list[str]) -> None:
        folder = tmp_path / f"run{next(runs)}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(CONFIG))
        args = [a.replace("{dir}", str(folder)) for a in args]
        if known(command, args):
            SKIPPED.append((command, known(command, args)))
            return
        start = time.perf_counter()
        result = runner.invoke(app, [command, *args])
        took = time.perf_counter() - start
        shown = f"costmodel {command} {' '.join(args)}"
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            shown, repr(result.exception))
        assert result.exit_code in (0, 1, 2), (shown, result.exit_code, result.output[-2000:])
        if result.exit_code == 2:
            lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
            assert len(lines) == 1 and LINE.match(lines[0]), (shown, result.stderr)
        half = settle(folder, spec_files=command == "import-hf")
        assert not half, (shown, half)
        assert took < SECONDS, (shown, took)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        assert rss < RSS_BYTES, (shown, rss)

    check()
