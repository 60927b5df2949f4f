"""Judging a strategy rehearsal (FSDP2, ZeRO-1/2/3): every rank finished, the loss is finite and
falls, ranks agree where they must, and the checkpoint round trip gives back exactly what was saved.

Launch failures reuse :func:`preflight.judge.ddp.judge_launch_failure`, except three that need their
own words: a hang inside a checkpoint save or load (saves are collectives), a DeepSpeed op that
could not be built (the compiler's message is quoted) and ranks still compiling a DeepSpeed op at
the deadline (a slow first build, not a hung rank: no NCCL advice).

Where a strategy cannot run is decided here too: ZeRO needs DeepSpeed (it runs on CPU ranks too:
DeepSpeed 0.19.8 picks its CPU_Accelerator without CUDA, gloo without oneCCL, and JIT-builds its
CPU ops with the C++ compiler); FSDP2 on CPU ranks needs torch 2.7 (see :data:`FSDP2_CPU_MIN_TORCH`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from packaging.version import InvalidVersion, Version

from preflight.judge.ddp import judge_launch_failure, judge_not_run
from preflight.judge.op_build import OP_BUILD_FIX, SLOW_FIX
from preflight.launch.outcome import PhaseResult, RankOutcome
from preflight.launch.phase_results import StrategyNotRun, StrategyResult, ZeroResult
from preflight.outcome import Metric, Verdict, View, fail, passed, skip, warn
from preflight.parse.op_build import find_op_build_failure
from preflight.workers import phases

STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
ZERO_STRATEGIES = ("zero1", "zero2", "zero3")
TITLES = {"ddp": "DDP", "fsdp": "FSDP2", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
CHECK_IDS = {"ddp": "test_ddp_step", **{name: f"test_strategy_step[{name}]" for name in STRATEGIES[1:]}}

SAVE_HANG_FIX = ("Checkpoint saves and loads are collectives: call them on every rank (dcp.save, "
                 "engine.save_checkpoint, accelerator.save_state), never inside `if rank == 0:`; a save "
                 "called on rank 0 only hangs every rank until the process-group timeout. If every rank does "
                 "call it, check the checkpoint directory's disk (free space, a stalled network mount).")
FSDP2_CPU_MIN_TORCH = (2, 7)
"""FSDP2 on CPU ranks fails before torch 2.7 (issue 14, run on gloo ranks with the registry's wheels;
2.4.1 re-run by ``.ci/old_torch.sh``): 2.4.1 calls ``torch.cuda.Stream(priority=...)`` in
``FSDPCommContext.init`` (``torch/distributed/_composable/fsdp/_fsdp_param_group.py``),
2.5.1 raises "FSDP requires CUDA for streams", 2.6.0 fails at ``Stream.record_event``; 2.7.1 runs it."""
NUMPY_FIX = ("Install numpy in the job's environment (pip install numpy): torch.distributed.checkpoint and every "
             "*_object collective convert through it, so the job's first checkpoint save would crash.")
LOSS_FIX = ("A tiny model on a fixed batch must learn: a NaN/Inf or a loss that does not fall points at a faulty "
            "GPU, a broken reduction or wrong mixed-precision settings; run the GPU checks and dcgmi diag -r 2.")
DIVERGED_FIX = ("Ranks that see different losses or parameters after the same collectives have a faulty GPU, "
                "link or NCCL setup: run the NCCL check and dcgmi diag on the named rank's device.")
MISMATCH_FIX = ("The state loaded back differs from the state saved: check the checkpoint directory's filesystem "
                "(a network mount that caches stale data, a full disk) and that the torch/DeepSpeed versions that "
                "save and load agree.")

FP32_TOLERANCE = 1e-6
BF16_TOLERANCE = 1e-3


def _release(version: str | None) -> tuple[int, ...] | None:
    try:
        return Version(version).release if version else None
    except InvalidVersion:
        return None


def strategy_unavailable(strategy: str, *, deepspeed_version: str | None, gpus: int,
                         torch_version: str | None = None) -> str | None:
    """Why ``strategy`` cannot be rehearsed here (the SKIP reason), or None when it can."""
    title = TITLES.get(strategy, strategy)
    if strategy == "fsdp" and gpus < 1:
        release = _release(torch_version)
        if release is not None and release[:2] < FSDP2_CPU_MIN_TORCH:
            return (f"{title} not rehearsed: torch {torch_version} cannot run FSDP2 on CPU ranks (before torch 2.7 "
                    "fully_shard needs CUDA streams: 2.4 calls torch.cuda.Stream, 2.5 raises 'FSDP requires CUDA for "
                    "streams', 2.6 fails at Stream.record_event); on GPU ranks it is rehearsed")
    if strategy not in ZERO_STRATEGIES:
        return None
    if deepspeed_version is None:
        return (f"{title} not rehearsed: DeepSpeed is not installed in this environment "
                "(pip install deepspeed, then run with --strategy zero1,zero2,zero3)")
    return None


def rehearsal_pointer(strategy: str | None, selected: Iterable[str], fitting: Iterable[str] = ()) -> str:
    """For the memory-fit check: where its recommended ``strategy`` is rehearsed in this run, or how
    to rehearse it, naming a rehearsed strategy among the others that fit (``fitting``) if any."""
    if strategy is None or strategy not in TITLES:
        return ""
    chosen = set(selected)
    title = TITLES[strategy]
    if strategy in chosen:
        what = "one step on every rank" if strategy == "ddp" else "a few steps and a checkpoint round trip"
        return f"{title} is rehearsed in this run ({what})."
    needs = " (needs DeepSpeed)" if strategy in ZERO_STRATEGIES else ""
    pointer = f"{title} is not rehearsed in this run: add --strategy {strategy}{needs} to run a tiny step with it."
    also = [name for name in fitting if name in chosen and name != strategy and name in TITLES]
    if also:
        pointer += f" {TITLES[also[0]]}, which also fits, is rehearsed in this run."
    return pointer


def with_rehearsal_pointer(verdict: Verdict, strategy: str | None, selected: Iterable[str],
                           fitting: Iterable[str] = ()) -> Verdict:
    """The memory-fit verdict pointing at the rehearsal of its recommended ``strategy``: appended to
    the remediation of a WARN or FAIL, to the summary otherwise, and kept as evidence."""
    pointer = rehearsal_pointer(strategy, selected, fitting)
    if not pointer:
        return verdict
    if verdict.remediation:
        changed = dataclasses.replace(verdict, remediation=f"{verdict.remediation} {pointer}")
    else:
        changed = dataclasses.replace(verdict, summary=f"{verdict.summary} - {pointer.rstrip('.')}")
    return changed.with_extra(evidence={"rehearsed strategy": pointer})


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _run(rank: RankOutcome) -> StrategyResult | None:
    """The rank's figures, None without a result (or for a phase that returned at once, not run)."""
    output = rank.output
    return output if isinstance(output, StrategyResult) else None


def strategy_table(launch: PhaseResult) -> View:
    """Per rank: state, device, step time, losses, digests, memory and the checkpoint figures."""
    rows: list[list[object]] = []
    for rank in launch.ranks:
        run = _run(rank)
        device = rank.result.device.id if rank.result is not None else "—"
        detail = "" if rank.state == "finished" else (rank.where() if rank.state == "hung" else rank.error or "")
        if run is None:
            rows.append([rank.rank, rank.state, detail, device, None, None, None, None, "—", None, None, None, "—"])
            continue
        checkpoint = run.checkpoint
        trip = ("unavailable" if not checkpoint.available
                else f"{_or_unknown(checkpoint.mismatched_count)} of {_or_unknown(checkpoint.tensors)} differ")
        losses = run.losses
        rows.append([rank.rank, rank.state, detail, device, _round(run.step_time_s),
                     _round(losses[0]) if losses else None, _round(losses[-1]) if losses else None,
                     _round(run.probe_loss), run.param_sha256[:16], run.peak_memory_bytes,
                     _round(checkpoint.save_s), _round(checkpoint.load_s), trip])
    highlight = [i for i, r in enumerate(launch.ranks) if r.state != "finished"]
    return View("table", "Ranks", {"columns": ["rank", "state", "detail", "device", "step time (s)", "first loss",
                                               "last loss", "probe loss", "param sha256", "peak memory (B)",
                                               "save (s)", "load (s)", "round trip"],
                                   "rows": rows, "highlight": highlight})


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def _or_unknown(value: object) -> object:
    return "?" if value is None else value


def judge_strategy_failure(launch: PhaseResult, strategy: str) -> Verdict | None:
    """FAIL for a launch that did not finish, or None when every rank finished."""
    if launch.ok:
        return None
    title, prefix = TITLES.get(strategy, strategy), strategy.upper()
    stopped = judge_not_run(launch, title)
    if stopped is not None:
        return stopped
    evidence = launch.evidence()
    hung = [r for r in launch.ranks if r.state == "hung"]
    building = [r for r in hung if (r.last_phase or "").startswith(phases.OP_LOAD)]
    if building:
        where = building[0].last_phase or phases.OP_LOAD
        op = where.split(": ", 1)[1] if ": " in where else "its ops"
        return warn(f"{prefix}_OP_BUILD_UNFINISHED",
                    f"{title}: {_ranks([r.rank for r in building])} were still loading DeepSpeed's {op} (a JIT build "
                    f"when it is not built yet) when the launch was killed at its {launch.deadline_s:.0f} s deadline: "
                    "a slow op build, not a hung rank", SLOW_FIX, evidence=evidence)
    in_checkpoint = [r for r in hung if r.last_phase in phases.CHECKPOINT_PHASES]
    if in_checkpoint:
        phase = in_checkpoint[0].last_phase
        what = "save" if phase == phases.CHECKPOINT_SAVE else "load"
        others = [r for r in launch.ranks if r not in in_checkpoint]
        elsewhere = "; ".join(f"rank {r.rank} {r.where() if r.state == 'hung' else r.state} (not in the {what})"
                              for r in others)
        summary = (f"{title}: the checkpoint {what} never completed: {_ranks([r.rank for r in in_checkpoint])} "
                   f"waited in it for {max(r.idle_s or 0.0 for r in in_checkpoint):.0f} s"
                   + (f"; {elsewhere}" if elsewhere else "") + f" (stopped past the phase's {launch.deadline_s:.0f} s "
                   "budget)")
        return fail(f"{prefix}_CHECKPOINT_{what.upper()}_HUNG", summary, SAVE_HANG_FIX, evidence=evidence)
    for rank in _crash_order(launch):
        failure = find_op_build_failure(f"{rank.error or ''}\n{rank.log_tail}")
        if failure is not None:
            return fail(f"{prefix}_OP_BUILD_FAILED", f"{title}: {failure.describe()} (rank {rank.rank})",
                        OP_BUILD_FIX, evidence=evidence)
    return judge_launch_failure(launch, strategy)


def _crash_order(launch: PhaseResult) -> list[RankOutcome]:
    """Crashed ranks, the root cause first."""
    root = launch.root_cause()
    crashed = [r for r in launch.ranks if r.state == "crashed"]
    return sorted(crashed, key=lambda r: (r.rank != root, r.rank))


def _tolerance(results: Sequence[StrategyResult]) -> float:
    return BF16_TOLERANCE if any("bf16" in r.precision for r in results) else FP32_TOLERANCE


def _close(a: float | None, b: float | None, tolerance: float) -> bool:
    if a is None or b is None:
        return False
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)


def judge_strategy(launch: PhaseResult, strategy: str) -> Verdict:
    """PASS when every rank finished, learned, agreed with the others and got its state back exactly."""
    title, prefix = TITLES.get(strategy, strategy), strategy.upper()
    table = strategy_table(launch)
    failure = judge_strategy_failure(launch, strategy)
    if failure is not None:
        return failure.with_extra(views=[table])
    not_run = [r.output for r in launch.ranks if isinstance(r.output, StrategyNotRun)]
    if not_run:
        return skip(f"{title} not rehearsed: {not_run[0].reason}")
    results = launch.outputs(StrategyResult)
    tolerance = _tolerance(results)

    bad = [i for i, r in enumerate(results) if not r.losses_finite]
    if bad:
        return fail(f"{prefix}_LOSS_NOT_FINITE", f"{title}: the loss is not finite on {_ranks(bad)}", LOSS_FIX,
                    views=(table,))
    flat = [i for i, r in enumerate(results) if not r.losses[-1] < r.losses[0]]
    if flat:
        losses = results[flat[0]].losses
        return fail(f"{prefix}_LOSS_NOT_DECREASING",
                    f"{title}: the loss did not fall over {len(losses)} steps on a fixed batch on {_ranks(flat)} "
                    f"({losses[0]:.4f} -> {losses[-1]:.4f})", LOSS_FIX, views=(table,))

    diverged = _divergence(results, tolerance)
    if diverged:
        what = "; ".join(f"rank {rank}: {', '.join(kinds)}" for rank, kinds in diverged.items())
        return fail(f"{prefix}_RANKS_DIVERGED",
                    f"{title}: {_ranks(list(diverged))} disagree with rank 0 where ranks must agree ({what})",
                    DIVERGED_FIX, views=(table,))

    checkpoint_problem = _judge_checkpoint(results, title, prefix, tolerance)
    if checkpoint_problem is not None:
        return checkpoint_problem.with_extra(metrics=strategy_metrics(launch, results), views=[table])

    first = results[0]
    checkpoint = first.checkpoint
    slowest = max(r.step_time_s for r in results)
    backend = launch.ranks[0].result.backend if launch.ranks[0].result is not None else "?"
    summary = (f"{launch.nproc} ranks ({backend}, {first.precision}) ran {len(first.losses)} {title} "
               f"steps: loss {first.losses[0]:.3f} -> {first.losses[-1]:.3f}, {slowest * 1000:.0f} ms per step "
               f"(slowest rank); checkpoint of {_megabytes(checkpoint.bytes)} saved by every rank and loaded "
               f"back exactly ({_or_unknown(checkpoint.tensors)} tensors per rank, save "
               f"{_max(results, 'save_s'):.2f} s, load {_max(results, 'load_s'):.2f} s)")
    config: Mapping[str, object] | None = None
    if isinstance(first, ZeroResult):
        config = first.config
        ops = first.ops
        loaded = (f", its ops ({', '.join(op.op for op in ops)}) loaded in "
                  f"{max(sum(op.seconds for op in r.ops) for r in results if isinstance(r, ZeroResult)):.1f} s"
                  if ops else "")
        if first.accelerator:
            summary += f"; DeepSpeed's {first.accelerator} accelerator{loaded}"
    return passed(summary, metrics=tuple(strategy_metrics(launch, results)), views=(table,),
                  details={"strategy": strategy, "api": first.api, "precision": first.precision, "config": config})


def _divergence(results: Sequence[StrategyResult], tolerance: float) -> dict[int, list[str]]:
    """Ranks that differ from rank 0 in the global losses, the probe loss or the full parameters."""
    reference = results[0]
    out: dict[int, list[str]] = {}
    for rank, result in enumerate(results[1:], start=1):
        kinds = []
        if len(result.losses) != len(reference.losses) or not all(
                _close(a, b, tolerance) for a, b in zip(result.losses, reference.losses, strict=True)):
            kinds.append("loss averaged over ranks")
        if not _close(result.probe_loss, reference.probe_loss, tolerance):
            kinds.append(f"probe loss {result.probe_loss} vs {reference.probe_loss}")
        if result.param_sha256 != reference.param_sha256:
            kinds.append("gathered parameters")
        if kinds:
            out[rank] = kinds
    return out


def _judge_checkpoint(results: Sequence[StrategyResult], title: str, prefix: str,
                      tolerance: float) -> Verdict | None:
    checkpoints = [r.checkpoint for r in results]
    unavailable = [i for i, c in enumerate(checkpoints) if not c.available]
    if unavailable:
        reason = checkpoints[unavailable[0]].reason or "the worker reported no checkpoint"
        summary = (f"{title}: the steps passed but no checkpoint round trip was possible on {_ranks(unavailable)}: "
                   f"{reason}")
        if "numpy" in reason:
            # Only a job that saves with torch.distributed.checkpoint (or uses object collectives) breaks.
            return warn(f"{prefix}_CHECKPOINT_NEEDS_NUMPY", summary, NUMPY_FIX)
        return fail(f"{prefix}_CHECKPOINT_UNAVAILABLE", summary, MISMATCH_FIX)
    bad = {}
    for rank, (result, checkpoint) in enumerate(zip(results, checkpoints, strict=True)):
        problems = []
        if checkpoint.mismatched_count:
            names = ", ".join(checkpoint.mismatched)
            problems.append(f"{checkpoint.mismatched_count} of {_or_unknown(checkpoint.tensors)} tensors differ"
                            + (f" ({names})" if names else ""))
        if not _close(checkpoint.probe_loss_after_load, result.probe_loss, tolerance):
            problems.append(f"probe loss {checkpoint.probe_loss_after_load} after load vs "
                            f"{result.probe_loss} before save")
        if problems:
            bad[rank] = problems
    if not bad:
        return None
    what = "; ".join(f"rank {rank}: {', '.join(p)}" for rank, p in bad.items())
    return fail(f"{prefix}_CHECKPOINT_MISMATCH",
                f"{title}: the checkpoint loaded back differs from the one saved on {_ranks(list(bad))} ({what})",
                MISMATCH_FIX)


def strategy_metrics(launch: PhaseResult, results: Sequence[StrategyResult]) -> list[Metric]:
    """Per-rank step time and peak memory, the checkpoint figures and the launch's wall time."""
    metrics = [Metric("launch_wall_time", round(launch.duration_s, 3), "s"), Metric("ranks", launch.nproc),
               Metric("loss_first", results[0].losses[0]),
               Metric("loss_last", results[0].losses[-1])]
    for rank, result in enumerate(results):
        labels = {"rank": str(rank)}
        metrics.append(Metric("step_time", result.step_time_s, "s", labels))
        metrics.append(Metric("peak_memory", result.peak_memory_bytes, "B", {**labels, "kind": result.memory_kind}))
    checkpoint = results[0].checkpoint
    if not checkpoint.available:
        return metrics
    metrics += [Metric("checkpoint_save_time", round(_max(results, "save_s"), 4), "s"),
                Metric("checkpoint_load_time", round(_max(results, "load_s"), 4), "s"),
                Metric("checkpoint_size", checkpoint.bytes or 0, "B")]
    return metrics


def _max(results: Sequence[StrategyResult], key: Literal["save_s", "load_s"]) -> float:
    return max((r.checkpoint.save_s if key == "save_s" else r.checkpoint.load_s) or 0.0 for r in results)


def _megabytes(value: int | None) -> str:
    return f"{value / 1e6:.1f} MB" if value is not None else "? MB"
