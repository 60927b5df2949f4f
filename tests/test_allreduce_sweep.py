"""The sweep plan, the worker's argument handling, and turning a launch into a SweepRun."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from preflight.launch.allreduce_sweep import sweep_plan, sweep_run_from_launch, without_label
from preflight.launch.outcome import PhaseResult, RankOutcome
from preflight.launch.phase_results import AllreduceResult, RankResult
from preflight.probe.sweep import RunStatus, SizeResult
from preflight.workers.allreduce import _split, parse_args

MIB = 1 << 20


def test_gpu_plans_follow_the_profiles() -> None:
    quick, full = sweep_plan(True, True), sweep_plan(True, False)
    assert quick.sizes == (MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
    assert full.sizes[0] == MIB and full.sizes[-1] == 1 << 30 and len(full.sizes) == 11
    assert quick.warmup == 5 and quick.iters == 20


def test_cpu_plans_stay_small() -> None:
    assert sweep_plan(False, True).sizes == (MIB, 4 * MIB, 16 * MIB)
    assert sweep_plan(False, False).sizes[-1] == 64 * MIB


def test_plan_arguments_round_trip_through_the_worker_parser() -> None:
    args = parse_args(sweep_plan(False, False).args())
    assert args.sizes == [MIB, 4 * MIB, 16 * MIB, 64 * MIB] and args.warmup == 2 and args.min_iters == 5


@pytest.mark.parametrize(("iters", "trials", "split"), [(20, 5, [4, 4, 4, 4, 4]), (7, 5, [2, 2, 1, 1, 1]), (3, 5, [1, 1, 1]), (1, 5, [1])])
def test_split_iterations_into_trials(iters: int, trials: int, split: list[int]) -> None:
    assert _split(iters, trials) == split and sum(split) == iters


def test_without_label() -> None:
    assert without_label(("NCCL_P2P_LEVEL", "NCCL_ALGO")) == "without NCCL_ALGO NCCL_P2P_LEVEL"


def _swept(rank: int, sizes: tuple[SizeResult, ...] = (), **kwargs: Any) -> RankOutcome:
    """A rank that finished the sweep with ``sizes``, its result read as the launcher reads it."""
    output = {"sizes": [{**size.as_dict(), "iters": 20} for size in sizes], "skipped": [], "world_size": 2,
              "backend": "gloo", "nccl_version": None, "sweep_s": 1.0}
    written = {"rank": rank, "world_size": 2, "local_rank": rank, "backend": "gloo",
               "device": {"kind": "cpu", "id": "cpu", "pid": 1}, "phase": "allreduce", "duration_s": 1.0,
               "notes": [], "result": output}
    return RankOutcome(rank, "finished", result=RankResult.parse(written, AllreduceResult.parse), **kwargs)


def _launch(tmp_path: Path, ranks: tuple[RankOutcome, ...], timed_out: bool = False, cut: bool = False,
            state: str | None = None) -> PhaseResult:
    finished = all(r.state == "finished" for r in ranks)
    return PhaseResult(phase="allreduce", worker="w", nproc=len(ranks), ranks=ranks,
                       state=state or ("finished" if finished else "broken"), timed_out=timed_out, cut=cut,
                       duration_s=1.0, deadline_s=30.0, run_dir=tmp_path, launcher_tail="",
                       reason="not finished: the run's deadline (--timeout 22 s) left 9 s for this launch" if cut
                       else "")


def test_finished_launch_becomes_an_ok_run(tmp_path: Path) -> None:
    size = SizeResult(MIB, 0.001, 1.048576, 1.048576, True)
    log = tmp_path / "rank0.log"
    log.write_text("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    ranks = (_swept(0, (size,), log_path=str(log)), _swept(1, (size,)))
    run = sweep_run_from_launch("as-is", _launch(tmp_path, ranks), {"NCCL_DEBUG": "INFO"}, on_gpu=False)
    assert run.status is RunStatus.OK and run.ok and run.sizes == (size,) and run.backend == "gloo"
    assert "via P2P/CUMEM" in run.nccl_log and run.env == {"NCCL_DEBUG": "INFO"}
    assert all(note.detail == "" for note in run.rank_notes)


def test_hung_launch_keeps_each_ranks_place_and_log_tail(tmp_path: Path) -> None:
    tail = "\n".join(f"line {i}" for i in range(20))
    ranks = (RankOutcome(0, "hung", error="still running at the deadline", log_tail=tail, last_phase="all-reduce of 1048576 bytes", idle_s=25.0),
             _swept(1))
    run = sweep_run_from_launch("as-is", _launch(tmp_path, ranks, timed_out=True), {}, on_gpu=True)
    assert run.status is RunStatus.HUNG and not run.ok and run.backend == "nccl"
    note = run.not_finished()[0]
    assert note.rank == 0 and "at 'all-reduce of 1048576 bytes' for 25 s" in note.detail
    assert note.detail.endswith("line 19") and "line 13" not in note.detail


def test_crashed_launch_is_failed(tmp_path: Path) -> None:
    ranks = (RankOutcome(0, "crashed", error="RuntimeError: boom"), RankOutcome(1, "stopped", error="terminated"))
    run = sweep_run_from_launch("off", _launch(tmp_path, ranks), {}, on_gpu=True)
    assert run.status is RunStatus.FAILED and [n.state for n in run.not_finished()] == ["crashed", "stopped"]


def test_finished_launch_without_figures_is_failed(tmp_path: Path) -> None:
    ranks = (_swept(0),)
    assert sweep_run_from_launch("as-is", _launch(tmp_path, ranks), {}, on_gpu=False).status is RunStatus.FAILED


def test_size_result_rejects_impossible_figures() -> None:
    with pytest.raises(ValueError, match="time_s"):
        SizeResult(MIB, float("nan"), 1.0, 1.0, True)
    with pytest.raises(ValueError, match="bytes"):
        SizeResult(0, 1.0, 1.0, 1.0, True)


def test_rank_notes_prefer_nccl_and_error_lines(tmp_path: Path) -> None:
    tail = "\n".join(["[preflight rank 1] pid 5 starting", "UserWarning: Failed to initialize NumPy", "",
                      "h:5:9 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
                      "h:5:9 [1] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported'",
                      "some unrelated line"])
    ranks = (_swept(0),
             RankOutcome(1, "crashed", error="exit code 1", log_tail=tail))
    run = sweep_run_from_launch("as-is", _launch(tmp_path, ranks), {}, on_gpu=True)
    detail = run.not_finished()[0].detail
    assert detail.splitlines() == ["exit code 1", "h:5:9 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
                                   "h:5:9 [1] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported'"]


def test_a_sweep_the_deadline_cut_or_never_started_is_not_run_not_hung(tmp_path: Path) -> None:
    ranks = (RankOutcome(0, "cut", last_phase="all-reduce of 1048576 bytes", idle_s=1.0), RankOutcome(1, "cut"))
    run = sweep_run_from_launch("as-is", _launch(tmp_path, ranks, cut=True), {}, on_gpu=False)
    assert run.status is RunStatus.NOT_RUN and "left 9 s" in run.launch_summary
    never = (RankOutcome(0, "not_run"), RankOutcome(1, "not_run"))
    assert sweep_run_from_launch("as-is", _launch(tmp_path, never, state="not_run"), {},
                                 on_gpu=False).status is RunStatus.NOT_RUN
