"""The rehearsal launch on real torchrun with gloo ranks: phases in one process group, a broken phase
named by phase and rank, the phases after it relaunched, the run's deadline never called a hang."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from preflight.judge.ddp import judge_launch_failure
from preflight.launch.outcome import LaunchResult, PhaseResult
from preflight.launch.phase_results import OtherResult
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.rehearsal import MIN_LAUNCH_S, Budget, Rehearsal
from preflight.launch.torchrun import overdue_phase, RankProgress
from preflight.outcome import Status
from tests.conftest import REPO_ROOT
from tests.launching import launch_phases

pytestmark = pytest.mark.e2e
COLLECTIVE = "tests.workers.phases:collective"


@pytest.fixture(autouse=True, scope="module")
def _importable_tests() -> Iterator[None]:
    """Ranks must import tests.workers (set for the module: its shared rehearsal starts first)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        yield


def _phases(fault: tuple[str, str] | None = None, at: str = "two", budget_s: float = 60.0,
            names: tuple[str, ...] = ("one", "two", "three")) -> list[Phase]:
    return [Phase(name, COLLECTIVE, fault if (fault and name == at) else (), budget_s=budget_s) for name in names]


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _rank_pids(run_dir: Path) -> list[int]:
    return [json.loads(p.read_text())["pid"] for p in run_dir.glob("rank*.pid")]


FIVE = ("one", "two", "three", "four", "five")


@dataclass(frozen=True, slots=True)
class CrashedRehearsal:
    """A rehearsal of five phases whose phase two crashed on rank 1: the main launch and the relaunch (of
    phases three to five) as the launcher ended them, and the rehearsal's answers for every phase."""

    first: LaunchResult
    relaunch: LaunchResult
    answers: dict[str, PhaseResult]


@pytest.fixture(scope="module")
def crashed_rehearsal(tmp_path_factory: pytest.TempPathFactory) -> CrashedRehearsal:
    """One rehearsal (two launches) for three tests: the crash as the first launch reports it, the relaunch
    of the phases it left unrun, and that relaunch as a clean launch of three phases."""
    plan = LaunchPlan("rehearsal", tuple(_phases(("crash", "1"), names=FIVE)), 2)
    rehearsal = Rehearsal(plan, tmp_path_factory.mktemp("crashed") / "logs", Budget(lambda: 600.0, 600.0))
    rehearsal.start()
    rehearsal.open_gate()
    try:
        answers = {name: rehearsal.phase(name) for name in FIVE}
    finally:
        rehearsal.close()
    first, relaunch = (running.result[0] for running in rehearsal._runs)  # each launch's own result
    return CrashedRehearsal(first, relaunch, answers)


def test_every_phase_runs_in_one_process_group(crashed_rehearsal: CrashedRehearsal) -> None:
    result = crashed_rehearsal.relaunch  # a launch of its own: the three phases the crash left unrun
    assert result.ok, [p.describe() for p in result.phases]
    assert [p.phase for p in result.phases] == ["three", "four", "five"]
    assert all(r.values["sum"] == 1.0 for p in result.phases for r in p.outputs(OtherResult))
    # one launch: one pid per rank for all three phases
    pids = {r.result.device.pid for p in result.phases for r in p.ranks if r.result is not None}
    assert len(_rank_pids(result.run_dir)) == 2 and len(pids) == 2


def test_a_crash_names_its_phase_and_rank_and_the_later_phases_did_not_run(crashed_rehearsal: CrashedRehearsal) -> None:
    one, two, three, *later = crashed_rehearsal.first.phases
    assert one.ok and not two.ok and three.state == "not_run" and all(p.state == "not_run" for p in later)
    assert two.root_cause() == 1 and "injected crash on rank 1" in two.describe()
    assert "phase two broke the launch first" in three.reason
    verdict = judge_launch_failure(two, "two")
    assert verdict is not None and verdict.code == "TWO_RANK_CRASHED" and "rank 1" in verdict.summary


def test_the_rehearsal_relaunches_the_phases_after_a_broken_one(crashed_rehearsal: CrashedRehearsal) -> None:
    answers = crashed_rehearsal.answers
    assert answers["one"].ok
    two = answers["two"]
    assert two.state == "broken" and two.root_cause() == 1
    for name in ("three", "four", "five"):
        later = answers[name]
        assert later.ok, later.describe()
        assert later.launch_name == "rehearsal" and later.run_dir.name == "rehearsal-relaunch"
    assert "relaunched after phase two broke" in (answers["three"].run_dir / "relaunch.txt").read_text()


def test_a_hang_past_the_phase_budget_is_named_and_leaves_no_process(tmp_path: Path) -> None:
    result = launch_phases(_phases(("hang", "0"), budget_s=5), nproc=2, run_dir=tmp_path)
    two = result.phase("two")
    assert two.timed_out and two.ranks_in("hung") and not two.cut
    assert "rank 0 at 'sleeping on purpose'" in two.describe()
    assert result.phase("three").state == "not_run" and result.phase("one").ok
    verdict = judge_launch_failure(two, "two")
    assert verdict is not None and verdict.code == "TWO_RANK_HUNG"
    assert not _alive(_rank_pids(tmp_path))


def test_the_runs_deadline_cuts_a_phase_and_it_is_not_called_a_hang(tmp_path: Path) -> None:
    left = {"s": 24.0}  # the launch gets 19 s (5 s are kept for the reports): start-up, phase one, then the cut
    started = time.monotonic()
    budget = Budget(lambda: left["s"] - (time.monotonic() - started), 24.0)
    plan = LaunchPlan("rehearsal", tuple(_phases(("hang", "1"), budget_s=300)), 2)
    rehearsal = Rehearsal(plan, tmp_path / "logs", budget)
    rehearsal.start()
    rehearsal.open_gate()
    try:
        two = rehearsal.phase("two")
        assert two.cut and not two.timed_out and "the run's deadline (--timeout 24 s) left" in two.describe()
        verdict = judge_launch_failure(two, "two")
        assert verdict is not None and verdict.status is Status.ERROR and verdict.code == "RUN_DEADLINE"
        three = rehearsal.phase("three")
        assert three.state == "not_run" and verdict.status is Status.ERROR
        assert judge_launch_failure(three, "three").code == "RUN_DEADLINE"  # type: ignore[union-attr]
    finally:
        rehearsal.close()


def test_no_launch_starts_when_the_run_has_no_time_left(tmp_path: Path) -> None:
    rehearsal = Rehearsal(LaunchPlan("rehearsal", tuple(_phases()), 2), tmp_path / "logs",
                          Budget(lambda: MIN_LAUNCH_S, 60.0))
    rehearsal.start()
    one = rehearsal.phase("one")
    assert one.state == "not_run" and "left" in one.reason and not (tmp_path / "logs").exists()


def test_the_clock_of_a_phase_starts_with_the_last_rank_to_enter_it() -> None:
    plan = LaunchPlan("p", (Phase("a", "m:f", budget_s=10), Phase("b", "m:f", budget_s=10)), 2)

    def mark(phase: str, entered: float, waiting: bool = False) -> RankProgress:
        return RankProgress(phase, "x", 1, entered, entered, (), waiting)

    now = 1000.0
    assert overdue_phase(plan, [mark("a", now - 11), mark("b", now - 11)], now, now - 60) == "a"
    assert overdue_phase(plan, [mark("b", now - 11), mark("b", now - 5)], now, now - 60) is None
    assert overdue_phase(plan, [mark("b", now - 11), mark("b", now - 11, waiting=True)], now, now - 60) is None
    assert overdue_phase(plan, [None, mark("a", now - 1)], now, now - 100) == ""  # still in start-up
