"""The strategy workers on real torchrun with gloo ranks: FSDP2 and ZeRO (real DeepSpeed, its CPU
accelerator) for real, and injected faults judged as the report shows them.

Tests that read the same kind of run share one launch (module fixtures), as a rehearsal runs its phases
in one process group: every FSDP2 phase, faults included, in one; ZeRO-3 and the ZeRO save that hangs
in another. A hang ends its launch, so the hanging phase is the last of its launch, and its budget (which
counts from the last rank's entry into the phase) is short: torch, the process group and DeepSpeed are
already in when it starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from preflight.judge.strategies import FSDP2_CPU_MIN_TORCH, judge_strategy
from preflight.launch.outcome import LaunchResult, PhaseResult
from preflight.launch.phase_results import FsdpResult, ZeroResult, parse_fsdp
from preflight.launch.plan import Phase
from preflight.outcome import Status
from preflight.probe.command import run_command
from preflight.probe.deepspeed_ops import build_ops
from preflight.workers import phases

from tests.conftest import REPO_ROOT
from tests.launching import launch_phase, launch_phases

pytestmark = pytest.mark.e2e

FSDP_BUDGET_S = 150.0
# The phases whose save hangs, each after phases that imported everything in the same launch: the model, its
# sharding (or initialize) and the steps reach the save in 0.5 s on a quiet machine, a few seconds under load.
HANG_BUDGET_S = 10.0
ZERO_HANG_BUDGET_S = 10.0
ZERO_BUDGET_S = 300.0  # a ZeRO phase takes seconds on a quiet machine, a minute or more on a loaded one
OP_BUILD_TIMEOUT_S = 1500  # a first build of the CPU ops (only the first test on a machine pays it)
MISSING_HEADER = "/nonexistent/preflight-missing-header.h"


def _numpy_usable() -> bool:
    try:
        torch.zeros(1).numpy()
    except RuntimeError:
        return False
    return True


needs_numpy = pytest.mark.skipif(not _numpy_usable(), reason="torch.distributed.checkpoint needs numpy, which this "
                                 "environment lacks (pip install numpy)")
needs_fsdp2_on_cpu = pytest.mark.skipif(
    torch.cuda.device_count() == 0 and tuple(int(p) for p in torch.__version__.split(".")[:2]) < FSDP2_CPU_MIN_TORCH,
    reason=f"torch {torch.__version__} cannot run FSDP2 on CPU ranks (needs 2.7)")


def _importable_tests(env: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """``env`` for a launch whose ranks import tests.workers.faulty_strategies and tests.workers.faulty_zero."""
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    return {**(env or {}), "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def _deadline(phases: list[Phase]) -> float:
    """A launch deadline past every phase's budget: a phase that hangs is judged hung, never cut."""
    return sum(phase.budget_s for phase in phases) + 120


FSDP_FAULTS = {"diverge": "diverge:1", "no-numpy": "no-numpy:0", "corrupt": "corrupt:1"}


def _fsdp_phase(name: str, checkpoints: Path, fault: str | None = None, budget_s: float = FSDP_BUDGET_S) -> Phase:
    entry, fault_args = ("tests.workers.faulty_strategies:run", ("--fault", fault)) if fault else (
        "preflight.workers.fsdp:run", ())
    return Phase(name, entry, (*fault_args, "--steps", "3", "--checkpoint-dir", str(checkpoints / name)),
                 budget_s=budget_s, parse_output=parse_fsdp)


@pytest.fixture(scope="module")
def fsdp_launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[LaunchResult, Path]:
    """One launch for every FSDP2 test, and the folder of its checkpoints: the real phase (``fsdp``), each
    fault in a phase of its own, named after it, and last the save rank 1 skips (``skip-save``)."""
    checkpoints = tmp_path_factory.mktemp("fsdp-checkpoints")
    phases = [_fsdp_phase("fsdp", checkpoints),
              *(_fsdp_phase(name, checkpoints, fault) for name, fault in FSDP_FAULTS.items()),
              _fsdp_phase("skip-save", checkpoints, "skip-save:1", budget_s=HANG_BUDGET_S)]
    run_dir = tmp_path_factory.mktemp("fsdp") / "run"
    return launch_phases(phases, nproc=2, run_dir=run_dir, deadline_s=_deadline(phases), env=_importable_tests()), \
        checkpoints


def _fsdp(fsdp_launch: tuple[LaunchResult, Path], name: str) -> PhaseResult:
    return fsdp_launch[0].phase(name)


@needs_numpy
@needs_fsdp2_on_cpu
def test_fsdp2_on_two_gloo_ranks_trains_and_round_trips_its_sharded_checkpoint(
        fsdp_launch: tuple[LaunchResult, Path]) -> None:
    result = _fsdp(fsdp_launch, "fsdp")
    assert result.ok, result.describe() + result.launcher_tail
    first, second = result.outputs(FsdpResult)
    assert first.losses[-1] < first.losses[0] and first.losses == second.losses
    assert first.param_sha256 == second.param_sha256  # gathered in full: the same on every rank
    assert first.shard_sha256 != second.shard_sha256  # each rank holds its own shard
    for checkpoint in (first.checkpoint, second.checkpoint):
        assert checkpoint.available and checkpoint.mismatched_count == 0 and (checkpoint.tensors or 0) > 0
        assert checkpoint.differed_before_load  # the fresh model really started elsewhere
    assert first.checkpoint.removed is True and not (fsdp_launch[1] / "fsdp").exists()
    verdict = judge_strategy(result, "fsdp")
    assert verdict.status is Status.PASS, verdict.summary
    assert "loaded back exactly" in verdict.summary and "FSDP2" in verdict.summary
    names = {(m.name, m.labels.get("rank")) for m in verdict.metrics}
    assert {("step_time", "0"), ("step_time", "1"), ("peak_memory", "0"), ("peak_memory", "1"),
            ("checkpoint_save_time", None), ("checkpoint_size", None)} <= names


@needs_fsdp2_on_cpu
def test_a_rank_whose_parameters_diverge_is_named(fsdp_launch: tuple[LaunchResult, Path]) -> None:
    verdict = judge_strategy(_fsdp(fsdp_launch, "diverge"), "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_RANKS_DIVERGED"
    assert "rank 1" in verdict.summary and "gathered parameters" in verdict.summary


@needs_fsdp2_on_cpu
def test_without_numpy_the_steps_pass_and_the_checkpoint_round_trip_warns(
        fsdp_launch: tuple[LaunchResult, Path]) -> None:
    verdict = judge_strategy(_fsdp(fsdp_launch, "no-numpy"), "fsdp")
    assert verdict.status is Status.WARN and verdict.code == "FSDP_CHECKPOINT_NEEDS_NUMPY"
    assert "pip install numpy" in (verdict.remediation or "")
    assert any(m.name == "step_time" for m in verdict.metrics)


@needs_numpy
@needs_fsdp2_on_cpu
def test_a_save_skipped_on_one_rank_hangs_the_others_and_says_saves_are_collective(
        fsdp_launch: tuple[LaunchResult, Path]) -> None:
    result = _fsdp(fsdp_launch, "skip-save")
    assert result.timed_out
    assert result.ranks[0].last_phase == phases.CHECKPOINT_SAVE
    verdict = judge_strategy(result, "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_CHECKPOINT_SAVE_HUNG"
    assert "rank 0 waited in it" in verdict.summary and "rank 1 at 'training on without" in verdict.summary
    assert "every rank" in (verdict.remediation or "") and "rank == 0" in (verdict.remediation or "")


@needs_numpy
@needs_fsdp2_on_cpu
def test_a_checkpoint_that_loads_back_different_is_a_mismatch(fsdp_launch: tuple[LaunchResult, Path]) -> None:
    verdict = judge_strategy(_fsdp(fsdp_launch, "corrupt"), "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_CHECKPOINT_MISMATCH"
    # rank 1's shard was altered; every rank's probe loss sees it, only rank 1's own tensors differ
    assert "rank 1: 1 of" in verdict.summary and "tensors differ (model.head.weight)" in verdict.summary
    assert "probe loss" in verdict.summary


@pytest.fixture(scope="module")
def built_ops() -> None:
    """The rehearsal's ops built (or found) in preflight's own cache, as preflight does beside a launch;
    the ranks find the same folder from the same environment."""
    built = build_ops(timeout_s=OP_BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=dict(os.environ))
    assert built.ok, built.tail()


def _zero_phase(name: str, stage: int, checkpoints: Path, entry: str = "preflight.workers.zero:run",
                budget_s: float = ZERO_BUDGET_S) -> Phase:
    return Phase(name, entry, ("--stage", str(stage), "--steps", "3", "--checkpoint-dir", str(checkpoints / name)),
                 budget_s=budget_s, parse_output=ZeroResult.parse)


def _zero(tmp_path: Path, stage: int, env: dict[str, str | None]) -> PhaseResult:
    """A ZeRO phase alone in its launch (with ``env``), named after its stage."""
    phase = _zero_phase(f"zero{stage}", stage, tmp_path)
    return launch_phases([phase], nproc=2, run_dir=tmp_path / "run", deadline_s=_deadline([phase]),
                         env=env).phase(phase.name)


@pytest.fixture(scope="module")
def zero_launch(tmp_path_factory: pytest.TempPathFactory, built_ops: None) -> LaunchResult:
    """One launch for the ZeRO tests that load the built ops: ZeRO-3 for real (``zero3``), then ZeRO-1 with
    the save rank 1 never calls (``zero1``, ``tests.workers.faulty_zero``)."""
    checkpoints = tmp_path_factory.mktemp("zero-checkpoints")
    phases = [_zero_phase("zero3", 3, checkpoints),
              _zero_phase("zero1", 1, checkpoints, entry="tests.workers.faulty_zero:run", budget_s=ZERO_HANG_BUDGET_S)]
    run_dir = tmp_path_factory.mktemp("zero") / "run"
    return launch_phases(phases, nproc=2, run_dir=run_dir, deadline_s=_deadline(phases),
                         env=_importable_tests({"PREFLIGHT_TEST_FAULT": "skip-save:1"}))


@needs_numpy
def test_zero3_runs_for_real_on_cpu_ranks_and_reloads_its_checkpoint_exactly(zero_launch: LaunchResult) -> None:
    result = zero_launch.phase("zero3")
    assert result.ok, result.describe() + result.launcher_tail
    first, second = result.outputs(ZeroResult)
    assert first.strategy == "zero3" and first.config["zero_optimization"]["stage"] == 3  # type: ignore[index]
    assert first.config["train_batch_size"] == 2 * 2 * 4  # ranks x accumulation x micro batch
    assert first.api == "deepspeed 0.19.8" and first.accelerator == "cpu" and first.precision == "fp32"
    assert [op.op for op in first.ops] == ["deepspeed_shm_comm", "fused_adam"]  # built ahead, only loaded
    assert first.losses == second.losses and first.param_sha256 == second.param_sha256
    for rank in (first, second):
        assert rank.checkpoint.mismatched_count == 0 and rank.checkpoint.differed_before_load
    verdict = judge_strategy(result, "zero3")
    assert verdict.status is Status.PASS, verdict.summary
    assert "ZeRO-3" in verdict.summary and "loaded back exactly" in verdict.summary
    assert "DeepSpeed's cpu accelerator, its ops (deepspeed_shm_comm, fused_adam) loaded in" in verdict.summary


def test_a_failed_op_build_in_a_rank_is_reported_with_the_compilers_message(tmp_path: Path) -> None:
    """No build ahead of the launch and a compiler that fails for real: the rank quotes it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "g++").write_text(f'#!/bin/sh\nexec /usr/bin/g++ -include {MISSING_HEADER} "$@"\n')
    (bin_dir / "g++").chmod(0o755)
    env: dict[str, str | None] = {"PREFLIGHT_TORCH_EXTENSIONS_DIR": str(tmp_path / "fresh-extensions"),
                                  "CXX": str(bin_dir / "g++")}
    verdict = judge_strategy(_zero(tmp_path, 2, env), "zero2")
    assert verdict.status is Status.FAIL and verdict.code == "ZERO2_OP_BUILD_FAILED", verdict.summary
    assert f"fatal error: {MISSING_HEADER}: No such file or directory" in verdict.summary
    assert "'deepspeed_shm_comm'" in verdict.summary and "toolkit" in (verdict.remediation or "")


def test_a_build_that_failed_beside_the_launch_is_raised_by_the_ranks_not_rebuilt(tmp_path: Path) -> None:
    """The deepspeed_ops phase after a failed build: the ranks read the build's status and stop at once
    (no compile under a phase's budget), quoting what failed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "g++").write_text(f'#!/bin/sh\nexec /usr/bin/g++ -include {MISSING_HEADER} "$@"\n')
    (bin_dir / "g++").chmod(0o755)
    root = tmp_path / "extensions"
    failed = build_ops(timeout_s=600, root=root, runner=run_command, python=sys.executable, env={**os.environ, "CXX": str(bin_dir / "g++")})
    assert not failed.ok and failed.failed is not None, failed.tail()
    # the ranks run in the build's environment (the compiler is part of the folder's key)
    phase = launch_phase("preflight.workers.zero:ops_phase", nproc=2, budget_s=120, deadline_s=200,
                         env={"PREFLIGHT_TORCH_EXTENSIONS_DIR": str(root), "CXX": str(bin_dir / "g++")},
                         run_dir=tmp_path / "run", name="deepspeed_ops")
    assert phase.state != "finished" and phase.ranks_in("crashed"), phase.describe()
    error = next(r.error for r in phase.ranks if r.state == "crashed") or ""
    assert "DeepSpeed's ops were not built by preflight" in error and "Error building extension" in error, error
    assert "ninja" not in "".join(r.log_tail for r in phase.ranks)  # nothing compiled in the ranks


def test_a_deepspeed_save_not_called_on_every_rank_hangs_and_is_named(zero_launch: LaunchResult) -> None:
    # real DeepSpeed, imported by the ZeRO-3 phase before it (under load that takes tens of seconds)
    result = zero_launch.phase("zero1")
    assert result.timed_out, result.describe()
    verdict = judge_strategy(result, "zero1")
    assert verdict.status is Status.FAIL and verdict.code == "ZERO1_CHECKPOINT_SAVE_HUNG", verdict.summary
    assert "never completed" in verdict.summary and "every rank" in (verdict.remediation or "")
    assert "rank 1 at 'training on without calling the checkpoint save'" in verdict.summary
