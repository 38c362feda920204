"""`costmodel import-hf`: a spec from a Hugging Face config.json (see costmodel/hf/)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from costmodel import hf
from costmodel.cli.app import _user_errors, app
from costmodel.report import tables as report
from costmodel.spec import SpecError, parse_spec


class SpecFormat(str, Enum):
    """How the imported spec itself is written (not a report, so not ``Format``)."""

    yaml = "yaml"
    json = "json"


@app.command("import-hf")
def import_hf_cmd(
    config: Annotated[Path,
                      typer.Argument(help="A Hugging Face config.json, or a model folder holding one.")],
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write the spec here (YAML). Default: print it.")] = None,
    name: Annotated[Optional[str], typer.Option("--name",
                                                help="The spec's name. Default: the model's hub name, or the "
                                                     "config's folder.")] = None,
    fmt: Annotated[SpecFormat, typer.Option(
        "--format", "-f", help="Print the spec as YAML or as JSON fields.")] = SpecFormat.yaml,
) -> None:
    """A spec from a config.json (no network, no transformers): every cost-changing field mapped,
    or one line naming the fields this tool cannot express; unknown fields are ignored with a warning."""
    with _user_errors():
        data = hf.read_config(config)
        imported = hf.spec_fields_from_hf(data, str(config), name)
        fields = imported.fields
        text = hf.to_yaml(fields)
        parse_spec(text, str(output or config))  # what is written must load back as it is
        for line in imported.warnings:
            typer.echo(line, err=True)
        if output is not None:
            try:
                output.write_text(f"# Imported by `costmodel import-hf` from {config}.\n{text}")
            except OSError as e:
                raise SpecError(f"{output}: -o: cannot write: {e.strerror or e}") from None
    if output is not None:
        typer.echo(f"wrote {output}", err=True)
    elif fmt is SpecFormat.json:
        typer.echo(report.render_json(fields))
    else:
        typer.echo(text, nl=False)
