"""The strategy workers on real torchrun with gloo ranks: FSDP2 for real, ZeRO through a stand-in
for DeepSpeed (tests/fakes/deepspeed_stub), and injected faults judged as the report shows them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from preflight.judge.strategies import judge_strategy
from preflight.launch.outcome import PhaseResult
from preflight.outcome import Status
from preflight.workers import phases

from tests.conftest import REPO_ROOT
from tests.launching import launch_phase

pytestmark = pytest.mark.subprocess

DEEPSPEED_STUB = Path(__file__).resolve().parent / "fakes" / "deepspeed_stub"
HANG_BUDGET_S = 20.0  # a phase's budget starts after the ranks joined: torch's import is not in it


def _numpy_usable() -> bool:
    try:
        torch.zeros(1).numpy()
    except RuntimeError:
        return False
    return True


needs_numpy = pytest.mark.skipif(not _numpy_usable(), reason="torch.distributed.checkpoint needs numpy, which this "
                                 "environment lacks (pip install numpy)")


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks must import tests.workers.faulty_strategies and the DeepSpeed stand-in."""
    paths = [str(REPO_ROOT), str(DEEPSPEED_STUB), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))


def _fsdp(tmp_path: Path, fault: str | None = None, budget_s: float = 150) -> PhaseResult:
    env = {"PREFLIGHT_TEST_FAULT": fault} if fault else {}
    worker = "tests.workers.faulty_strategies:run" if fault else "preflight.workers.fsdp:run"
    return launch_phase(worker, nproc=2, budget_s=budget_s, deadline_s=budget_s + 60, env=env,
                        run_dir=tmp_path / "run", args=["--steps", "3", "--checkpoint-dir",
                                                        str(tmp_path / "checkpoint")])


@needs_numpy
def test_fsdp2_on_two_gloo_ranks_trains_and_round_trips_its_sharded_checkpoint(tmp_path):
    result = _fsdp(tmp_path)
    assert result.ok, result.describe() + result.launcher_tail
    first, second = (r.result["result"] for r in result.ranks)
    assert first["losses"][-1] < first["losses"][0] and first["losses"] == second["losses"]
    assert first["param_sha256"] == second["param_sha256"]  # gathered in full: the same on every rank
    assert first["shard_sha256"] != second["shard_sha256"]  # each rank holds its own shard
    for checkpoint in (first["checkpoint"], second["checkpoint"]):
        assert checkpoint["available"] and checkpoint["mismatched_count"] == 0 and checkpoint["tensors"] > 0
        assert checkpoint["differed_before_load"]  # the fresh model really started elsewhere
    assert first["checkpoint"]["removed"] is True and not (tmp_path / "checkpoint").exists()
    verdict = judge_strategy(result, "fsdp")
    assert verdict.status is Status.PASS, verdict.summary
    assert "loaded back exactly" in verdict.summary and "FSDP2" in verdict.summary
    names = {(m.name, m.labels.get("rank")) for m in verdict.metrics}
    assert {("step_time", "0"), ("step_time", "1"), ("peak_memory", "0"), ("peak_memory", "1"),
            ("checkpoint_save_time", None), ("checkpoint_size", None)} <= names


def test_a_rank_whose_parameters_diverge_is_named(tmp_path):
    verdict = judge_strategy(_fsdp(tmp_path, "diverge:1"), "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_RANKS_DIVERGED"
    assert "rank 1" in verdict.summary and "gathered parameters" in verdict.summary


def test_without_numpy_the_steps_pass_and_the_checkpoint_round_trip_warns(tmp_path):
    verdict = judge_strategy(_fsdp(tmp_path, "no-numpy:0"), "fsdp")
    assert verdict.status is Status.WARN and verdict.code == "FSDP_CHECKPOINT_NEEDS_NUMPY"
    assert "pip install numpy" in verdict.remediation
    assert any(m.name == "step_time" for m in verdict.metrics)


@needs_numpy
def test_a_save_skipped_on_one_rank_hangs_the_others_and_says_saves_are_collective(tmp_path):
    result = _fsdp(tmp_path, "skip-save:1", budget_s=HANG_BUDGET_S)
    assert result.timed_out
    assert result.ranks[0].last_phase == phases.CHECKPOINT_SAVE
    verdict = judge_strategy(result, "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_CHECKPOINT_SAVE_HUNG"
    assert "rank 0 waited in it" in verdict.summary and "rank 1 at 'training on without" in verdict.summary
    assert "every rank" in verdict.remediation and "rank == 0" in verdict.remediation


@needs_numpy
def test_a_checkpoint_that_loads_back_different_is_a_mismatch(tmp_path):
    verdict = judge_strategy(_fsdp(tmp_path, "corrupt:1"), "fsdp")
    assert verdict.status is Status.FAIL and verdict.code == "FSDP_CHECKPOINT_MISMATCH"
    # rank 1's shard was altered; every rank's probe loss sees it, only rank 1's own tensors differ
    assert "rank 1: 1 of" in verdict.summary and "tensors differ (model.head.weight)" in verdict.summary
    assert "probe loss" in verdict.summary


def _zero(tmp_path: Path, stage: int, fake: str | None = None, budget_s: float = 150) -> PhaseResult:
    env = {"PREFLIGHT_FAKE_DEEPSPEED": fake} if fake else {}
    return launch_phase("preflight.workers.zero:run", nproc=2, budget_s=budget_s, deadline_s=budget_s + 60, env=env,
                        run_dir=tmp_path / "run", args=["--stage", str(stage), "--steps", "3", "--checkpoint-dir",
                                                        str(tmp_path / "checkpoint")])


def test_the_zero_worker_steps_saves_on_every_rank_and_verifies_the_load(tmp_path):
    result = _zero(tmp_path, 3)
    assert result.ok, result.describe() + result.launcher_tail
    first = result.ranks[0].result["result"]
    assert first["strategy"] == "zero3" and first["config"]["zero_optimization"]["stage"] == 3
    assert first["config"]["train_batch_size"] == 2 * 2 * 4  # ranks x accumulation x micro batch
    assert first["api"] == "deepspeed 0.0.0+preflight.fake"
    assert first["checkpoint"]["mismatched_count"] == 0 and first["checkpoint"]["differed_before_load"]
    verdict = judge_strategy(result, "zero3")
    assert verdict.status is Status.PASS, verdict.summary
    assert "ZeRO-3" in verdict.summary


def test_a_failed_op_build_is_reported_with_the_compilers_message(tmp_path):
    verdict = judge_strategy(_zero(tmp_path, 2, "build-fails"), "zero2")
    assert verdict.status is Status.FAIL and verdict.code == "ZERO2_OP_BUILD_FAILED"
    assert "'fused_adam'" in verdict.summary and "nvcc fatal   : Unsupported gpu architecture" in verdict.summary
    assert "CUDA toolkit" in verdict.remediation


def test_a_deepspeed_save_not_called_on_every_rank_hangs_and_is_named(tmp_path):
    result = _zero(tmp_path, 1, "skip-save:1", budget_s=HANG_BUDGET_S)
    verdict = judge_strategy(result, "zero1")
    assert verdict.status is Status.FAIL and verdict.code == "ZERO1_CHECKPOINT_SAVE_HUNG"
    assert "never completed" in verdict.summary and "every rank" in verdict.remediation
