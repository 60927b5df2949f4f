"""The job's own strategy: a few FSDP2 or ZeRO steps and a checkpoint round trip on every rank."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.fixtures.distributed import LaunchWorker
from preflight.fixtures.strategies import StrategySelection
from preflight.judge.strategies import judge_strategy
from preflight.outcome import skip
from preflight.recording import Recorder
from preflight.settings import Settings

STRATEGY_WANTED_S = 120.0
QUICK_STEPS = 3
FULL_STEPS = 5


def worker_args(strategy: str, steps: int, checkpoint_dir: Path) -> list[str]:
    """The worker's command line: steps, checkpoint directory, and the ZeRO stage."""
    args = ["--steps", str(steps), "--checkpoint-dir", str(checkpoint_dir)]
    return args + ["--stage", strategy.removeprefix("zero")] if strategy.startswith("zero") else args


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["fsdp", "zero1", "zero2", "zero3"])
def test_strategy_step(
    record: Recorder, settings: Settings, strategy: str, strategies: StrategySelection,
    strategy_blocker: Callable[[str], str | None], strategy_workers: dict[str, str], launch_worker: LaunchWorker,
) -> None:
    """A few training steps and a checkpoint round trip with the job's strategy"""
    strategies.require(strategy)
    reason = strategy_blocker(strategy)
    if reason is not None:
        record(skip(reason))
        return
    steps = QUICK_STEPS if settings.quick else FULL_STEPS
    with tempfile.TemporaryDirectory(prefix=f"preflight-{strategy}-checkpoint-") as scratch:
        launch = launch_worker(strategy_workers[strategy], name=strategy, wanted_s=STRATEGY_WANTED_S,
                               args=worker_args(strategy, steps, Path(scratch) / "checkpoint"))
    record(judge_strategy(launch, strategy))
