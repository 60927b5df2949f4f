"""Test-only pytest plugin (``-p tests.fakes.fake_p2p``): the bandwidth checks believe two GPUs are
present and run ``tests.workers.p2p_faulty`` (on gloo) with a small sweep. Never shipped."""

from __future__ import annotations

import pytest

from preflight.fixtures.nccl import SweepPlan

MIB = 1 << 20


class _FakeGpus:
    @pytest.fixture(scope="session")
    @classmethod
    def allreduce_gpu_count(cls) -> int:
        """Pretend two GPUs so the NCCL-only checks run."""
        return 2

    @pytest.fixture(scope="session")
    @classmethod
    def allreduce_worker_module(cls) -> str:
        """The worker whose fault depends on NCCL_P2P_DISABLE."""
        return "tests.workers.p2p_faulty"

    @pytest.fixture(scope="session")
    @classmethod
    def allreduce_plan(cls) -> SweepPlan:
        """Small sizes: the fake slows each call by milliseconds, which must dominate the timing."""
        return SweepPlan((64 * 1024, 256 * 1024, MIB), warmup=1, iters=10, budget_s=10.0, wanted_s=30.0)


def pytest_configure(config: pytest.Config) -> None:
    # Registered after preflight's plugin, so these fixture definitions win.
    config.pluginmanager.register(_FakeGpus(), "preflight-test-fake-p2p")
