"""The job's own strategy: a few FSDP2 or ZeRO steps and a checkpoint round trip on every rank."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from preflight.judge.op_build import judge_op_build
from preflight.judge.strategies import judge_strategy
from preflight.launch.outcome import PhaseResult
from preflight.outcome import skip
from preflight.probe.deepspeed_ops import OpBuild
from preflight.recording import Recorder


@pytest.mark.distributed
@pytest.mark.rehearsal("deepspeed_ops")  # ordered after the sweep and FSDP: waiting for the build holds the run
def test_deepspeed_ops(record: Recorder, zero_selection: str | None, deepspeed_ops: Callable[[], OpBuild]) -> None:
    """Does DeepSpeed build the ops the ZeRO rehearsal loads?

    Beside the launch, in preflight's own cache."""
    record(skip(zero_selection) if zero_selection else judge_op_build(deepspeed_ops()))


@pytest.mark.distributed
@pytest.mark.rehearsal(param="strategy")
@pytest.mark.parametrize("strategy", ["fsdp", "zero1", "zero2", "zero3"])
def test_strategy_step(record: Recorder, strategy: str, strategy_rehearsal: PhaseResult) -> None:
    """Do a few training steps and a checkpoint round trip work with the job's strategy?"""
    record(judge_strategy(strategy_rehearsal, strategy))
