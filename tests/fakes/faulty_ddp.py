"""Test-only pytest plugin (``-p tests.fakes.faulty_ddp``): the DDP check runs a worker with an
injected fault (``PREFLIGHT_TEST_FAULT=hang:1``). It never ships with preflight."""

from __future__ import annotations

import pytest


class _FaultyWorker:
    @pytest.fixture(scope="session")
    @classmethod
    def ddp_worker_module(cls) -> str:
        """Replace the real DDP worker with the faulty one."""
        return "tests.workers.faulty"


def pytest_configure(config: pytest.Config) -> None:
    # Registered after preflight's plugin, so this fixture definition wins.
    config.pluginmanager.register(_FaultyWorker(), "preflight-test-faulty-ddp")
