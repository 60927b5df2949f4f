"""Test-only pytest plugin (``-p tests.fakes.faulty_ddp``): the rehearsal's DDP phase runs the faulty
DDP step (``PREFLIGHT_TEST_FAULT=hang:1``), through the hook preflight declares for it. Never shipped."""

from __future__ import annotations

import dataclasses

import pytest

from preflight.launch.plan import Phase


def pytest_preflight_phase(config: pytest.Config, phase: Phase) -> Phase | None:
    """The DDP phase with an injected fault; every other phase unchanged."""
    return dataclasses.replace(phase, entry="tests.workers.faulty:run") if phase.name == "ddp" else None
