"""docs/cli.md, generated from the commands themselves (every option, one line each).

Rewrite it after changing a command: ``python -m pytest tests/test_readme.py --update-snapshots``
(the same switch as the snapshots), then review ``git diff docs/cli.md``.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import typer.main

from costmodel.cli import app

HEADER = """# Commands and options

Every `costmodel` command with its arguments and options, one line each, generated from the
commands themselves (`tests/docs_cli.py`; `tests/test_readme.py` fails when this page and the
commands differ: `python -m pytest tests/test_readme.py --update-snapshots` rewrites it).
`costmodel COMMAND --help` prints the same.

Shared conventions:
- One name per idea in every command (the table below); `costmodel --version` prints the
  version; every command that prints tables takes `--wide` (in a terminal, tables are cut to
  its width by leaving out their least essential columns first, named under the table: each
  table keeps its essential ones, a name and what the command is for, such as `deploy`'s
  latencies and tokens/s or `serve`'s TPOT and fits; piped output is never cut).
- A spec argument is a YAML file, the name of a bundled spec (`costmodel list`), or a Hugging
  Face `config.json` (or a folder holding one; docs/hf.md).
- `--seq` is the prompt length for prefill and train, and the number of tokens already cached
  for decode (which then attends to `seq + 1`). The default is a 2048-token context (or
  `max_seq_len` if shorter) in every phase.
- `--format`/`-f` takes the same four values everywhere: `table` (default), `json`, `markdown`,
  `csv` (see "Output formats" below).
- Exit codes: 0 success; 1 it ran but cannot run as asked, or a check failed (`measure --check`
  found a count that differs from its formula; `plan` found no layout that fits; `train`'s
  layout, every `inference` or `serve` batch size, or `memory --hardware`'s peak does not
  fit): the result is printed in the format asked for and one `error:` line on stderr says
  why; 2 bad input (one `error:` line per problem, naming the file, the field and the problem;
  also a usage error); 3 an internal error (a bug of ours: one `error: internal error` line;
  please report it with the command line and the spec or config it read).
- A GPU time on a device with measured kernel tables (`analyze --hardware`, `inference`,
  `serve`, `train`, `plan`) carries, under its table and in JSON (`errors`, `extrapolated`),
  the error each op class it read showed against other frameworks' measurements
  (`gemm/bf16 median 6% (worst 1.8x) vs sglang ...`; specs/kernels/<gpu>/errors.json) and the op
  classes read past those tables (docs/time.md, "On a GPU: measured kernels"). `sweep
  --quantity time` carries them too (what its largest point read); `sweep --quantity roofline`
  and `attention` print roofline seconds: no table read, no band. `deploy`
  says them once, for the deployments it shows.
"""

#: The option vocabulary: (idea, option). The short flag, the commands that take it and its old
#: names are read from the commands themselves and costmodel.cli.app.ALIASES.
VOCABULARY = (
    ("sequences per pass; a list where a command sweeps it", "--batch"),
    ("tokens per sequence: the prompt (prefill, train, inference), or the tokens already cached "
     "(decode, serve)", "--seq"),
    ("encoder input length", "--enc-seq"),
    ("generated tokens per request", "--output-tokens"),
    ("phase: train, prefill, decode", "--phase"),
    ("element type of weights and activations", "--dtype"),
    ("inference weights and KV cache widths", "--weights-dtype"),
    ("", "--kv-dtype"),
    ("a device profile", "--hardware"),
    ("a cluster profile", "--cluster"),
    ("a component path or prefix", "--component"),
    ("the kernels a time or memory count assumes: eager, flash, fused, megatron-2022", "--kernels"),
    ("latent attention's convention", "--mla"),
    ("parallel sizes", "--tp"),
    ("", "--pp"),
    ("", "--dp"),
    ("", "--cp"),
    ("", "--ep"),
    ("ZeRO stage", "--zero"),
    ("activation recomputation", "--recompute"),
    ("the framework that runs it: a training step (megatron-2021, megatron-2022, megatron-core, "
     "deepspeed), a serving engine (vllm, trtllm)", "--engine"),
    ("what a quantity or formula is of", "--quantity"),
    ("a file the command writes", "--output"),
    ("a chart the command draws", "--plot"),
    ("output format", "--format"),
    ("tables past the terminal's width", "--wide"),
)


def vocabulary() -> str:
    """The vocabulary table, its short flags, commands and old names read from the app."""
    from costmodel.cli.app import ALIASES

    group = typer.main.get_command(app)
    lines = ["## Option vocabulary", "",
             "One name per idea, in every command that takes it; the old names still work for one "
             "release, with a note on stderr.", "",
             "| idea | option | short | commands | old names |", "|---|---|---|---|---|"]
    for idea, name in VOCABULARY:
        users, shorts = [], set()
        for cname, cmd in group.commands.items():  # type: ignore[attr-defined]
            for p in cmd.params:
                opts = [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]
                if name in opts and not getattr(p, "hidden", False):
                    users.append(cname)
                    shorts.update(o for o in opts if len(o) == 2)
        old = sorted({o for cname, table in ALIASES.items() for o, new in table.items()
                      if new.partition("=")[0] == name and cname in users})
        commands = "all that print tables" if name == "--wide" else ", ".join(users)
        lines.append(f"| {idea} | `{name}` | {', '.join(f'`{x}`' for x in sorted(shorts))} | {commands} | "
                     f"{', '.join(f'`{x}`' for x in old)} |")
    return "\n".join(lines) + "\n"


FOOTER = """
## Output formats

JSON has one shape whether or not `--phase` is given: `analyze` and `measure` print
`{"spec": NAME, "phases": {PHASE: {...}, ...}}` (with `--phase`, one entry; `analyze
--hardware` adds `roofline` to each phase, `--convention` a top-level `conventions`).
`analyze`'s CSV is one row per component per phase, raw integers, with every figure its tables
show: with `--hardware` each phase's `total` row carries `compute_s, memory_s, time_s, ridge,
bound`, with `--convention` one `convention/NAME` row per paper follows. Other commands' CSV are
their records (`ablate`: the deltas; `elements`: the swaps; `attention`, `sweep`, `hardware`,
`list`: their rows; `compare`: one line per model; `report`: one line per cell of its page's
tables, with the section, the row, the column and the unit; the others: the records of their
JSON), each cell a number in base units (bytes, seconds, FLOPs; the unit in the column name where
it is not plain), never a rounded cell with a unit. Each command's `--format json` is its result
object's `to_dict()` (`report`'s: each section's `to_dict()`, its table's exact cells and units).

## Examples

    costmodel list                                    # the bundled specs, published vs computed size
    costmodel analyze llama-2-7b                      # all three phases side by side
    costmodel analyze llama-2-7b --phase decode --batch 8 --seq 4096   # where every FLOP and byte goes
    costmodel analyze specs/mistral-7b.yaml -p prefill --format json   # machine-readable
    costmodel formula llama-2-7b --quantity flops_matmul --phase prefill
    costmodel formula llama-2-7b -q kv_cache -p decode --symbolic      # over d, h, k, d_h, L, ...
    costmodel formula gemma-2-9b -q flops -p decode -c layers[local]/attention --latex
    costmodel analyze llama-2-7b --hardware h100-sxm  # + roofline time and bound per phase
    costmodel inference llama-3-8b --hardware h100-sxm --batch 1,8,64   # TTFT, TPOT, tokens/s
    costmodel memory llama-2-7b --zero 3 --dp 8 --hardware h100-sxm   # what a device holds; fits?
    costmodel fit llama-2-7b --hardware h100-sxm      # the largest batch that fits, per phase
    costmodel attention llama-3-8b --batch 16 --seq 8192   # MHA vs GQA vs MQA, windows
    costmodel compare llama-2-7b mistral-7b gemma-2-9b     # side by side, what varies
    costmodel elements llama-2-7b                     # which design elements matter most
    costmodel measure llama-2-7b --check              # formulas against a PyTorch run (needs torch)
    costmodel analyze path/to/config.json             # a Hugging Face config is a spec too
    costmodel train megatron-175b --cluster dgx-a100-80gb --gpus 64 --tp 8 --pp 8 -G 64 --recompute full
    costmodel plan megatron-22b --cluster dgx-a100-80gb --gpus 8 --global-batch 4   # the best layouts
    costmodel serve llama-3.1-405b --cluster dgx-h200 --tp 8 --batch 1,8,64      # decode at scale
"""


def _one_line(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").replace("\b", "")).strip()


def _default(p: Any) -> str:
    d = p.default
    if d is None or d is False or d == "" or (isinstance(d, (list, tuple)) and not d) or callable(d):
        return ""
    if isinstance(d, enum.Enum):
        d = d.value
    return f" (default `{d}`)"


def _param(p: Any) -> str:
    if p.param_type_name == "argument":
        name = p.name.upper() if p.name else "ARG"
        dots = " ..." if p.nargs == -1 else ""
        req = "" if p.required else " (optional)"
        return f"- `{name}{dots}`{req}: {_one_line(getattr(p, 'help', None))}"
    names = ", ".join([*p.opts, *p.secondary_opts])
    if not p.is_flag and not p.count:
        metavar = p.metavar or (p.name or "").upper()
        names += f" {metavar}"
    extra = " (repeatable)" if p.multiple else ""
    return f"- `{names}`{extra}{_default(p)}: {_one_line(p.help)}"


def render() -> str:
    group = typer.main.get_command(app)
    names = list(group.commands)  # type: ignore[attr-defined]
    out = [HEADER, "Contents", ""]
    out += ["- [Option vocabulary](#option-vocabulary)"]
    out += [f"- [`costmodel {n}`](#costmodel-{n})" for n in names]
    out += ["- [Output formats](#output-formats)", "- [Examples](#examples)", "", vocabulary()]
    for name in names:
        cmd = group.commands[name]  # type: ignore[attr-defined]
        help_text = (cmd.help or "").split("\n\n")[0]
        out += [f"## costmodel {name}", "", _one_line(help_text), ""]
        out += [_param(p) for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" + FOOTER
