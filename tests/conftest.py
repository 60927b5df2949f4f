"""Shared helpers for the project's own tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = Path(__file__).resolve().parent / "data"


def shared_fixtures_dir() -> Path:
    """Where the captured real outputs live: ``../shared/fixtures`` next to the checkout."""
    override = os.environ.get("PREFLIGHT_SHARED_FIXTURES")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """Path to ``../shared/fixtures``; skips the test cleanly when it is absent."""
    path = shared_fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"shared fixtures not found at {path}")
    return path


@pytest.fixture(scope="session")
def test_data() -> Path:
    """Path to ``tests/data`` (fixtures written for this project)."""
    return TEST_DATA
