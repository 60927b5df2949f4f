"""Judging a DDP step: every rank finished, on its own device, with identical parameters."""

from __future__ import annotations

import math
from collections import defaultdict

from preflight.launch.outcome import PhaseResult
from preflight.launch.phase_results import DdpResult
from preflight.outcome import Metric, Verdict, View, error, fail, passed

HANG_FIX = ("Re-run with NCCL_DEBUG=INFO and read the named rank's log; if the preflight NCCL check shows "
            "peer-to-peer is broken, set NCCL_P2P_DISABLE=1 for the job and fix IOMMU/ACS on the host.")
CRASH_FIX = "Read the named rank's log tail below; fix the error it shows before starting the job."


def rank_table(launch: PhaseResult) -> View:
    """Per-rank state, device, step time, loss and checksum (blank for a rank without a result)."""
    rows: list[list[object]] = []
    for rank in launch.ranks:
        step = rank.result.output_as(DdpResult) if rank.result is not None else None
        detail = "" if rank.state == "finished" else (rank.where() if rank.state == "hung" else rank.error or "")
        device = rank.result.device.id if rank.result is not None else "—"
        if step is None:
            rows.append([rank.rank, rank.state, detail, device, None, None, "—", None])
            continue
        rows.append([rank.rank, rank.state, detail, device, _round(step.step_time_s), _round(step.loss),
                     step.param_sha256[:16], step.peak_memory_bytes])
    highlight = [i for i, r in enumerate(launch.ranks) if r.state != "finished"]
    return View("table", "Ranks", {"columns": ["rank", "state", "detail", "device", "step time (s)", "loss",
                                               "param sha256", "peak memory (B)"],
                                   "rows": rows, "highlight": highlight})


def _round(value: float) -> float:
    return round(value, 6)


RUN_DEADLINE = "RUN_DEADLINE"


def judge_not_run(launch: PhaseResult, what: str) -> Verdict | None:
    """ERROR ``RUN_DEADLINE`` for a phase the run's deadline stopped within its budget, or that never
    started: the node was not tested, which is neither a pass nor the node's fault."""
    if launch.ran and not launch.cut:
        return None
    return error(f"{what}: {launch.describe()}", code=RUN_DEADLINE, evidence=launch.evidence())


def judge_launch_failure(launch: PhaseResult, what: str) -> Verdict | None:
    """FAIL naming hung or crashed ranks (ERROR when the deadline, not the node, stopped it), or None
    when every rank finished."""
    if launch.ok:
        return None
    stopped = judge_not_run(launch, what)
    if stopped is not None:
        return stopped
    evidence = launch.evidence()
    if launch.ranks_in("hung"):
        return fail(f"{what.upper()}_RANK_HUNG", f"{what}: {launch.describe()}", HANG_FIX, evidence=evidence)
    crashed = [r for r in launch.ranks if r.state == "crashed"]
    details = "; ".join(f"rank {r.rank}: {r.error}" for r in crashed)
    summary = f"{what}: {launch.describe()}" + (f" ({details})" if details else "")
    return fail(f"{what.upper()}_RANK_CRASHED", summary, CRASH_FIX, evidence=evidence)


def judge_ddp_step(launch: PhaseResult) -> Verdict:
    """PASS only if every rank finished, each on a distinct device, with bit-identical parameters."""
    table = rank_table(launch)
    failure = judge_launch_failure(launch, "ddp")
    if failure is not None:
        return failure.with_extra(views=[table])
    finished = [r.result for r in launch.ranks if r.result is not None]
    results = launch.outputs(DdpResult)
    backend = finished[0].backend

    by_device: dict[str, list[int]] = defaultdict(list)
    for rank, payload in enumerate(finished):
        if payload.device.on_gpu:
            by_device[payload.device.id].append(rank)
    shared = {dev: ranks for dev, ranks in by_device.items() if len(ranks) > 1}
    if shared:
        dev, ranks = next(iter(shared.items()))
        return fail("DDP_DEVICE_SHARED", f"ranks {', '.join(map(str, ranks))} all ran on device {dev}",
                    "Each rank must call torch.cuda.set_device(LOCAL_RANK); check CUDA_VISIBLE_DEVICES is not "
                    "narrowed per rank to the same GPU.", views=(table,))

    bad_loss = [i for i, r in enumerate(results) if not math.isfinite(r.loss)]
    if bad_loss:
        return fail("DDP_LOSS_NOT_FINITE", f"loss is not finite on ranks {', '.join(map(str, bad_loss))}",
                    "A NaN/Inf on a tiny fp32 model points at a faulty GPU or driver: run the GPU checks and "
                    "dcgmi diag -r 2 on the named rank's device.", views=(table,))

    reference = results[0].param_sha256
    diverged = [i for i, r in enumerate(results) if r.param_sha256 != reference]
    if diverged:
        return fail("DDP_PARAMS_DIVERGED",
                    f"parameters after one step differ from rank 0 on ranks {', '.join(map(str, diverged))}",
                    "Replicas must stay identical: a rank whose all-reduce returns different data has a "
                    "faulty GPU, link or NCCL setup; run the NCCL check and dcgmi diag on that device.",
                    views=(table,))

    step_times = [r.step_time_s for r in results]
    metrics = [Metric("step_time_max", max(step_times), "s"), Metric("launch_wall_time", launch.duration_s, "s"),
               Metric("ranks", launch.nproc)]
    metrics += [Metric("peak_memory", r.peak_memory_bytes, "B", {"rank": str(i)})
                for i, r in enumerate(results)]
    where = "distinct GPUs" if by_device else "CPU ranks"
    return passed(f"{launch.nproc} ranks ({backend}, {where}) finished one DDP step with identical parameters "
                  f"in {max(step_times) * 1000:.1f} ms", metrics=tuple(metrics), views=(table,))
