"""Profiles found by name or by path: the hardware (specs/hardware/) and cluster
(specs/clusters/) YAML files, bundled with the package or in a user folder.

One loader for both kinds: the file is read as every input is (``costmodel.loading``: regular
files only, bounded size, UTF-8, duplicate keys refused), validated into its pydantic model once,
and every problem reported on its own line naming the field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from costmodel.loading import LoadError, closest_names, load_yaml, match_name, read_text, yaml_error
from costmodel.spec import SpecError

M = TypeVar("M", bound=BaseModel)


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

    def writable_dir(self) -> Path:
        """The user folder, checked before anything is measured into it: a file there (the
        variable pointing at one) is bad input, not an error after minutes of calibrating."""
        folder = self.user_dir()
        if folder.exists() and not folder.is_dir():
            raise SpecError(f"{self.env}: {str(folder)[:120]} is not a folder")
        return folder

    def paths(self) -> dict[str, Path]:
        """name -> file, bundled first; a user profile of the same name takes precedence."""
        found: dict[str, Path] = {}
        for folder in (self.bundled_dir(), self.user_dir()):
            if folder.is_dir():
                for path in sorted(folder.glob("*.yaml")):
                    found[path.stem] = path
        return found

    def find(self, name: str) -> Path:
        """The file of a name: exact, or equal up to case and separators (``H100-SXM``,
        ``h100_sxm``: ``loading.match_name``); anything else, a prefix (``h1``) included, is
        refused naming the closest names."""
        paths = self.paths()
        found = match_name(name, list(paths))
        if found is not None:
            return paths[found]
        shown = name if len(name) <= 60 else name[:57] + "..."
        guesses = closest_names(name, list(paths))
        hint = f"did you mean {' or '.join(guesses)}? " if guesses else ""
        raise SpecError(f"{self.kind} {shown}: no such file or profile ({hint}known: "
                        f"{', '.join(paths) or 'none'})")

    def locate(self, name_or_path: str) -> Path:
        """The file of a path that exists, else of a name (see ``find``)."""
        path = Path(name_or_path)
        try:
            exists = path.exists()
        except OSError:  # a name too long for the file system
            exists = False
        return path if exists else self.find(name_or_path)

    def load(self, name_or_path: str, model: type[M]) -> M:
        """A profile by file or by name (see ``find``); SpecError, one line per problem."""
        path = self.locate(name_or_path)
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
