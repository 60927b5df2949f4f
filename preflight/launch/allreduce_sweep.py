"""The all-reduce sweep as a rehearsal phase: its message sizes and iterations per profile and
device, its launch's result read back as the judges' :class:`~preflight.probe.sweep.SweepRun`, and
the sweeps the bandwidth checks share (:class:`AllreduceSweeps`: one launch per environment, since
NCCL reads its variables when a communicator is created)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from preflight.launch.outcome import PhaseResult
from preflight.launch.phase_results import AllreduceResult
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.rehearsal import Rehearsal
from preflight.launch.rehearsal_start import launch_environment
from preflight.node import Job
from preflight.node.environment import JobEnvironment
from preflight.probe.sweep import RankNote, RunStatus, SizeResult, SweepRun

MIB = 1 << 20
PHASE = "allreduce"
AS_IS = "as-is"
ENTRY = "preflight.workers.allreduce:run"
NOTE_LINES = 6
_TELLING = re.compile(r"NCCL|[Ee]rror|Exception|Traceback|Watchdog|timed? ?out|Segmentation|Bus error|Killed")


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """Message sizes and iteration counts for one launch, sized by profile and device."""

    sizes: tuple[int, ...]
    warmup: int
    iters: int
    budget_s: float
    wanted_s: float

    def args(self) -> list[str]:
        """The worker's command-line arguments."""
        return ["--sizes", ",".join(map(str, self.sizes)), "--warmup", str(self.warmup),
                "--iters", str(self.iters), "--min-iters", "5", "--budget-s", str(self.budget_s)]


def sweep_plan(on_gpu: bool, quick: bool) -> SweepPlan:
    """GPU quick: 1-256 MiB; GPU full: 1 MiB-1 GiB (factor 2). CPU: gloo is ~1 GB/s, so up to 16 / 64 MiB."""
    if on_gpu:
        top = 8 if quick else 10
        return SweepPlan(tuple(MIB << k for k in range(0, top + 1, 2 if quick else 1)), 5, 20,
                         20.0 if quick else 60.0, 60.0 if quick else 120.0)
    top = 4 if quick else 6
    return SweepPlan(tuple(MIB << k for k in range(0, top + 1, 2)), 2, 20, 10.0 if quick else 20.0,
                     45.0 if quick else 60.0)


def _log_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def sweep_run_from_launch(label: str, launch: PhaseResult, env: Mapping[str, str], on_gpu: bool) -> SweepRun:
    """The judges' view of one sweep phase: status, rank 0's figures, what each rank did, all NCCL output."""
    if launch.ok:
        status = RunStatus.OK
    elif not launch.ran or launch.cut:
        status = RunStatus.NOT_RUN
    elif launch.timed_out or launch.ranks_in("hung"):
        status = RunStatus.HUNG
    else:
        status = RunStatus.FAILED
    sizes: tuple[SizeResult, ...] = ()
    backend = "nccl" if on_gpu else "gloo"
    first = launch.ranks[0].result if launch.ok and launch.ranks else None
    if first is not None:
        backend = first.backend
        sizes = tuple(size.figures for size in first.output_as(AllreduceResult).sizes)
        if not sizes:
            status = RunStatus.FAILED
    notes = []
    for rank in launch.ranks:
        tail = "\n".join(_telling_lines(rank.log_tail))
        where = f" {rank.where()}" if rank.state == "hung" else ""
        detail = f"{rank.error or ''}{where}".strip()
        notes.append(RankNote(rank.rank, rank.state, f"{detail}\n{tail}".strip() if rank.state != "finished" else ""))
    log = "\n".join(_log_text(r.log_path) for r in launch.ranks)
    return SweepRun(label=label, status=status, backend=backend, world_size=launch.nproc, sizes=sizes, env=dict(env),
                    rank_notes=tuple(notes), nccl_log=log, deadline_s=launch.deadline_s,
                    launch_summary=launch.describe())


def _telling_lines(tail: str) -> list[str]:
    """The last lines of a rank's log that say something: NCCL lines and errors first, else the plain tail."""
    lines = [line for line in tail.splitlines() if line.strip()]
    telling = [line for line in lines if _TELLING.search(line)]
    return (telling or lines)[-NOTE_LINES:]


def sweep_phase(plan: SweepPlan) -> Phase:
    """The sweep as a rehearsal phase: a measurement, so it waits for the probe checks."""
    return Phase(PHASE, ENTRY, tuple(plan.args()), budget_s=plan.wanted_s, gated=True,
                 parse_output=AllreduceResult.parse)


def without_label(names: tuple[str, ...]) -> str:
    """Label of the run with ``names`` removed from the environment."""
    return "without " + " ".join(sorted(names))


class AllreduceSweeps:
    """The sweep of the rehearsal launch (the environment as it is) and, on demand, sweeps in launches
    of their own with variables set or removed (NCCL reads them when a communicator is created)."""

    def __init__(self, rehearsal: Rehearsal, plan: SweepPlan, job: Job, env: JobEnvironment, quick: bool) -> None:
        self._rehearsal = rehearsal
        self._job = job
        self._env = env
        self.plan = plan
        self.on_gpu = job.on_gpu
        self.nproc = job.ranks
        self.quick = quick
        self._runs: dict[str, SweepRun] = {}

    def run(self, label: str, set_env: Mapping[str, str] | None = None, unset: tuple[str, ...] = ()) -> SweepRun:
        """The sweep with ``set_env`` added and ``unset`` removed from the inherited environment."""
        if label in self._runs:
            return self._runs[label]
        overrides: dict[str, str | None] = {**launch_environment(self._job), **(set_env or {})}
        overrides.update({name: None for name in unset})  # the launcher removes these for this launch
        effective = {k: v for k, v in self._env.nccl.items() if k not in unset}
        effective.update({k: v for k, v in overrides.items() if k.startswith("NCCL_") and v is not None})
        if label == AS_IS:
            phase = self._rehearsal.phase(PHASE)
        else:
            launch = LaunchPlan("allreduce", (self._rehearsal.spec(PHASE),), self.nproc, env=overrides)
            phase = self._rehearsal.separate(label, launch).phase(PHASE)
        run = sweep_run_from_launch(label, phase, effective, self.on_gpu)
        self._runs[label] = run
        return run
