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
import typer.main
from typer.core import TyperGroup

from costmodel.analysis import AnalysisError, ContextWarning
from costmodel.components.mla import Convention
from costmodel.report import tables as report
from costmodel.spec import Spec, SpecError

#: Old option names, kept working for one release (hidden from --help, a deprecation note on
#: stderr): command -> {old name: new name}; "" for a flag that was the default anyway (dropped).
#: docs/cli.md's vocabulary table lists them
#: (tests/docs_cli.py).
#: A new name may carry its value (``--kernels=flash``): the old flag was one of its values.
ALIASES: dict[str, dict[str, str]] = {
    "inference": {"--prompt": "--seq", "--output": "--output-tokens", "--flash-attention": "--kernels=flash",
                  "--fused": "--kernels=fused"},
    "serve": {"--context": "--seq", "-c": "--seq"},
    "attention": {"--contexts": "--seq"},
    "memory": {"--flash": "--kernels=flash", "--flash-attention": "--kernels=flash",
               "--no-flash": "--kernels=eager"},
    "fit": {"--flash": "--kernels=flash", "--flash-attention": "--kernels=flash",
            "--no-flash": "--kernels=eager"},
}

WIDE_HELP = ("Tables at their full width, every column, even past the terminal's edge. Default: in a "
             "terminal, tables as wide as it (the columns left out named under the table); piped "
             "output is never cut.")


def _set_wide(ctx: typer.Context, value: bool) -> bool:
    ctx.meta["costmodel.wide"] = bool(value)
    return value


def _wide_option() -> Any:
    """`--wide`, built by typer as any option is (from a declaration), not bound to a parameter."""
    probe = typer.Typer()

    @probe.command()
    def _probe(wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP, callback=_set_wide)] = False
               ) -> None:
        pass

    option = typer.main.get_command(probe).params[0]
    option.expose_value = False
    return option


def renamed(command: str, args: Sequence[str], params: Sequence[Any]) -> list[str]:
    """`args` with the old option names of ALIASES written as the new ones (an option's value,
    and anything after ``--``, left as it is); a note on stderr for each old name used."""
    old = ALIASES.get(command)
    if not old:
        return list(args)
    takes_value = {o for p in params if getattr(p, "param_type_name", "") == "option" and not p.is_flag
                   for o in p.opts}
    out: list[str] = []
    skip = False
    for arg in args:
        if skip or "--" in out or arg == "--":
            skip = False
            out.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and name in old and not old[name]:
            typer.echo(f"warning: {name} is deprecated, and the default", err=True)
            continue
        if arg.startswith("--") and name in old:
            arg = old[name] + eq + value
            typer.echo(f"warning: {name} is deprecated, use {old[name]}", err=True)
        elif not arg.startswith("--") and arg[:2] in old:  # -c, or -c2048
            typer.echo(f"warning: {arg[:2]} is deprecated, use {old[arg[:2]]}", err=True)
            arg = old[arg[:2]] + ("=" + arg[2:] if len(arg) > 2 else "")
        skip = arg in takes_value
        out.append(arg)
    if "--kernels=fused" in out and "--kernels=flash" in out:  # --flash-attention --fused, in either order
        out.remove("--kernels=flash")
    return out


def _usage_line(e: Exception) -> str:
    """A usage error as one line: ``error: --batch: Invalid value: input should be a valid
    integer ...`` (click's words, after the option they are about)."""
    from typer._click import exceptions as ex

    if isinstance(e, ex.NoSuchOption):
        text = f"{e.option_name}: no such option"
        if e.possibilities:
            text += f" (did you mean {', '.join(sorted(e.possibilities))}?)"
    elif isinstance(e, ex.BadParameter) and e.param is not None:
        p = e.param
        option = getattr(p, "param_type_name", "") == "option" and p.opts
        name = p.opts[0] if option else (p.name or "").upper()
        if isinstance(e, ex.MissingParameter):
            text = f"{name}: missing, a required {p.param_type_name}"
        else:
            message = e.message.removeprefix("Value error, ")
            text = f"{name}: Invalid value: {message[:1].lower()}{message[1:]}"
    else:
        text = e.format_message() if isinstance(e, ex.ClickException) else str(e)
        text = text[:1].lower() + text[1:]
    return "error: " + " ".join(text.split())


class CostmodelGroup(TyperGroup):
    """The `costmodel` group: what every command shares beyond its own options (`--wide` for
    those that print tables, the old names of ALIASES), and usage errors (a bad option, a missing
    argument) as one ``error:`` line on stderr and exit code 2 when stderr is not a terminal (a
    terminal keeps typer's box)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for cmd in self.commands.values():
            params = {p.name: p for p in cmd.params}
            fmt = params.get("fmt")
            choices = getattr(getattr(fmt, "type_descriptor", None), "choices", None) or ()
            if fmt is not None and {getattr(c, "value", c) for c in choices} == {f.value for f in Format}:
                cmd.params.insert(cmd.params.index(fmt) + 1, _wide_option())

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and name in ALIASES:
            rest = renamed(name, rest, cmd.params)
        return name, cmd, rest

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        from typer._click import exceptions as ex

        if not standalone_mode or sys.stderr.isatty():
            return super().main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except ex.NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except ex.ClickException as e:
            sys.stderr.write(_usage_line(e) + "\n")
            sys.exit(e.exit_code)
        except typer.Abort:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=CostmodelGroup,
    help="Analytical cost model for transformer architectures: parameters, FLOPs, bytes, "
    "arithmetic intensity and KV cache, per component and per phase, from a YAML spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"costmodel {version('costmodel')}")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree, not installed
            typer.echo("costmodel (not installed)")
        raise typer.Exit()


@app.callback()
def _commands(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="Print the version and exit.")] = False) -> None:
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
HARDWARE_HELP = ("A device profile: a bundled name (a100-80gb, h100-sxm, h200, b200, gb200, l4, rtx-4090, "
                 "mi300x, mi325x, v100-sxm2), `local` once `costmodel calibrate` has measured this machine, "
                 "or a YAML file. See `costmodel hardware`.")
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help=HARDWARE_HELP)]
CLUSTER_HELP = ("A cluster profile: dgx-a100-80gb, dgx-h100, dgx-h200, gb200-nvl72, or a YAML file (see "
                "`costmodel clusters`).")
ClusterOpt = Annotated[str, typer.Option("--cluster", help=CLUSTER_HELP)]
GPUS_HELP = "GPUs in all (N = TP x PP x DP x CP)."
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", help=GPUS_HELP)]
GLOBAL_BATCH_HELP = "Sequences per step."
GlobalBatchOpt = Annotated[int, typer.Option("--global-batch", "-G", help=GLOBAL_BATCH_HELP)]
WeightsDtypeOpt = Annotated[Optional[str], typer.Option(
    "--weights-dtype", help="Inference weights: fp32, bf16, fp16, fp8, fp8-block, nvfp4, int8, int4, mxfp4 "
    "(fp8: as FP8 checkpoints hold them, the linear layers at 1 byte with per-tensor fp32 scales, the LM "
    "head, router and embeddings at 16 bits; fp8-block: as DeepSeek-V3's and Qwen3's FP8 checkpoints, the "
    "same with an fp32 scale per 128 x 128 block of each weight, timed off the fp8_block GEMM and MoE "
    "tables; nvfp4: as NVIDIA's NVFP4 checkpoints, the same layers in 4-bit E2M1 with an E4M3 scale per 16 "
    "and two fp32 scales a tensor, timed off the nvfp4 GEMM and MoE tables (Blackwell); "
    "int8/int4: weight-only quantisation of the linear layers, an fp16 scale "
    "per --group-size weights, the LM head left at --dtype; mxfp4: a mixture of experts' routed experts "
    "alone, 4.25 bits, as gpt-oss's checkpoints). "
    "Default: --dtype.")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype",
                                                   help="KV cache dtype (fp32, bf16, fp16, fp8). Default: "
                                                        "--dtype.")]
GroupSizeOpt = Annotated[int, typer.Option("--group-size", help="Weights per int8/int4 quantisation scale.")]
MLA_HELP = ("How latent attention (MLA) runs: naive (the cached latent re-expanded every step, as "
            "transformers does) or absorbed (W_UK and W_UV folded into query and output, as DeepSeek's "
            "kernels do).")
MlaOpt = Annotated[Convention, typer.Option("--mla", help=MLA_HELP)]
#: --mla where a device chooses the default (costmodel.runtime.kernels.default_mla).
MlaDeviceOpt = Annotated[Optional[Convention], typer.Option(
    "--mla", help=MLA_HELP + " Default: absorbed on a GPU profile, naive otherwise.")]


class KernelsName(str, Enum):
    """``--kernels``: the names of ``costmodel.runtime.kernels.KERNELS`` (tests/test_kernels.py
    holds the two lists equal; written out here so that the app's start-up loads no time model)."""

    eager = "eager"
    flash = "flash"
    fused = "fused"
    megatron_2022 = "megatron-2022"


KERNELS_HELP = ("The kernels assumed: eager (every op its own kernel, attention scores written and kept: "
                "PyTorch eager), flash (fused attention, scores never written or kept, every other op one "
                "kernel: GPU stacks today), fused (flash, and norms and activations fused into the matmuls: "
                "the lower bound), megatron-2022 (Megatron-LM as Korthikanti et al. 2022 ran it: scores "
                "kept, fused softmax and bias-dropout-add). Default: flash on a GPU profile, eager without "
                "one or on a calibrated (torch eager) profile.")
KernelsOpt = Annotated[Optional[KernelsName], typer.Option("--kernels", metavar="KERNELS", help=KERNELS_HELP)]


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


def _terminal() -> int | None:
    """The terminal's columns (at least 40), or None when stdout is not a terminal."""
    return max(40, shutil.get_terminal_size((80, 24)).columns) if sys.stdout.isatty() else None


def _wide() -> bool:
    """`--wide` of the running command."""
    import typer._click.globals as current

    ctx = current.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get("costmodel.wide"))


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
    """Print a command's result in `fmt`: its JSON `data`, its `csv` (default: the records of
    `data`, numbers not cells, ``report.data_csv``), or its `tables` as markdown or rich text
    under `header`
    (a spec: its name and description). Each may be given as a function, called only if needed."""

    def get(x: Any) -> Any:
        return x() if callable(x) else x

    if fmt is Format.json:
        typer.echo(report.render_json(get(data)))
        return
    if fmt is Format.csv:
        typer.echo(get(csv) if csv is not None else report.data_csv(get(data)), nl=False)
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
    report.render_rich(shown, rich, width=_terminal(), wide=_wide())


def render_tables(tables: list[report.Table], fmt: Format, spec: Spec | None = None) -> None:
    """Markdown or rich tables, under a line describing `spec` when given (``emit`` for tables)."""
    emit(fmt, tables, None, spec)
