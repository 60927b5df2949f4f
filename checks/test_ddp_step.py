"""A tiny DDP training step on every rank, under the same launcher the job uses."""

from __future__ import annotations

import pytest

from preflight.judge.ddp import judge_ddp_step
from preflight.launch.outcome import PhaseResult
from preflight.recording import Recorder


@pytest.mark.distributed
@pytest.mark.rehearsal("ddp")
def test_ddp_step(record: Recorder, strategy_rehearsal: PhaseResult) -> None:
    """Does one DDP step leave identical parameters on every rank?"""
    record(judge_ddp_step(strategy_rehearsal))
