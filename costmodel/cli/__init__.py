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
    last_resort,
    emit,
    render_tables,
    user_errors,
)

#: Every command module, in the order `costmodel --help` lists their commands. Registering a new
#: one (costmodel/cli/x.py, or an old-style costmodel/cli_x.py) is one line here.
COMMANDS = (
    "costmodel.cli.analyze",  # analyze, formula, list
    "costmodel.cli.compare",  # compare, ablate, elements
    "costmodel.cli.hf",  # import-hf
    "costmodel.cli.attention",  # attention, sweep, hardware
    "costmodel.cli.measure",  # measure, calibrate
    "costmodel.cli.inference",  # inference
    "costmodel.cli.memory",  # memory, fit
    "costmodel.cli.train",  # train, plan, serve, clusters
)
for _module in COMMANDS:
    importlib.import_module(_module)


def main() -> None:  # pragma: no cover - the console script
    last_resort(app)


__all__ = ["COMMANDS", "HARDWARE_HELP", "BatchOpt", "Dtype", "DtypeOpt", "EncSeqOpt", "Format", "FormatOpt",
           "HardwareOpt", "PhaseName", "SeqOpt", "SpecArg", "_user_errors", "app", "last_resort", "emit", "main",
           "render_tables", "user_errors"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
