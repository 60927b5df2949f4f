"""Test-only pytest plugin (``-p tests.fakes.planted_phase``): the rehearsal's FSDP phase leaks planted
secrets into the rank logs and error files (``tests.workers.planted:leak``), through the hook preflight
declares for replacing a phase; the DDP phase before it stays the real one, so one launch shows both a
real step's logs and a leaking phase's. Never shipped."""

from __future__ import annotations

import dataclasses

import pytest

from preflight.launch.plan import Phase


def pytest_preflight_phase(config: pytest.Config, phase: Phase) -> Phase | None:
    """The FSDP phase made to print and raise planted secrets; every other phase unchanged."""
    return dataclasses.replace(phase, entry="tests.workers.planted:leak") if phase.name == "fsdp" else None
