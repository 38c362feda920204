"""The model types, one ``register(Family(...))`` each. Every module of this package is imported,
in name order (export prefers the earlier of two families that reproduce a spec exactly)."""

from __future__ import annotations

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
