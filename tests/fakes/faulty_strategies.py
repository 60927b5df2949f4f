"""Test-only pytest plugin (``-p tests.fakes.faulty_strategies``): the FSDP2 check runs a worker with
an injected fault (``PREFLIGHT_TEST_FAULT=diverge:1``, see tests/workers/faulty_strategies.py)."""

from __future__ import annotations

import pytest


class _FaultyStrategyWorkers:
    @pytest.fixture(scope="session")
    @classmethod
    def strategy_workers(cls) -> dict[str, str]:
        """The real workers, except FSDP2 which gets the faulty one."""
        from preflight.fixtures.strategies import ZERO_STRATEGIES

        return {"fsdp": "tests.workers.faulty_strategies", **{n: "preflight.workers.zero" for n in ZERO_STRATEGIES}}


def pytest_configure(config: pytest.Config) -> None:
    # Registered after preflight's plugin, so this fixture definition wins.
    config.pluginmanager.register(_FaultyStrategyWorkers(), "preflight-test-faulty-strategies")
