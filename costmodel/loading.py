"""Reading user files safely: bounded in size, depth and expansion, strict about ambiguity.

Every spec and hardware profile goes through ``read_text`` and ``load_yaml``. They refuse, in
one line (``SpecError``), what would otherwise crash, hang or silently mislead:

- anything but a regular file (a FIFO would block forever, ``/dev/zero`` never ends), files over
  ``MAX_BYTES``, and text that is not UTF-8;
- YAML nested deeper than ``MAX_DEPTH`` (a RecursionError otherwise), aliases that expand past
  ``MAX_NODES`` nodes (a 1 KB "billion laughs" is gigabytes once expanded) or refer to themselves;
- duplicate keys (YAML's loaders silently keep the last one);
- YAML 1.1 integer forms that YAML 1.2 reads differently or not at all: ``011000`` (octal in
  1.1, decimal in 1.2), ``1:30`` (sexagesimal, 90), ``0b101``, ``1_000``; and integers longer than
  ``MAX_DIGITS`` digits (Python refuses to parse those past 4,300 digits anyway).

Ints are read as YAML 1.2's core schema reads them: ``[-+]?[0-9]+``, ``0o17``, ``0x1F``.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 10 * 2**20  # a spec or profile is a few KB; 10 MiB is generous and reads in < 1 s
MAX_DEPTH = 64  # nesting of mappings and sequences
MAX_NODES = 100_000  # nodes after expanding aliases
MAX_DIGITS = 100  # an integer field larger than 10^100 means nothing here


class LoadError(ValueError):
    """A file that cannot be read as a spec or profile; the message is one line."""


def read_text(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of a regular file of at most MAX_BYTES, or LoadError in one line."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise LoadError(f"{_short(path)}: cannot read: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise LoadError(f"{_short(path)}: is a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise LoadError(f"{_short(path)}: not a regular file (a {what} is read from a file)")
    if st.st_size > MAX_BYTES:
        raise LoadError(f"{_short(path)}: {st.st_size:,} bytes; a {what} is at most {MAX_BYTES:,}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise LoadError(f"{_short(path)}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:  # grew since the stat
        raise LoadError(f"{_short(path)}: larger than {MAX_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise LoadError(f"{_short(path)}:{line}: not UTF-8 text (byte {raw[e.start]:#04x} at "
                        f"offset {e.start})") from None


def _short(path: Path) -> str:
    """A path for a message: very long ones are cut (a 300-character name stays one line)."""
    text = str(path)
    return text if len(text) <= 120 else text[:57] + "..." + text[-60:]


# --- YAML -----------------------------------------------------------------------------------

_INT_12 = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT_12 = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no stubs: SafeLoader is Any
    """SafeLoader with the checks above; YAML 1.2 ints, refused 1.1 leftovers."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        depth = getattr(self, "_depth", 0) + 1
        if depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise LoadError(f"{mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        self._depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth - 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = key_node.value
                    if key in seen and key != "<<":
                        raise LoadError(f"{key_node.start_mark.line + 1}: {key}: duplicate key")
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        text = str(self.construct_scalar(node))
        if len(text.lstrip("+-")) > MAX_DIGITS:
            raise LoadError(f"{node.start_mark.line + 1}: an integer of {len(text)} digits; "
                            f"at most {MAX_DIGITS}")
        if text.startswith(("0o", "0x")):
            return int(text, 0)
        if text.lstrip("+-").isdigit():
            return int(text, 10)  # YAML 1.2: 011000 is eleven thousand, not octal
        raise LoadError(f"{node.start_mark.line + 1}: {text!r}: ambiguous number (YAML 1.1 reads "
                        "it as octal, binary, sexagesimal or with underscores); quote it or write "
                        "plain decimal digits")


    def construct_yaml_float(self, node: Any) -> float:
        text = str(self.construct_scalar(node))
        if not _FLOAT_12.fullmatch(text):
            raise LoadError(f"{node.start_mark.line + 1}: {text!r}: ambiguous number (YAML 1.1 "
                            "sexagesimal or underscores); write plain decimal digits")
        return float(super().construct_yaml_float(node))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
# Resolve ints the YAML 1.1 way (so that 1:30, 0b1, 1_000 reach construct_yaml_int and are
# refused rather than read as strings or 90), plus YAML 1.2's 0o17.
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0o[0-7]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)"
               r"|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$"),
    list("-+0123456789"),
)
# YAML 1.2 floats: 66.9e12 and 1e5 are numbers (YAML 1.1 wants a dot and a signed exponent).
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(f"^(?:{_FLOAT_12.pattern})$"),
                              list("-+.0123456789"))


def _distinct_nodes(root: yaml.Node) -> int:
    """The nodes written in the document, each alias's target once: bounded by its bytes."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(x for kv in node.value for x in kv)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return len(seen)


def _count_nodes(root: yaml.Node) -> None:
    """Refuse aliases expanding past MAX_NODES (or the nodes written, if more: a long list
    written out, a 100,000-layer pattern, is bounded by the file's size, not expanded) or
    referring to themselves, before building."""
    memo: dict[int, int] = {}
    active: set[int] = set()
    cap = max(MAX_NODES, _distinct_nodes(root))

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            raise LoadError(f"{node.start_mark.line + 1}: an alias refers to itself")
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > cap:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                total += size(v)
                if total > cap:
                    break
        active.discard(key)
        if total > cap:
            raise LoadError(f"{node.start_mark.line + 1}: expands past {cap:,} nodes "
                            "(aliases nested too deep)")
        memo[key] = total
        return total

    size(root)


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of one YAML document, bounded; None for an empty one."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    if root is not None:
        _count_nodes(root)
    return root


def load_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """The data of one YAML document and its node tree (for line numbers), safely.

    Raises LoadError (bounds, duplicates, ambiguous ints: message starts with the line) or
    yaml.YAMLError (malformed YAML)."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        _count_nodes(root)
        return loader.construct_document(root), root
    finally:
        loader.dispose()


def yaml_error(e: yaml.YAMLError | LoadError, origin: str) -> str:
    """One line for a YAML problem: ``origin:line: problem``."""
    if isinstance(e, LoadError):
        line, _, problem = str(e).partition(": ")
        return f"{origin}:{line}: {problem}" if line.isdigit() else f"{origin}: {e}"
    mark = getattr(e, "problem_mark", None)
    where = f"{origin}:{mark.line + 1}" if mark is not None else origin
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"{where}: malformed YAML: {problem}"


# --- names --------------------------------------------------------------------------------------


def name_key(name: str) -> str:
    """How names (specs, hardware and cluster profiles) are compared: case, spaces, dashes and
    underscores do not matter (``H100_SXM`` is ``h100-sxm``); dots do (``llama-3.1-8b``)."""
    return re.sub(r"[\s_-]+", "", name.lower())


def match_name(name: str, names: list[str]) -> str | None:
    """The one of `names` that `name` is, exactly or up to ``name_key``; None if none is. A
    prefix is not a name: ``h1`` is refused, not read as the one profile that starts so."""
    if name in names:
        return name
    same = [n for n in names if name_key(n) == name_key(name)]
    return same[0] if len(same) == 1 else None


def closest_names(name: str, names: list[str], n: int = 3) -> list[str]:
    """The names nearest to `name`, for a "did you mean" hint: those it starts first, then the
    closest by difflib (up to ``name_key``)."""
    by_key: dict[str, str] = {}
    for known in names:
        by_key.setdefault(name_key(known), known)
    key = name_key(name[:200])
    started = [k for k in by_key if key and k.startswith(key)]
    near = difflib.get_close_matches(key, list(by_key), n=n)
    return [by_key[k] for k in dict.fromkeys(started + near)][:n]
