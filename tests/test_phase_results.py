"""Phase results read once where the launch ends: each worker's shape typed, a wrong one named as that rank's error."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from preflight.judge.ddp import judge_ddp_step
from preflight.launch.phase_results import (
    AllreduceResult,
    DdpResult,
    FsdpResult,
    MalformedResult,
    OpsResult,
    OtherResult,
    P2pResult,
    RankResult,
    StrategyNotRun,
    ZeroResult,
    parse_fsdp,
)
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import read_phases
from preflight.outcome import Status

DDP = {"loss": 1.25, "step_time_s": 0.01, "param_sha256": "ab" * 32, "param_sum": 3.5, "peak_memory_bytes": 4096}
CHECKPOINT = {"available": True, "path": "/run/checkpoint", "save_s": 0.4, "load_s": 0.5, "bytes": 1000, "tensors": 7,
              "mismatched": [], "mismatched_count": 0, "differed_before_load": True, "probe_loss_after_load": 5.0,
              "removed": None}
STEPS = {"losses": [5.0, 4.0], "step_times_s": [0.8, 0.2], "step_time_s": 0.2, "first_step_time_s": 0.8,
         "local_losses": [5.1, 3.9], "probe_loss": 5.0, "param_sha256": "cd" * 32, "parameters": 1234,
         "peak_memory_bytes": 10, "memory_kind": "cpu_peak_rss", "checkpoint": CHECKPOINT}
FSDP = {"strategy": "fsdp", "api": "torch.distributed.fsdp", "precision": "fp32", **STEPS, "param_sum": 1.5,
        "shard_sha256": "ef" * 32}
ZERO = {"strategy": "zero2", "api": "deepspeed 0.19.8", "precision": "fp32", "config": {"zero_optimization": {}},
        "ops": [{"op": "fused_adam", "seconds": 0.5, "from": "manifest"}], "accelerator": "cpu", **STEPS}


def written(output: dict[str, Any], rank: int = 0, phase: str = "ddp") -> dict[str, Any]:
    """What ``preflight.workers.rehearsal.run_phase`` writes around a phase's output."""
    return {"rank": rank, "world_size": 2, "local_rank": rank, "backend": "gloo",
            "device": {"kind": "cpu", "id": "cpu", "pid": 4321}, "phase": phase, "duration_s": 0.5, "notes": [],
            "result": output}


def test_every_workers_shape_is_read_into_its_type() -> None:
    assert DdpResult.parse(DDP).param_sha256 == "ab" * 32
    fsdp = parse_fsdp(FSDP)
    assert isinstance(fsdp, FsdpResult) and fsdp.losses == (5.0, 4.0) and fsdp.checkpoint.tensors == 7
    assert (fsdp.param_sum, fsdp.shard_sha256) == (1.5, "ef" * 32)  # a subclass's own fields, by name
    zero = ZeroResult.parse(ZERO)
    assert zero.ops[0].source == "manifest" and zero.config == {"zero_optimization": {}}
    assert (zero.strategy, zero.accelerator, zero.parameters) == ("zero2", "cpu", 1234)
    assert OpsResult.parse({"ops": ZERO["ops"], "seconds": 1}).seconds == 1.0
    size = {"bytes": 1 << 20, "time_s": 0.001, "algbw_gbps": 1.0, "busbw_gbps": 1.0, "correct": True, "iters": 20}
    sweep = AllreduceResult.parse({"sizes": [size], "skipped": [{"bytes": 1 << 30, "reason": "does not fit"}],
                                   "world_size": 2, "backend": "gloo", "nccl_version": None, "sweep_s": 1.5})
    assert sweep.sizes[0].figures.bytes == 1 << 20 and sweep.skipped[0].reason == "does not fit"
    pair = {"src": 0, "dst": 1, "can_access_peer": True, "bytes": 4096, "iterations": 5, "mismatches": 0,
            "first_bad_index": None, "gbps": 12.0, "error": None}
    failed = {"src": 1, "dst": 0, "can_access_peer": False, "error": "RuntimeError: boom", "mismatches": None,
              "gbps": None}
    p2p = P2pResult.parse({"devices": [{"index": 0, "name": "H100", "pci_bus_id": None}], "pairs": [pair, failed],
                           "mib": 64})
    assert p2p.pairs[1].error == "RuntimeError: boom" and p2p.pairs[1].bytes is None
    assert P2pResult.parse({"waited_for_rank0": True}).waited_for_rank0
    assert P2pResult.parse({"skipped": "no CUDA device"}).skipped == "no CUDA device"


def test_a_diverged_loss_is_a_number_not_a_malformed_result() -> None:
    assert math.isnan(DdpResult.parse({**DDP, "loss": float("nan")}).loss)


def test_fsdp_on_a_torch_that_cannot_run_it_reads_as_not_run() -> None:
    assert parse_fsdp({"strategy": "fsdp", "not_run": "torch 2.6.0 cannot"}) == StrategyNotRun("fsdp", "torch 2.6.0 cannot")


def test_an_unavailable_checkpoint_needs_only_its_reason() -> None:
    unavailable = {"available": False, "reason": "torch cannot use numpy", "path": "/run/checkpoint"}
    checkpoint = FsdpResult.parse({**FSDP, "checkpoint": unavailable}).checkpoint
    assert not checkpoint.available and checkpoint.save_s is None and checkpoint.reason == "torch cannot use numpy"


@pytest.mark.parametrize(("raw", "words"), [
    ({**DDP, "loss": "1.25"}, "result.loss is str '1.25', expected a number"),
    ({k: v for k, v in DDP.items() if k != "param_sha256"}, "result.param_sha256 is missing"),
    ({**DDP, "peak_memory_bytes": True}, "result.peak_memory_bytes is bool True, expected an integer"),
])
def test_a_wrong_field_is_named(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(MalformedResult, match="^" + words.replace("(", r"\(")):
        DdpResult.parse(raw)


def test_a_nested_field_is_named_by_its_path() -> None:
    with pytest.raises(MalformedResult, match=r"result\.checkpoint\.mismatched\[0\] is int 3, expected a string"):
        FsdpResult.parse({**FSDP, "checkpoint": {**CHECKPOINT, "mismatched": [3]}})
    with pytest.raises(MalformedResult, match=r"the result file\.device\.id is missing"):
        RankResult.parse({**written(DDP), "device": {"kind": "cpu"}}, DdpResult.parse)


def test_the_envelope_and_the_output_are_read_together() -> None:
    result = RankResult.parse(written(DDP, rank=1), DdpResult.parse)
    assert (result.rank, result.backend, result.device.pid, result.duration_s) == (1, "gloo", 4321, 0.5)
    assert result.output_as(DdpResult).loss == 1.25
    with pytest.raises(TypeError, match="rank 1's ddp result is a DdpResult, not a P2pResult"):
        result.output_as(P2pResult)
    assert RankResult.parse(written({"sum": 1.0})).output == OtherResult({"sum": 1.0})


def test_a_rank_that_wrote_a_malformed_result_is_that_ranks_error(tmp_path: Path) -> None:
    (tmp_path / "rank0.ddp.json").write_text(json.dumps(written(DDP)))
    (tmp_path / "rank1.ddp.json").write_text(json.dumps(written({**DDP, "loss": None}, rank=1)))
    plan = LaunchPlan("test", (Phase("ddp", "preflight.workers.ddp:run", parse_output=DdpResult.parse),), nproc=2)
    (phase,) = read_phases(plan, tmp_path, "", "", hung=None, cut=False, cut_reason="", now=0.0)
    assert [r.state for r in phase.ranks] == ["finished", "crashed"] and not phase.ok
    assert phase.ranks[1].error == "its ddp result cannot be read: result.loss is null, expected a number"
    verdict = judge_ddp_step(phase)
    assert (verdict.status, verdict.code) == (Status.FAIL, "DDP_RANK_CRASHED")
    assert "rank 1 failed first (its ddp result cannot be read: result.loss is null" in verdict.summary


def test_a_garbled_result_file_is_no_result_as_before(tmp_path: Path) -> None:
    (tmp_path / "rank0.ddp.json").write_text("{not json")
    plan = LaunchPlan("test", (Phase("ddp", "preflight.workers.ddp:run", parse_output=DdpResult.parse),), nproc=1)
    (phase,) = read_phases(plan, tmp_path, "", "", hung=None, cut=False, cut_reason="", now=0.0)
    assert phase.ranks[0].result is None and phase.ranks[0].state != "finished"
