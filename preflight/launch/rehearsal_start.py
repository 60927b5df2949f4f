"""Plans and starts the run's one rehearsal launch from the selected checks.

A check that reads a phase says so with ``@pytest.mark.rehearsal("ddp")`` (or
``@pytest.mark.rehearsal(param="strategy")`` when the phase is the value of its ``strategy``
parameter). When collection has ended, every area is asked for the phases it owns among those the
selected checks name (``pytest_preflight_phases``), a test-only plugin may replace one
(``pytest_preflight_phase``), and the launch starts while the probe checks run. Here are the plan,
its start, its replacement when the job's torch counts other GPUs, and why none can run; the hooks
and the ``rehearsal`` fixture that call them live in :mod:`preflight.fixtures.rehearsal`.
"""

from __future__ import annotations

import dataclasses

import pytest

from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.rehearsal import Budget, Rehearsal
from preflight.node import Job, Node
from preflight.report.ownership import LOGS
from preflight.settings import Settings
from preflight.stash import SETTINGS_KEY, node_for
from preflight.workers.rehearsal import TORCH_ANSWER

STARTUP_BUDGET_S = 90.0  # torch's import, the rendezvous and the process-group join (CUDA and NCCL set-up on GPUs)
PHASE_ORDER = ("ddp", "p2p", "allreduce", "fsdp", "deepspeed_ops", "zero1", "zero2", "zero3")
MARKER = "rehearsal(*phases, param=None): the check reads these phases of the rehearsal launch"
REHEARSAL_KEY = pytest.StashKey[Rehearsal]()
PLANNED_FOR_KEY = pytest.StashKey[Job]()  # the job the running launch was planned for
WANTED_KEY = pytest.StashKey[frozenset[str]]()  # the phases the selected checks read


def job_for(config: pytest.Config) -> Job:
    """The job the launch is planned for (:attr:`~preflight.node.Node.launch_job`: known before the job's
    torch answers, so the launch need not wait for torch's import in the probe)."""
    return node_for(config).launch_job


def phases_of(item: pytest.Item) -> set[str]:
    """Phase names one check reads (its ``rehearsal`` markers)."""
    names: set[str] = set()
    for mark in item.iter_markers("rehearsal"):
        names.update(str(a) for a in mark.args)
        param = mark.kwargs.get("param")
        callspec = getattr(item, "callspec", None)
        if param and callspec is not None and param in callspec.params:
            names.add(str(callspec.params[param]))
    return names


def wanted_phases(items: list[pytest.Item]) -> frozenset[str]:
    """Phase names the selected checks read."""
    return frozenset(name for item in items for name in phases_of(item))


def launch_order(item: pytest.Item) -> int:
    """Where a check falls in the launch: the earliest phase it reads, in :data:`PHASE_ORDER`. A check
    that waits on a phase holds pytest's one thread, so the phases before it must have been asked for
    first (the op build's check must not keep the sweep waiting at its gate)."""
    places = [PHASE_ORDER.index(name) for name in phases_of(item) if name in PHASE_ORDER]
    return min(places, default=len(PHASE_ORDER))


def rehearsal_plan(config: pytest.Config, wanted: frozenset[str]) -> LaunchPlan | None:
    """The main launch: every wanted phase an area can run here, in :data:`PHASE_ORDER`."""
    if not wanted:
        return None
    if not node_for(config).can_launch:
        return None  # no GPU for the job and no --cpu: the distributed checks skip, saying why
    settings: Settings = config.stash[SETTINGS_KEY]
    offered: dict[str, Phase] = {}
    for phases in config.hook.pytest_preflight_phases(config=config, wanted=wanted):
        for phase in phases:
            chosen = config.hook.pytest_preflight_phase(config=config, phase=phase) or phase
            offered[phase.name] = capped(chosen, settings)
    ordered = tuple(offered[name] for name in PHASE_ORDER if name in offered)
    ordered += tuple(phase for name, phase in sorted(offered.items()) if name not in PHASE_ORDER)
    if not ordered:
        return None
    job = job_for(config)
    return LaunchPlan("rehearsal", ordered, nproc=job.ranks, env=launch_environment(job),
                      startup_budget_s=settings.phase_budget_s(STARTUP_BUDGET_S), answer_torch=True)


def capped(phase: Phase, settings: Settings) -> Phase:
    """``phase`` with its budget set by ``--launch-timeout`` when given (past it, a phase is hung)."""
    return dataclasses.replace(phase, budget_s=settings.phase_budget_s(phase.budget_s))


def launch_environment(job: Job) -> dict[str, str | None]:
    """What every launch adds: NCCL's INFO log on GPUs (its transports are evidence)."""
    return {"NCCL_DEBUG": "INFO"} if job.on_gpu else {}


def start_rehearsal(config: pytest.Config, wanted: frozenset[str]) -> None:
    """Plan the launch for the job as known now and start it (from the main thread). Its rank 0 answers
    what the job's torch is (the ranks import it anyway); without a launch the torch probe asks."""
    node = node_for(config)
    plan = rehearsal_plan(config, wanted)
    if plan is None:
        node.ask_torch()
        return
    settings: Settings = config.stash[SETTINGS_KEY]
    budget = Budget(settings.remaining_s, settings.timeout_s)
    rehearsal = Rehearsal(plan, settings.report_dir / LOGS, budget, python=node.transports.python)
    config.stash[REHEARSAL_KEY] = rehearsal
    config.stash[PLANNED_FOR_KEY] = job_for(config)
    config.hook.pytest_preflight_rehearsal(config=config, rehearsal=rehearsal)
    rehearsal.start()
    node.torch_answered_by(rehearsal.main_dir / TORCH_ANSWER, rehearsal.running)


def replan_if_job_changed(config: pytest.Config, node: Node) -> None:
    """The launch was planned before the job's torch answered; if torch counts other GPUs than NVML
    showed (or none), stop that launch and start the one the job really is (or none)."""
    planned = config.stash.get(PLANNED_FOR_KEY, None)
    if planned is None or planned.launches_like(node.job):
        return
    stale = config.stash[REHEARSAL_KEY]
    stale.close()
    del config.stash[REHEARSAL_KEY]
    del config.stash[PLANNED_FOR_KEY]
    if node.can_rehearse:
        start_rehearsal(config, config.stash.get(WANTED_KEY, frozenset()))


NO_REHEARSAL = ("no NVIDIA GPU for the job (NO_NVIDIA_GPU): the distributed checks rehearse the job on its GPUs; "
                "run preflight --cpu for a CPU rehearsal on gloo ranks")


def unusable_interpreter(node: Node) -> str | None:
    """Why the job's interpreter cannot run the rehearsal (torch does not import there, or the interpreter
    gives no answer at all), or None: the launch would only die at its start, its ranks unnamed."""
    torch = node.torch
    if torch.installed:
        return None
    return (f"the rehearsal runs in the job's interpreter, which cannot run it: {torch.problem} (the torch build "
            "check says what to do)")
