"""The `costmodel` app and what every command shares: the options, the one output format, the
one way to render, and the one way bad input ends. Command modules (costmodel/cli/*.py) import
from here; nothing imports the commands back."""

from __future__ import annotations

import math
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from costmodel.components.mla import Convention

from costmodel.report import tables as report
from costmodel.analysis import AnalysisError, ContextWarning
from costmodel.spec import Spec, SpecError

app = typer.Typer(
    help="Analytical cost model for transformer architectures: parameters, FLOPs, bytes, "
    "arithmetic intensity and KV cache, per component and per phase, from a YAML spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _commands() -> None:
    # A callback keeps `costmodel` a group of commands when the console script has registered one
    # command's module alone (costmodel.cli.modules_for): a typer app with a single command and
    # no callback runs that command as the whole program, and `costmodel inference SPEC` would
    # read "inference" as the spec.
    pass


class PhaseName(str, Enum):
    train = "train"
    prefill = "prefill"
    decode = "decode"


class Dtype(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"
    fp8 = "fp8"


class Format(str, Enum):
    """Every command's output format (docs/cli.md, "Output formats")."""

    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


SpecArg = Annotated[str,
                    typer.Argument(help="A spec file, or the name of a bundled spec (see `costmodel list`).")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", min=1, help="Sequences per pass (B).")]
SeqOpt = Annotated[
    Optional[int],
    typer.Option("--seq", "-s", min=1, help="Prompt length S (prefill, train); cached tokens (decode). "
                 "Default: a 2048-token context (or max_seq_len if shorter): 2048 for prefill and train, "
                 "2047 cached for decode."),
]
EncSeqOpt = Annotated[Optional[int], typer.Option("--enc-seq", min=1,
                                                  help="Encoder input length (encoder-decoder only). "
                                                       "Default: --seq.")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Element type of weights and activations.")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", metavar="FORMAT",
                                           help="Output format: table, json, markdown, csv.")]
HARDWARE_HELP = ("A device profile: a bundled name (a100-80gb, h100-sxm, h200, b200, l4, rtx-4090), `local` "
                 "once `costmodel calibrate` has measured this machine, or a YAML file. See `costmodel "
                 "hardware`.")
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help=HARDWARE_HELP)]
WeightsDtypeOpt = Annotated[Optional[str], typer.Option(
    "--weights-dtype", help="Inference weights: fp32, bf16, fp16, fp8, int8, int4 (int8/int4: weight-only "
    "quantisation of the linear layers, an fp16 scale per --group-size weights, the LM head left at "
    "--dtype). "
    "Default: --dtype.")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype",
                                                   help="KV cache dtype (fp32, bf16, fp16, fp8). Default: "
                                                        "--dtype.")]
GroupSizeOpt = Annotated[int, typer.Option("--group-size", help="Weights per int8/int4 quantisation scale.")]
MlaOpt = Annotated[Convention, typer.Option(
    "--mla", help="How latent attention (MLA) runs: naive (the cached latent re-expanded every step, "
    "as transformers does) or absorbed (W_UK and W_UV folded into query and output, as DeepSeek's kernels "
    "do).")]


@contextmanager
def _user_errors() -> Iterator[None]:
    """Bad input ends in one line per problem on stderr and exit code 2, never a traceback;
    warnings (RoPE past its trained context) are one line each, said once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ContextWarning)
        try:
            yield
        except (SpecError, AnalysisError) as e:
            for line in str(e).splitlines() or [""]:
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(2) from None
        finally:
            for text in dict.fromkeys(str(w.message) for w in caught if w.category is ContextWarning):
                typer.echo(f"warning: {text}", err=True)


def check_number(option: str, value: float | None, most: float, least: float = 0.0) -> None:
    """An option's number is finite, above `least` and at most `most`, or bad input in one line
    (``--tokens nan``, ``--tokens 1e400``, which the option parser reads as inf, ``--tokens -5``)."""
    if value is None:
        return
    if not math.isfinite(value) or not least < value <= most:
        raise AnalysisError(f"{option}: must be a finite number above {least:g} and at most {most:g} "
                            f"(got {value:g})")


def last_resort(run: Callable[[], object]) -> None:
    """Anything that escapes the commands is a bug of ours: one line saying so, exit code 3."""
    try:
        run()
    except Exception as e:  # noqa: BLE001 - the edge of the program
        text = " ".join(str(e).split())
        text = text if len(text) <= 200 else text[:200] + "..."
        sys.stderr.write(f"error: internal error, a bug in costmodel ({type(e).__name__}: {text}); "
                         "please report it with the command that caused it (README, \"Reporting a bug\")\n")
        sys.exit(3)


user_errors = _user_errors


def _width() -> int:
    """The terminal's width; piped output gets 160 columns, as ``report.render_rich`` uses."""
    return max(80, shutil.get_terminal_size((160, 24)).columns) if sys.stdout.isatty() else 160


def emit(
    fmt: Format,
    tables: Sequence[report.Table] | Callable[[], Sequence[report.Table]],
    data: Any | Callable[[], Any],
    header: str | Spec | None = None,
    csv: str | Callable[[], str] | None = None,
    page: bool = False,
) -> None:
    """Print a command's result in `fmt`: its JSON `data`, its `csv` (default: every cell of every
    table, ``report.render_tables_csv``), or its `tables` as markdown or rich text under `header`
    (a spec: its name and description). Each may be given as a function, called only if needed."""

    def get(x: Any) -> Any:
        return x() if callable(x) else x

    if fmt is Format.json:
        typer.echo(report.render_json(get(data)))
        return
    if fmt is Format.csv:
        typer.echo(get(csv) if csv is not None else report.render_tables_csv(get(tables)), nl=False)
        return
    shown = list(get(tables))
    if fmt is Format.markdown:
        title = f"{header.name}: {report.describe(header)}" if isinstance(header, Spec) else header
        typer.echo(report.render_markdown(shown, f"## {title}" if title else None))
        return
    if page:
        from costmodel.report import compare as compare_report

        shown = [p for t in shown for p in compare_report.pages(t, _width())]
    rich = report.rich_header(header) if isinstance(header,
                                                    Spec) else (f"[bold]{header}[/bold]" if header else None)
    report.render_rich(shown, rich)


def render_tables(tables: list[report.Table], fmt: Format, spec: Spec | None = None) -> None:
    """Markdown or rich tables, under a line describing `spec` when given (``emit`` for tables)."""
    emit(fmt, tables, None, spec)
