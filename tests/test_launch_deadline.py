"""``--launch-timeout`` is the longest any distributed phase may run, as ``--help`` says: it lengthens a
phase's own budget (a slow first DeepSpeed step) as well as shortens it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from preflight.launch.rehearsal_start import capped
from preflight.launch.plan import Phase
from preflight.settings import Settings
from tests.conftest import REPO_ROOT


def _settings(**values: object) -> Settings:
    return Settings.from_options({"timeout": 3600.0, **values})


def test_without_the_option_each_phase_keeps_its_own_budget() -> None:
    settings = _settings()
    assert settings.launch_timeout_s is None and settings.phase_budget_s(90.0) == 90.0
    assert capped(Phase("zero2", "preflight.workers.zero:run", budget_s=120.0), settings).budget_s == 120.0


def test_the_option_lengthens_as_well_as_shortens_every_phase() -> None:
    zero = Phase("zero2", "preflight.workers.zero:run", budget_s=120.0)
    assert capped(zero, _settings(launch_timeout=500.0)).budget_s == 500.0
    assert capped(zero, _settings(launch_timeout=30.0)).budget_s == 30.0


@pytest.mark.e2e  # the real command's --help, in a child preflight
def test_help_says_what_the_option_does() -> None:
    result = subprocess.run([sys.executable, "-m", "preflight", "--help"], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    text = " ".join(result.stdout.split())
    assert "may run before it is called hung, in seconds, longer or shorter than its own budget" in text
    assert "--op-build-timeout" in text
