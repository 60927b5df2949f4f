"""The job's own strategy: a few FSDP2 or ZeRO steps and a checkpoint round trip on every rank."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight.fixtures.distributed import LaunchWorker
from preflight.fixtures.strategies import StrategySelection
from preflight.judge.op_build import judge_op_build, op_build_blocker
from preflight.judge.strategies import TITLES, ZERO_STRATEGIES, judge_strategy
from preflight.outcome import skip
from preflight.probe.deepspeed_ops import OpBuild
from preflight.recording import Recorder
from preflight.settings import Settings

STRATEGY_WANTED_S = 120.0
QUICK_STEPS = 3
FULL_STEPS = 5


def worker_args(strategy: str, steps: int, checkpoint_dir: Path) -> list[str]:
    """The worker's command line: steps, checkpoint directory, and the ZeRO stage."""
    args = ["--steps", str(steps), "--checkpoint-dir", str(checkpoint_dir)]
    return args + ["--stage", strategy.removeprefix("zero")] if strategy.startswith("zero") else args


def test_deepspeed_ops(
    record: Recorder, strategies: StrategySelection, strategy_blocker: Callable[[str], str | None],
    deepspeed_ops: Callable[[], OpBuild],
) -> None:
    """DeepSpeed builds the ops the ZeRO rehearsal loads (ahead of its launch, in preflight's own cache)"""
    wanted = [name for name in ZERO_STRATEGIES if name in strategies and strategy_blocker(name) is None]
    if not wanted:
        reasons = [strategy_blocker(name) for name in ZERO_STRATEGIES if name in strategies]
        record(skip(next((r for r in reasons if r), "no ZeRO strategy selected (--strategy zero1,zero2,zero3)")))
        return
    record(judge_op_build(deepspeed_ops()))


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["fsdp", "zero1", "zero2", "zero3"])
def test_strategy_step(
    record: Recorder, settings: Settings, strategy: str, strategies: StrategySelection,
    strategy_blocker: Callable[[str], str | None], strategy_workers: dict[str, str], launch_worker: LaunchWorker,
    deepspeed_ops: Callable[[], OpBuild],
) -> None:
    """A few training steps and a checkpoint round trip with the job's strategy"""
    strategies.require(strategy)
    reason = strategy_blocker(strategy)
    env: dict[str, str | None] = {}
    if reason is None and strategy in ZERO_STRATEGIES:
        ops = deepspeed_ops()  # built ahead of the launch, with its own budget; the ranks only load them
        reason = op_build_blocker(ops, TITLES[strategy])
        env.update(ops.launch_env())
    if reason is not None:
        record(skip(reason))
        return
    steps = QUICK_STEPS if settings.quick else FULL_STEPS
    with tempfile.TemporaryDirectory(prefix=f"preflight-{strategy}-checkpoint-") as scratch:
        launch = launch_worker(strategy_workers[strategy], name=strategy, wanted_s=STRATEGY_WANTED_S, env=env,
                               args=worker_args(strategy, steps, Path(scratch) / "checkpoint"))
    record(judge_strategy(launch, strategy))
