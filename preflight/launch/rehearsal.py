"""The run's distributed work: one rehearsal launch, started early, and the few launches that must be apart.

The main launch runs every phase the selected checks need, in one process group, started as soon as
collection has ended so the ranks import torch and join while the probe checks run; its measurements
wait at the gate until :meth:`Rehearsal.open_gate`. A check asks :meth:`Rehearsal.phase` for its
phase's result, which is answered as soon as every rank has written it (the launch may still be busy
with later phases). When a phase crashes or hangs, the phases after it are relaunched (once, when a
check asks for one of them); the broken phase is reported, not retried. A launch whose settings
must differ (``NCCL_P2P_DISABLE=1``: NCCL reads it when a communicator is created) is its own launch,
started on demand after the main one has ended: launches never overlap.

Launches are started from the thread that calls into this object (the main thread in a run), a
monitor thread watches each one; every launch directory is this run's own, under the report
directory's ``logs/``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from preflight.launch.phase_results import MalformedResult, read_rank_result
from preflight.launch.outcome import FINISHED, NOT_RUN, LaunchResult, PhaseResult, RankOutcome
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import LaunchStatus, RunningLaunch, start
from preflight.report.ownership import mark_owned, remove_if_owned
from preflight.report.writer import PRIVATE_DIR_MODE
from preflight.workers.common import result_name

MIN_LAUNCH_S = 8.0  # less than this left of the run's deadline: a launch is not started
REPORT_RESERVE_S = 5.0  # kept back from every launch for writing the reports
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Budget:
    """How long the next launch may take: what is left of the run's deadline (``--timeout``).

    ``--launch-timeout`` is not part of it: it caps each phase's budget (a phase still running past it
    is a hang), while the run's deadline only ever cuts a launch short, which is not the node's fault."""

    remaining_s: Callable[[], float]
    run_timeout_s: float

    def for_launch(self) -> tuple[float, str]:
        """(deadline in seconds, the reason a phase cut by it gets)."""
        left = self.remaining_s() - REPORT_RESERVE_S
        return left, (f"not finished: the run's deadline (--timeout {self.run_timeout_s:.0f} s) left "
                      f"{max(0.0, left):.0f} s for this launch")


class SideMeasurement(Protocol):
    """Something measured while a phase runs (the PCIe links under the sweep's load)."""

    def start(self) -> object: ...
    def stop(self) -> object: ...


@dataclass(slots=True)
class _Running:
    """A launch in flight and the thread that watches it."""

    launch: RunningLaunch
    thread: threading.Thread
    result: list[LaunchResult] = field(default_factory=list)

    def done(self) -> bool:
        return bool(self.result)


class Rehearsal:
    """The main launch and its relaunches; separate launches on demand."""

    def __init__(self, plan: LaunchPlan | None, logs_dir: Path, budget: Budget, python: str = sys.executable) -> None:
        self.plan = plan
        self.logs_dir = logs_dir
        self.budget = budget
        self.python = python
        self._runs: list[_Running] = []
        self._answers: dict[str, PhaseResult] = {}
        self._relaunched = False
        self._gate_open = False
        self._separate: dict[str, LaunchResult] = {}
        self._closed = False
        self._alongside: dict[str, list[SideMeasurement]] = {}
        self._side_started: list[SideMeasurement] = []

    def alongside(self, phase: str, measurement: SideMeasurement) -> None:
        """Run ``measurement`` while ``phase`` (a gated one) runs: started when the gate opens, from the
        thread that opens it (the main thread: what it starts dies with preflight), stopped once the
        phase's result is in."""
        self._alongside.setdefault(phase, []).append(measurement)

    # -- starting ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the main launch now (call from the main thread); nothing to do without a plan."""
        if self.plan is not None and not self._runs:
            self._launch(self.plan, self.main_dir.name)

    def _launch(self, plan: LaunchPlan, name: str) -> _Running | None:
        deadline, reason = self.budget.for_launch()
        if deadline < MIN_LAUNCH_S or self._closed:
            for phase in plan.phases:
                self._answers.setdefault(phase.name, _not_run(plan, phase.name, self.logs_dir / name,
                                                              _deadline_note(self.budget, deadline)))
            return None
        run_dir = self.logs_dir / name
        remove_if_owned(run_dir)  # an earlier run's launch folder, only inside preflight's own folder
        for private in (self.logs_dir, run_dir):  # the ranks' raw output is the user's alone
            private.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        mark_owned(run_dir)
        launch = start(plan, run_dir=run_dir, deadline_s=deadline, cut_reason=reason, python=self.python)
        if self._gate_open:
            launch.open_gate()
        running = _Running(launch, threading.Thread(target=lambda: None))
        running.thread = threading.Thread(target=lambda: running.result.append(launch.wait()),
                                          name=f"preflight-watch-{name}", daemon=True)
        running.thread.start()
        self._runs.append(running)
        return running

    def open_gate(self) -> None:
        """The probe checks are done: measurements may start (and what runs alongside them)."""
        if not self._gate_open:
            for measurements in self._alongside.values():
                for measurement in measurements:
                    measurement.start()
                    self._side_started.append(measurement)
        self._gate_open = True
        for running in self._runs:
            running.launch.open_gate()

    def _stop_alongside(self, phase: str) -> None:
        for measurement in self._alongside.pop(phase, []):
            if measurement in self._side_started:
                measurement.stop()
                self._side_started.remove(measurement)

    # -- answers -------------------------------------------------------------------------------------

    def phase(self, name: str) -> PhaseResult:
        """The result of phase ``name`` of the rehearsal, waiting for it as long as it needs."""
        self.open_gate()  # a check waits on a phase: no probe check runs any more
        if self.plan is None or name not in [p.name for p in self.plan.phases]:
            raise KeyError(f"phase {name!r} is not in this run's rehearsal plan")
        while name not in self._answers:
            running = self._runs[-1] if self._runs else None
            if running is None:
                self._answers[name] = _not_run(self.plan, name, self.logs_dir / "rehearsal", "no launch was started")
                break
            early = _finished_early(running.launch, name)
            if early is not None:
                self._answers[name] = early
                break
            if running.done():
                self._take(running.result[0])
                if name not in self._answers:
                    self._relaunch(name)
                continue
            time.sleep(POLL_S)
        self._stop_alongside(name)
        return self._answers[name]

    def _take(self, result: LaunchResult) -> None:
        for phase in result.phases:
            if phase.state != NOT_RUN:
                self._answers.setdefault(phase.phase, phase)

    def _relaunch(self, name: str) -> None:
        """Run the phases the last launch did not reach, once; a second break leaves them not run."""
        assert self.plan is not None
        last = self._runs[-1].result[0]
        unrun = [p for p in last.unrun() if p not in self._answers]
        if self._relaunched or not unrun:
            for phase in last.phases:
                self._answers.setdefault(phase.phase, phase)
            self._answers.setdefault(name, _not_run(self.plan, name, last.run_dir, "the launch ended before it"))
            return
        self._relaunched = True
        running = self._launch(self.plan.only(unrun), "rehearsal-relaunch")
        if running is None:
            return
        broken = last.broken()
        if broken is not None:
            note = f"relaunched after phase {broken.phase} broke the first launch ({broken.describe()})"
            (running.launch.run_dir / "relaunch.txt").write_text(note + "\n")

    def spec(self, name: str) -> Phase:
        """Phase ``name`` as the main launch runs it (after the areas' and the tests' hooks), so a
        launch of its own runs exactly the same code with other settings."""
        if self.plan is None:
            raise KeyError(f"phase {name!r} is not in this run's rehearsal plan")
        return next(p for p in self.plan.phases if p.name == name)

    def separate(self, label: str, plan: LaunchPlan) -> LaunchResult:
        """A launch of its own (different settings), after the rehearsal has ended; cached by label."""
        if label in self._separate:
            return self._separate[label]
        for earlier in self._runs:
            earlier.thread.join()
        running = self._launch(plan, f"{plan.name}-{_slug(label)}")
        if running is None:
            phases = tuple(_not_run(plan, p.name, self.logs_dir / plan.name,
                                    _deadline_note(self.budget, self.budget.for_launch()[0])) for p in plan.phases)
            result = LaunchResult(plan.name, plan.nproc, phases, False, True, None, 0.0, self.logs_dir, "")
        else:
            running.thread.join()
            result = running.result[0]
        self._separate[label] = result
        return result

    @property
    def main_dir(self) -> Path:
        """The main launch's run directory."""
        return self.logs_dir / "rehearsal"

    def running(self) -> bool:
        """Whether a launch is in flight now."""
        return any(not r.done() for r in self._runs)

    def current(self) -> tuple[str, str] | None:
        """(phase, label) of the launch in flight, for a live status line."""
        running = next((r for r in reversed(self._runs) if not r.done()), None)
        return None if running is None else running.launch.current()

    def status(self) -> LaunchStatus | None:
        """The launch in flight as a live status line shows it (phase, ranks through it, clocks), or None."""
        running = next((r for r in reversed(self._runs) if not r.done()), None)
        return None if running is None else running.launch.status()

    def close(self) -> None:
        """Stop whatever still runs (end of the session, or an interruption) and wait for the monitors."""
        self._closed = True
        for phase in list(self._alongside):
            self._stop_alongside(phase)
        for running in self._runs:
            if not running.done():
                running.launch.hard_deadline = 0.0  # the monitor stops the launch at once
        for running in self._runs:
            running.thread.join(timeout=30)


def _finished_early(launch: RunningLaunch, name: str) -> PhaseResult | None:
    """A phase every rank has finished, read while the launch goes on with later phases."""
    plan = launch.plan
    files = [launch.run_dir / result_name(rank, name) for rank in range(plan.nproc)]
    if not all(f.exists() for f in files):
        return None
    phase = next(p for p in plan.phases if p.name == name)
    results = []
    for path in files:
        try:
            result = read_rank_result(path, phase.parse_output)
        except MalformedResult:
            return None  # the launch's end names this rank's error
        if result is None:
            return None
        results.append(result)
    ranks = [RankOutcome(rank, FINISHED, result=result, log_path=str(launch.run_dir / f"rank{rank}.log"))
             for rank, result in enumerate(results)]
    duration = max(r.duration_s for r in results)
    return PhaseResult(phase=name, worker=phase.entry, nproc=plan.nproc, ranks=tuple(ranks), state=FINISHED,
                       duration_s=duration, deadline_s=phase.budget_s, run_dir=launch.run_dir, launch_name=plan.name)


def _not_run(plan: LaunchPlan, name: str, run_dir: Path, reason: str) -> PhaseResult:
    phase = next(p for p in plan.phases if p.name == name)
    ranks = tuple(RankOutcome(rank, NOT_RUN) for rank in range(plan.nproc))
    return PhaseResult(phase=name, worker=phase.entry, nproc=plan.nproc, ranks=ranks, state=NOT_RUN,
                       deadline_s=phase.budget_s, run_dir=run_dir, reason=reason, launch_name=plan.name)


def _deadline_note(budget: Budget, left: float) -> str:
    return (f"the run's deadline (--timeout {budget.run_timeout_s:.0f} s) left {max(0.0, left):.0f} s, less than "
            f"the {MIN_LAUNCH_S:.0f} s a launch needs")


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-") or "launch"
