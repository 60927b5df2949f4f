"""Test-only pytest plugin (``-p tests.fakes.fake_p2p``): the job's torch sees two GPUs (see
tests/fakes/fake_torch.py) and the rehearsal's sweep runs ``tests.workers.p2p_faulty`` (on gloo,
the ranks' real backend here) with small sizes, so the NCCL-only checks run end to end. Never shipped."""

from __future__ import annotations

import dataclasses

import pytest

from preflight.launch.plan import Phase
from preflight.node.transports import Transports
from tests.fakes.fake_torch import cuda_answer, torch_runner

SMALL = ("--sizes", "65536,262144,1048576", "--warmup", "1", "--iters", "10", "--min-iters", "5", "--budget-s", "10")


def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    """The job's torch is a CUDA build that sees two GPUs (a fake NVML machine, when given, decides instead)."""
    if config.getoption("fake_nvml", default=None):
        return None
    return Transports(run=torch_runner(cuda_answer(2)))


def pytest_preflight_phase(config: pytest.Config, phase: Phase) -> Phase | None:
    """The sweep whose fault depends on NCCL_P2P_DISABLE, at sizes where the fake's delay dominates."""
    if phase.name != "allreduce":
        return None
    return dataclasses.replace(phase, entry="tests.workers.p2p_faulty:run", args=SMALL, budget_s=30.0)
