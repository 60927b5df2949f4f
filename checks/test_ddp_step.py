"""A tiny DDP training step on every rank, under the same launcher the job uses."""

from __future__ import annotations

import pytest

from preflight.fixtures.distributed import LaunchWorker
from preflight.fixtures.strategies import StrategySelection
from preflight.judge.ddp import judge_ddp_step
from preflight.recording import Recorder

DDP_WANTED_S = 90.0


@pytest.mark.distributed
def test_ddp_step(
    record: Recorder, launch_worker: LaunchWorker, ddp_worker_module: str, strategies: StrategySelection
) -> None:
    """One DDP step on every rank leaves identical parameters"""
    strategies.require("ddp")
    launch = launch_worker(ddp_worker_module, name="ddp", wanted_s=DDP_WANTED_S)
    record(judge_ddp_step(launch))
