"""The shape of the code (docs/architecture.md, "The shape of the code"): no function of the
package over 100 lines, and no module over 600 lines unless its docstring says why, on a line
starting "Long because:". A long function is split into its parts; a long module along a seam,
or it gives its reason."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "costmodel"
MAX_FUNCTION = 100
MAX_MODULE = 600
REASON = "Long because:"


def sources() -> list[tuple[Path, str]]:
    found = [(path, path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))]
    assert len(found) > 50, f"{PACKAGE}: the package's modules not found"
    return found


def test_no_function_is_over_100_lines() -> None:
    long = []
    for path, text in sources():
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > MAX_FUNCTION:
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                    long.append(f"{where} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION} lines (split them): " + "; ".join(long)


def test_no_module_is_over_600_lines_without_a_reason() -> None:
    long = []
    for path, text in sources():
        lines = len(text.splitlines())
        if lines <= MAX_MODULE:
            continue
        doc = ast.get_docstring(ast.parse(text, str(path))) or ""
        if not any(line.strip().startswith(REASON) and line.strip() != REASON for line in doc.splitlines()):
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not long, (f"modules over {MAX_MODULE} lines whose docstring has no line starting "
                      f"{REASON!r} (split them, or say why): " + "; ".join(long))

