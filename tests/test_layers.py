"""The layers of docs/architecture.md, as a contract: every module imports only from its own
layer or those below it (at the top of the file, inside functions, under TYPE_CHECKING, relative
or absolute alike), no two modules import each other through any chain, and the bottom layer
loads nothing above it. Optional heavy libraries (torch, transformers, vl-convert) may be
imported lazily anywhere: only imports of costmodel's own modules are checked."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "costmodel"

#: Bottom to top. A module belongs to the first layer with an entry equal to its name or naming
#: a package above it ("costmodel.hf" holds costmodel.hf.families.llama).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("costmodel.errors", "costmodel.loading", "costmodel.units", "costmodel.cost",
              "costmodel.symbols")),
    ("spec", ("costmodel.spec", "costmodel.precision", "costmodel.phases")),
    ("model", ("costmodel.components", "costmodel.model")),
    ("analysis", ("costmodel.analysis",)),
    ("inputs and devices", ("costmodel.hf", "costmodel.catalog", "costmodel.devices")),
    ("runtime", ("costmodel.runtime",)),
    ("studies", ("costmodel.studies",)),
    ("scale-out and measurement", ("costmodel.parallel", "costmodel.measure", "costmodel.deploy")),
    ("report", ("costmodel.report",)),
    ("cli", ("costmodel.cli", "costmodel.__main__")),
    ("api", ("costmodel",)),  # the package's own __init__: its public names, imported lazily
)
BASE = LAYERS[0][1]


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__.py)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    for rank, (_, names) in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names if n != "costmodel"):
            return rank
    if module == "costmodel":
        return len(LAYERS) - 1
    raise AssertionError(f"{module}: in no layer of tests/test_layers.py's LAYERS; give it one")


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, costmodel module) for every import statement anywhere in the file."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x, from ..spec import Spec
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # from costmodel import analysis: a module; from costmodel.spec import Spec: its module
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            if target == "costmodel" or target.startswith("costmodel."):
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != module:
                    out.append((node.lineno, target))
    return out


def graph() -> dict[str, list[tuple[int, str]]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    known = modules()
    upward = []
    for module, edges in graph().items():
        for line, target in edges:
            if layer_of(target) > layer_of(module):
                upward.append(f"{known[module].relative_to(PACKAGE.parent)}:{line}: {module} "
                              f"({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]}, above)")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    """No chain of imports (in functions too) leads from a module back to itself."""
    edges = {m: sorted({t for _, t in e}) for m, e in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _loaded(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in sys.modules if m.startswith('costmodel')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", BASE)
def test_a_bottom_module_loads_only_the_bottom(module: str) -> None:
    """``import costmodel.units`` runs the package's __init__ (which imports nothing up front)
    and the module: a handful of modules, not the 27 it once dragged in."""
    assert _loaded(f"import {module}") <= {"costmodel", *BASE}


def test_the_analysis_loads_no_device_and_no_study() -> None:
    """``Analysis`` knows no hardware and no time model: importing it loads the core alone."""
    loaded = _loaded("import costmodel.analysis") - {"costmodel"}
    above = sorted(m for m in loaded if layer_of(m) > layer_of("costmodel.analysis"))
    assert "costmodel.analysis" in loaded and not above, above
