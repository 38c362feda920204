"""Where specs come from: the bundled specs in specs/, a spec by path or by name, a Hugging Face
config (``costmodel.hf``). ``costmodel.spec`` only parses; this module finds and reads."""

from __future__ import annotations

import sys
from pathlib import Path

from costmodel.loading import LoadError, closest_names, match_name, read_text
from costmodel.spec import Spec, SpecError, parse_spec

# A source checkout keeps the specs beside the package; a wheel carries a copy inside it.
_CANDIDATES = (Path(__file__).resolve().parent.parent / "specs", Path(__file__).resolve().parent / "_specs")


def specs_dir() -> Path:
    for candidate in _CANDIDATES:
        if candidate.is_dir():
            return candidate
    raise SpecError("bundled specs: no specs/ folder found beside the costmodel package")


def bundled_paths() -> list[Path]:
    return sorted(specs_dir().glob("*.yaml"))


def bundled_names() -> list[str]:
    return [p.stem for p in bundled_paths()]


def resolve(name_or_path: str) -> Path:
    """A path to a spec file, or the name of a bundled spec (``llama-2-7b``)."""
    path = Path(name_or_path)
    shown = name_or_path if len(name_or_path) <= 120 else name_or_path[:57] + "..." + name_or_path[-60:]
    try:
        if path.exists():
            return path
    except OSError as e:  # a name longer than the file system allows, ...
        raise SpecError(f"{shown}: {e.strerror or e}") from None
    looks_like_a_name = "/" not in name_or_path and path.suffix not in (".yaml", ".yml", ".json")
    if looks_like_a_name:  # names may hold dots: llama-3.1-405b
        names = bundled_names()
        found = match_name(name_or_path, names)  # exact, case and separators aside; no prefix
        if found is not None:
            return specs_dir() / f"{found}.yaml"
        guesses = closest_names(name_or_path, names)
        hint = f"did you mean {' or '.join(guesses)}? " if guesses else ""
        raise SpecError(f"{shown}: no such file, nor a bundled spec ({hint}see `costmodel list`)")
    raise SpecError(f"{shown}: no such file")


def load_spec(path: str | Path) -> Spec:
    """Read and validate one spec: a YAML file, or the name of a bundled spec (``llama-2-7b``),
    as the CLI takes it; a Hugging Face config.json is read through costmodel.hf. Raises
    SpecError, one line per problem, on bad input."""
    path = resolve(str(path))
    if path.suffix == ".json" or path.is_dir():  # a model folder holds its config.json
        from costmodel import hf

        return hf.load_hf(path)
    try:
        text = read_text(path, "spec")
    except LoadError as e:
        raise SpecError(str(e)) from None
    return parse_spec(text, str(path))


def load(name_or_path: str) -> Spec:
    """A spec file, a bundled spec's name, or a Hugging Face config.json or model folder (see
    costmodel.hf; its warnings, one line each, go to stderr)."""
    path = resolve(name_or_path)
    if path.suffix == ".json" or path.is_dir():  # a model folder holds its config.json
        from costmodel import hf

        return hf.load_hf(path, warn=lambda line: print(line, file=sys.stderr))
    return load_spec(path)
