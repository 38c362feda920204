"""Profiles found by name or by path: the hardware (specs/hardware/) and cluster
(specs/clusters/) YAML files, bundled with the package or in a user folder.

One loader for both kinds: the file is read as every input is (``costmodel.loading``: regular
files only, bounded size, UTF-8, duplicate keys refused), validated into its pydantic model once,
and every problem reported on its own line naming the field.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from costmodel.loading import LoadError, load_yaml, read_text, yaml_error
from costmodel.spec import SpecError

M = TypeVar("M", bound=BaseModel)


def _key(name: str) -> str:
    """How names are compared: case, spaces, dashes and underscores do not matter."""
    return re.sub(r"[\s_-]+", "", name.lower())


@dataclass(frozen=True)
class Profiles:
    """One kind of profile: `kind` names it in messages, `folder` under specs/ holds the bundled
    ones, `env` names the variable of the user folder (default ~/.config/costmodel/<folder>)."""

    kind: str
    folder: str
    env: str

    def bundled_dir(self) -> Path:
        from costmodel.catalog import specs_dir

        return specs_dir() / self.folder

    def user_dir(self) -> Path:
        return Path(os.environ.get(self.env, Path.home() / ".config" / "costmodel" / self.folder))

    def paths(self) -> dict[str, Path]:
        """name -> file, bundled first; a user profile of the same name takes precedence."""
        found: dict[str, Path] = {}
        for folder in (self.bundled_dir(), self.user_dir()):
            if folder.is_dir():
                for path in sorted(folder.glob("*.yaml")):
                    found[path.stem] = path
        return found

    def find(self, name: str) -> Path:
        """The file of a name: exact, else the one name equal up to case and dashes
        (``H100-SXM``, ``h100_sxm``), else the one name it starts (``h100`` -> ``h100-sxm``)."""
        paths = self.paths()
        if name in paths:
            return paths[name]
        key = _key(name)
        same = [n for n in paths if _key(n) == key]
        if len(same) == 1:
            return paths[same[0]]
        prefixed = [n for n in paths if key and _key(n).startswith(key)]
        if len(prefixed) == 1:
            return paths[prefixed[0]]
        shown = name if len(name) <= 60 else name[:57] + "..."
        guesses = prefixed or difflib.get_close_matches(name.lower(), list(paths), n=3)
        hint = f"did you mean {' or '.join(guesses)}? " if guesses else ""
        raise SpecError(f"{self.kind} {shown}: no such file or profile ({hint}known: "
                        f"{', '.join(paths) or 'none'})")

    def load(self, name_or_path: str, model: type[M]) -> M:
        """A profile by file or by name (see ``find``); SpecError, one line per problem."""
        path = Path(name_or_path)
        try:
            exists = path.exists()
        except OSError:  # a name too long for the file system
            exists = False
        if not exists:
            path = self.find(name_or_path)
        try:
            data, _ = load_yaml(read_text(path, f"{self.kind} profile"))
        except LoadError as e:
            raise SpecError(yaml_error(e, str(path)) if str(e)[:1].isdigit() else str(e)) from None
        except yaml.YAMLError as e:
            raise SpecError(yaml_error(e, str(path))) from None
        if not isinstance(data, dict):
            raise SpecError(f"{path}: a {self.kind} profile is a YAML mapping, got {type(data).__name__}")
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise SpecError("\n".join(
                f"{path}: {'.'.join(str(p) for p in err['loc']) or 'profile'}: {err['msg']}"
                for err in e.errors())) from None
