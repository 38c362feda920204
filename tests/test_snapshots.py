"""Formula regression: the JSON of `analyze` for every bundled spec and phase, kept under
tests/snapshots/ and reviewed, so that any change to a number shows up as a diff.

After a deliberate change: python -m pytest tests/test_snapshots.py --update-snapshots
then review `git diff tests/snapshots` before committing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel import analyze
from costmodel.analysis import phases_of
from costmodel.catalog import bundled_paths, load_spec

SNAPSHOTS = Path(__file__).parent / "snapshots"
PATHS = bundled_paths()


def current(path: Path) -> dict:
    spec = load_spec(path)
    return {phase: analyze(spec, phase, batch=1).to_dict() for phase in phases_of(spec)}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_snapshot(path: Path, request: pytest.FixtureRequest) -> None:
    snapshot = SNAPSHOTS / f"{path.stem}.json"
    data = current(path)
    if request.config.getoption("--update-snapshots"):
        SNAPSHOTS.mkdir(exist_ok=True)
        snapshot.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    assert snapshot.exists(), f"no snapshot for {path.stem}: run with --update-snapshots and review it"
    assert json.loads(snapshot.read_text()) == json.loads(json.dumps(data)), (
        f"{path.stem}: numbers changed; if deliberate, rerun with --update-snapshots and review the diff"
    )


def test_no_stale_snapshots() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.json")} <= {p.stem for p in PATHS}
