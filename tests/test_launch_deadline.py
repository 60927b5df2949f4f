"""``--launch-timeout`` is the deadline of each distributed launch, as ``--help`` says: it can lengthen
a launch beyond what the check wants (a slow first DeepSpeed step) as well as shorten it."""

from __future__ import annotations

import subprocess
import sys

from preflight.settings import DEFAULT_LAUNCH_S, Settings
from tests.conftest import REPO_ROOT


def _settings(**values: object) -> Settings:
    return Settings.from_options({"timeout": 3600.0, **values})


def test_without_the_option_each_launch_gets_what_it_wants() -> None:
    settings = _settings()
    assert settings.launch_timeout_s is None
    assert settings.launch_deadline_s(90.0) == 90.0 and settings.launch_deadline_s() == DEFAULT_LAUNCH_S


def test_the_option_lengthens_as_well_as_shortens_every_launch() -> None:
    assert _settings(launch_timeout=500.0).launch_deadline_s(120.0) == 500.0
    assert _settings(launch_timeout=30.0).launch_deadline_s(120.0) == 30.0


def test_no_launch_outlives_the_overall_deadline() -> None:
    settings = Settings.from_options({"timeout": 60.0, "launch_timeout": 500.0})
    assert 50.0 < settings.launch_deadline_s(120.0) <= 55.0
    assert Settings.from_options({"timeout": 2.0}).launch_deadline_s(120.0) == 1.0


def test_help_says_what_the_option_does() -> None:
    result = subprocess.run([sys.executable, "-m", "preflight", "--help"], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    text = " ".join(result.stdout.split())
    assert "deadline for each distributed launch in seconds (default: what each launch needs" in text
    assert "--op-build-timeout" in text
