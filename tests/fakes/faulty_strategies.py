"""Test-only pytest plugin (``-p tests.fakes.faulty_strategies``): the rehearsal's FSDP2 phase runs a
worker with an injected fault (``PREFLIGHT_TEST_FAULT=diverge:1``, see tests/workers/faulty_strategies.py)."""

from __future__ import annotations

import dataclasses

import pytest

from preflight.launch.plan import Phase


def pytest_preflight_phase(config: pytest.Config, phase: Phase) -> Phase | None:
    """The FSDP2 phase with an injected fault; every other phase unchanged."""
    return dataclasses.replace(phase, entry="tests.workers.faulty_strategies:run") if phase.name == "fsdp" else None
