"""The strategy judge on launches built by hand: every verdict it can give, and the SKIP reasons."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from preflight.judge.strategies import (
    CHECK_IDS,
    judge_strategy,
    rehearsal_pointer,
    strategy_unavailable,
    with_rehearsal_pointer,
)
from preflight.launch.outcome import PhaseResult, RankOutcome
from preflight.launch.phase_results import RankResult, ZeroResult, parse_fsdp
from preflight.outcome import Status, passed, warn
from preflight.workers import phases

ROOT_CAUSE_TAIL = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_21:31:52
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 19415)
"""


def rank_result(rank: int, **changes: Any) -> dict[str, Any]:
    """What a finished FSDP rank writes, with ``changes`` applied to its result."""
    result: dict[str, Any] = {
        "strategy": "fsdp", "api": "torch.distributed.fsdp", "precision": "fp32",
        "losses": [5.05, 3.97, 3.28], "local_losses": [5.0 + rank, 3.9, 3.2], "step_times_s": [0.8, 0.2, 0.21],
        "step_time_s": 0.2 + rank / 100, "first_step_time_s": 0.8, "probe_loss": 5.37, "param_sha256": "a" * 64,
        "param_sum": 12.5, "shard_sha256": str(rank) * 64, "parameters": 1_000_000,
        "peak_memory_bytes": 340_000_000 + rank, "memory_kind": "cpu_peak_rss",
        "checkpoint": {"available": True, "reason": None, "path": "/run/checkpoint-fsdp", "save_s": 0.45, "load_s": 0.57, "bytes": 3_290_763,
                       "tensors": 277,
                       "mismatched": [], "mismatched_count": 0, "differed_before_load": True,
                       "probe_loss_after_load": 5.37, "removed": rank == 0 or None},
    }
    for key, value in changes.items():
        if key in result["checkpoint"] and key not in result:
            result["checkpoint"][key] = value
        else:
            result[key] = value
    return {"rank": rank, "world_size": 2, "local_rank": rank, "backend": "gloo",
            "device": {"kind": "cpu", "id": "cpu", "pid": 100 + rank}, "phase": "fsdp", "duration_s": 3.0, "notes": [],
            "result": result}


def finished(*payloads: dict[str, Any]) -> PhaseResult:
    ranks = tuple(RankOutcome(p["rank"], "finished", result=RankResult.parse(p, parse_fsdp)) for p in payloads)
    return PhaseResult(phase="fsdp", worker="preflight.workers.fsdp:run", nproc=len(ranks), ranks=ranks,
                       state="finished", duration_s=12.5, deadline_s=120.0, run_dir=Path("/nonexistent"))


def test_a_healthy_rehearsal_passes_with_per_rank_figures() -> None:
    verdict = judge_strategy(finished(rank_result(0), rank_result(1)), "fsdp")
    assert verdict.status is Status.PASS
    assert "2 ranks (gloo, fp32) ran 3 FSDP2 steps: loss 5.050 -> 3.280" in verdict.summary
    assert "3.3 MB saved by every rank and loaded back exactly" in verdict.summary
    step_times = {m.labels["rank"]: m.value for m in verdict.metrics if m.name == "step_time"}
    assert step_times == pytest.approx({"0": 0.2, "1": 0.21})
    assert [v.title for v in verdict.views] == ["Ranks"]
    assert len(verdict.views[0].data["rows"]) == 2


@pytest.mark.parametrize(
    ("changes", "code", "words"),
    [
        ({"losses": [5.05, float("nan"), 3.2]}, "FSDP_LOSS_NOT_FINITE", "not finite on rank 1"),
        ({"probe_loss": float("inf")}, "FSDP_LOSS_NOT_FINITE", "not finite on rank 1"),
        ({"losses": [5.05, 5.1, 5.2]}, "FSDP_LOSS_NOT_DECREASING", "did not fall over 3 steps"),
        ({"param_sha256": "b" * 64}, "FSDP_RANKS_DIVERGED", "rank 1: gathered parameters"),
        ({"probe_loss": 5.4}, "FSDP_RANKS_DIVERGED", "probe loss 5.4 vs 5.37"),
        ({"mismatched": ["optim.state.head.weight.exp_avg"], "mismatched_count": 1}, "FSDP_CHECKPOINT_MISMATCH",
         "rank 1: 1 of 277 tensors differ (optim.state.head.weight.exp_avg)"),
        ({"probe_loss_after_load": 5.1}, "FSDP_CHECKPOINT_MISMATCH", "probe loss 5.1 after load"),
        ({"available": False, "reason": "the disk was full"}, "FSDP_CHECKPOINT_UNAVAILABLE", "the disk was full"),
    ],
)
def test_each_problem_on_rank_1_fails_with_its_code_and_names_the_rank(changes: dict[str, Any], code: str, words: str) -> None:
    launch = finished(rank_result(0), rank_result(1, **copy.deepcopy(changes)))
    verdict = judge_strategy(launch, "fsdp")
    assert (verdict.status, verdict.code) == (Status.FAIL, code)
    assert words in verdict.summary
    assert verdict.remediation


def test_losses_within_bf16_rounding_agree_and_beyond_it_diverge() -> None:
    bf16 = {"precision": "bf16 compute, fp32 reduce"}
    close = finished(rank_result(0, **bf16), rank_result(1, probe_loss=5.3712, **bf16))
    assert judge_strategy(close, "fsdp").status is Status.PASS
    apart = finished(rank_result(0, **bf16), rank_result(1, probe_loss=5.45, **bf16))
    assert judge_strategy(apart, "fsdp").code == "FSDP_RANKS_DIVERGED"


def test_numpy_missing_warns_and_keeps_the_step_figures() -> None:
    reason = "torch cannot use numpy (Numpy is not available): object collectives need numpy"
    launch = finished(rank_result(0, available=False, reason=reason), rank_result(1, available=False, reason=reason))
    verdict = judge_strategy(launch, "fsdp")
    assert (verdict.status, verdict.code) == (Status.WARN, "FSDP_CHECKPOINT_NEEDS_NUMPY")
    assert "pip install numpy" in (verdict.remediation or "")
    assert {m.name for m in verdict.metrics} >= {"step_time", "peak_memory"}
    assert "checkpoint_save_time" not in {m.name for m in verdict.metrics}


def test_a_healthy_zero_rehearsal_names_its_accelerator_and_op_loads_and_reports_its_config() -> None:
    def zero(rank: int) -> RankResult:
        payload = rank_result(rank, strategy="zero2", api="deepspeed 0.19.8", config={"zero_optimization": {"stage": 2}},
                              accelerator="cpu", ops=[{"op": "cpu_adam", "seconds": 1.25 + rank, "from": "manifest"}])
        return RankResult.parse({**payload, "phase": "zero2"}, ZeroResult.parse)

    launch = PhaseResult(phase="zero2", worker="preflight.workers.zero:run", nproc=2,
                         ranks=tuple(RankOutcome(r, "finished", result=zero(r)) for r in range(2)), state="finished",
                         duration_s=12.5, deadline_s=120.0, run_dir=Path("/nonexistent"))
    verdict = judge_strategy(launch, "zero2")
    assert verdict.status is Status.PASS
    assert "ran 3 ZeRO-2 steps" in verdict.summary
    assert verdict.summary.endswith("; DeepSpeed's cpu accelerator, its ops (cpu_adam) loaded in 2.2 s")
    assert verdict.details["config"] == {"zero_optimization": {"stage": 2}}


def test_a_phase_that_returned_at_once_is_skipped_with_its_reason() -> None:
    payload = {**rank_result(0), "result": {"strategy": "fsdp", "not_run": "torch 2.6.0 cannot run FSDP2 on CPU ranks"}}
    verdict = judge_strategy(finished(payload, {**payload, "rank": 1}), "fsdp")
    assert (verdict.status, verdict.summary) == (
        Status.SKIP, "FSDP2 not rehearsed: torch 2.6.0 cannot run FSDP2 on CPU ranks")


def hung(last_phases: dict[int, str]) -> PhaseResult:
    ranks = tuple(RankOutcome(rank, "hung", error="still running at the deadline", last_phase=phase, idle_s=40.0,
                              progress_seq=10, log_tail=f"rank {rank} log") for rank, phase in last_phases.items())
    return PhaseResult(phase="fsdp", worker="w", nproc=len(ranks), ranks=ranks, state="broken", timed_out=True,
                       duration_s=60.0, deadline_s=60.0, run_dir=Path("/nonexistent"))


def test_a_hang_inside_a_save_says_saves_must_be_called_on_every_rank() -> None:
    verdict = judge_strategy(hung({0: phases.CHECKPOINT_SAVE, 1: "training on"}), "zero2")
    assert (verdict.status, verdict.code) == (Status.FAIL, "ZERO2_CHECKPOINT_SAVE_HUNG")
    assert "ZeRO-2: the checkpoint save never completed: rank 0 waited in it for 40 s" in verdict.summary
    assert "rank 1 at 'training on'" in verdict.summary and "(not in the save)" in verdict.summary
    assert "every rank" in (verdict.remediation or "") and "`if rank == 0:`" in (verdict.remediation or "")
    assert "rank0 log tail (hung)" in verdict.evidence


def test_a_hang_inside_a_load_is_named_as_the_load() -> None:
    verdict = judge_strategy(hung({0: phases.CHECKPOINT_LOAD, 1: phases.CHECKPOINT_LOAD}), "fsdp")
    assert verdict.code == "FSDP_CHECKPOINT_LOAD_HUNG" and "ranks 0, 1 waited in it" in verdict.summary


def test_a_hang_elsewhere_is_the_standard_hang_verdict() -> None:
    verdict = judge_strategy(hung({0: phases.STEPS, 1: phases.STEPS}), "fsdp")
    assert verdict.code == "FSDP_RANK_HUNG"


def crashed(error: str, log_tail: str) -> PhaseResult:
    ranks = (RankOutcome(0, "stopped", error="terminated by torchrun after a peer failed", exitcode=-15),
             RankOutcome(1, "crashed", error=error, exitcode=1, log_tail=log_tail, error_time=1.0))
    return PhaseResult(phase="fsdp", worker="w", nproc=2, ranks=ranks, state="broken", duration_s=9.0,
                       deadline_s=60.0, run_dir=Path("/nonexistent"), launcher_tail=ROOT_CAUSE_TAIL)


def test_an_op_build_failure_quotes_the_compiler() -> None:
    tail = ("[1/2] c++ -c cpu_adam.cpp -o cpu_adam.o\nFAILED: cpu_adam.o\n"
            "csrc/includes/simd.h:12:10: fatal error: immintrin.h: No such file or directory\n"
            "ninja: build stopped: subcommand failed.\nTraceback (most recent call last):")
    verdict = judge_strategy(crashed("RuntimeError: Error building extension 'cpu_adam'", tail), "zero3")
    assert (verdict.status, verdict.code) == (Status.FAIL, "ZERO3_OP_BUILD_FAILED")
    assert ("DeepSpeed could not build its op 'cpu_adam': csrc/includes/simd.h:12:10: fatal error: immintrin.h: "
            "No such file or directory (rank 1)") in verdict.summary


def test_any_other_crash_is_the_standard_crash_verdict() -> None:
    verdict = judge_strategy(crashed("ValueError: bad shape", "Traceback ...\nValueError: bad shape"), "fsdp")
    assert verdict.code == "FSDP_RANK_CRASHED" and "rank 1" in verdict.summary


def test_ranks_still_compiling_an_op_are_a_slow_build_not_a_hang() -> None:
    building = f"{phases.OP_LOAD}: fused_adam"
    verdict = judge_strategy(hung({0: building, 1: building}), "zero2")
    assert (verdict.status, verdict.code) == (Status.WARN, "ZERO2_OP_BUILD_UNFINISHED")
    assert "ranks 0, 1 were still loading DeepSpeed's fused_adam" in verdict.summary
    assert "a slow op build, not a hung rank" in verdict.summary and "60 s deadline" in verdict.summary
    assert "NCCL" not in (verdict.remediation or "") and "--op-build-timeout" in (verdict.remediation or "")


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
def test_zero_needs_deepspeed_and_runs_on_cpu_ranks_too(strategy: str) -> None:
    missing = strategy_unavailable(strategy, deepspeed_version=None, gpus=8)
    assert missing and "DeepSpeed is not installed" in missing and "pip install deepspeed" in missing
    assert strategy_unavailable(strategy, deepspeed_version="0.19.8", gpus=0, torch_version="2.4.1") is None
    assert strategy_unavailable(strategy, deepspeed_version="0.19.8", gpus=2) is None


@pytest.mark.parametrize(("torch_version", "gpus", "runs"), [
    ("2.4.1+cu121", 0, False), ("2.5.1", 0, False), ("2.6.0+cpu", 0, False), ("2.7.1", 0, True),
    ("2.13.0+cpu", 0, True), ("2.4.1+cu121", 8, True), ("2.6.0", 1, True), (None, 0, True)])
def test_fsdp2_on_cpu_ranks_needs_torch_2_7(torch_version: str | None, gpus: int, runs: bool) -> None:
    reason = strategy_unavailable("fsdp", deepspeed_version=None, gpus=gpus, torch_version=torch_version)
    assert (reason is None) is runs, reason
    if not runs:
        assert reason and f"torch {torch_version} cannot run FSDP2 on CPU ranks" in reason
        assert "torch.cuda.Stream" in reason and "FSDP requires CUDA for streams" in reason


def test_ddp_runs_everywhere() -> None:
    assert strategy_unavailable("ddp", deepspeed_version=None, gpus=0, torch_version="2.4.1") is None


def test_the_memory_fit_pointer_names_the_rehearsing_check_or_the_option_to_add() -> None:
    assert rehearsal_pointer("fsdp", ["ddp", "fsdp"]) == (
        "FSDP2 is rehearsed in this run (a few steps and a checkpoint round trip).")
    assert rehearsal_pointer("ddp", ("ddp",)) == "DDP is rehearsed in this run (one step on every rank)."
    assert rehearsal_pointer("zero2", ["ddp", "fsdp"]) == (
        "ZeRO-2 is not rehearsed in this run: add --strategy zero2 (needs DeepSpeed) to run a tiny step "
        "with it.")
    assert rehearsal_pointer("zero1", ["ddp", "fsdp"], fitting=("zero1", "zero2", "zero3", "fsdp")).endswith(
        "to run a tiny step with it. FSDP2, which also fits, is rehearsed in this run.")
    assert rehearsal_pointer(None, ["ddp"]) == "" and rehearsal_pointer("offload", ["ddp"]) == ""
    assert set(CHECK_IDS) == {"ddp", "fsdp", "zero1", "zero2", "zero3"}


def test_the_memory_fit_verdict_gains_the_pointer_in_its_remediation_or_summary() -> None:
    needs = warn("MEMORY_FIT_NEEDS_SHARDING", "7B does not fit with plain DDP", "Train with ZeRO-2 or more sharding.")
    pointed = with_rehearsal_pointer(needs, "zero2", ["ddp", "fsdp"])
    assert pointed.remediation == ("Train with ZeRO-2 or more sharding. ZeRO-2 is not rehearsed in this run: add "
                                   "--strategy zero2 (needs DeepSpeed) to run a tiny step with it.")
    assert pointed.code == needs.code and pointed.evidence["rehearsed strategy"].startswith("ZeRO-2")
    fits = with_rehearsal_pointer(passed("7B fits with plain DDP"), "ddp", ["ddp", "fsdp"])
    assert fits.summary == "7B fits with plain DDP - DDP is rehearsed in this run (one step on every rank)"
    assert with_rehearsal_pointer(needs, None, ["ddp"]) is needs
