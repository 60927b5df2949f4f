"""The job's own strategy: a few FSDP2 or ZeRO steps and a checkpoint round trip on every rank."""

from __future__ import annotations

import pytest

from preflight.judge.strategies import judge_strategy
from preflight.launch.outcome import PhaseResult
from preflight.recording import Recorder


@pytest.mark.distributed
@pytest.mark.rehearsal(param="strategy")
@pytest.mark.parametrize("strategy", ["fsdp", "zero1", "zero2", "zero3"])
def test_strategy_step(record: Recorder, strategy: str, strategy_rehearsal: PhaseResult) -> None:
    """A few training steps and a checkpoint round trip with the job's strategy"""
    record(judge_strategy(strategy_rehearsal, strategy))
