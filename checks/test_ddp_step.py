"""A tiny DDP training step on every rank, under the same launcher the job uses."""

from __future__ import annotations

import pytest

from preflight.judge.ddp import judge_ddp_step

DDP_WANTED_S = 90.0


@pytest.mark.distributed
def test_ddp_step(record, launch_worker, ddp_worker_module, strategies):
    """One DDP step on every rank leaves identical parameters"""
    strategies.require("ddp")
    launch = launch_worker(ddp_worker_module, name="ddp", wanted_s=DDP_WANTED_S)
    record(judge_ddp_step(launch))
