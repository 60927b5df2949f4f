"""Test-only pytest plugin (``-p tests.fakes.fake_deepspeed``): the ZeRO checks run on gloo CPU
ranks against the DeepSpeed stand-in in tests/fakes/deepspeed_stub (which must be on PYTHONPATH),
so their launch, judging and report run end to end where DeepSpeed itself cannot."""

from __future__ import annotations

from collections.abc import Callable

import pytest


class _FakeDeepSpeed:
    @pytest.fixture(scope="session")
    @classmethod
    def strategy_blocker(cls) -> Callable[[str], str | None]:
        """Nothing blocks a strategy: the stand-in runs ZeRO on CPU ranks."""
        return lambda name: None


def pytest_configure(config: pytest.Config) -> None:
    # Registered after preflight's plugin, so this fixture definition wins.
    config.pluginmanager.register(_FakeDeepSpeed(), "preflight-test-fake-deepspeed")
