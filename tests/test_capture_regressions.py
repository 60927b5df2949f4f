"""``preflight nccl-log`` and ``preflight topology`` still answer every shared capture as recorded.

The recorded answers are in ``tests/data/regression/`` (written by ``python -m
tests.capture_regressions``). A deliberate change of an answer is made by re-recording and shows
as a diff of those files in the commit that makes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture_regressions import SUITES, answer, captures, golden_path


def _cases() -> list[tuple[str, str]]:
    found = [(command, name) for command in SUITES for name in captures(command)]
    return found or [("nccl-log", "(shared fixtures absent)")]


@pytest.mark.parametrize(("command", "name"), _cases())
@pytest.mark.parametrize("form", ["text", "json"])
def test_answer_is_unchanged(shared_fixtures: Path, command: str, name: str, form: str) -> None:
    golden = json.loads(golden_path(command).read_text())
    assert name in golden, f"{name} has no recorded answer: run python -m tests.capture_regressions"
    got = answer(command, shared_fixtures / name, name, form == "json")
    assert got == golden[name][form]


def test_every_recorded_capture_still_exists(shared_fixtures: Path) -> None:
    for command in SUITES:
        assert set(json.loads(golden_path(command).read_text())) == set(captures(command, shared_fixtures))
