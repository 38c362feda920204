"""Shared fixtures: tiny specs written in the tests, and the snapshot-update switch."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-snapshots",
        action="store_true",
        help="rewrite tests/snapshots/*.json from the current code (review the diff before committing)",
    )
