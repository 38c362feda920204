"""The `costmodel` command: parse, call the library, render. No formulas here.

``app`` and what commands share live in ``costmodel.cli.app``; each command group is one module
of this package. A command module is registered by importing it in ``COMMANDS`` below (one
line); the names other modules use (app, SpecArg, BatchOpt, SeqOpt, DtypeOpt, Dtype, Format,
FormatOpt, _user_errors, ...) are re-exported here, so a module written as
``from costmodel.cli import app, SpecArg`` keeps working.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from costmodel.cli.app import (
    HARDWARE_HELP,
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    HardwareOpt,
    PhaseName,
    SeqOpt,
    SpecArg,
    _user_errors,
    app,
    emit,
    last_resort,
    render_tables,
    user_errors,
)

#: Every command module and the commands it registers, in the order `costmodel --help` lists
#: them. Registering a new one (costmodel/cli/x.py) is one entry here; tests/test_cli.py checks
#: that the names are the ones each module registers.
COMMANDS: dict[str, tuple[str, ...]] = {
    "costmodel.cli.analyze": ("analyze", "formula", "list"),
    "costmodel.cli.compare": ("compare", "ablate", "elements"),
    "costmodel.cli.hf": ("import-hf",),
    "costmodel.cli.attention": ("attention", "sweep", "hardware"),
    "costmodel.cli.measure": ("measure", "calibrate"),
    "costmodel.cli.inference": ("inference",),
    "costmodel.cli.memory": ("memory", "fit"),
    "costmodel.cli.train": ("train", "plan", "serve", "clusters"),
    "costmodel.cli.deploy": ("deploy",),
    "costmodel.cli.report": ("report",),
}


def modules_for(argv: list[str]) -> list[str]:
    """The command modules to import for this process. The console script naming one command
    imports that command's module alone (each pulls in the library it needs: `analyze` never
    imports the parallel planner, the HF families or the memory model, about half its start-up
    time); anything else (``--help``, an unknown name, ``from costmodel.cli import app`` in
    Python or a test) imports them all."""
    if not argv or Path(argv[0]).stem != "costmodel":  # costmodel, or costmodel.exe
        return list(COMMANDS)
    first = next((a for a in argv[1:] if not a.startswith("-")), None)
    return [m for m, names in COMMANDS.items() if first in names] or list(COMMANDS)


for _module in modules_for(sys.argv):
    importlib.import_module(_module)


def main() -> None:  # pragma: no cover - the console script
    last_resort(app)


__all__ = ["COMMANDS", "HARDWARE_HELP", "BatchOpt", "Dtype", "DtypeOpt", "EncSeqOpt", "Format", "FormatOpt",
           "HardwareOpt", "PhaseName", "SeqOpt", "SpecArg", "_user_errors", "app", "last_resort", "emit",
           "main",
           "render_tables", "user_errors"]

if __name__ == "__main__":  # pragma: no cover
    main()
