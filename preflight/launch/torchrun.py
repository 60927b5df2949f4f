"""The only code that starts ``torchrun``: one launch of a phase plan, hard deadlines, a verdict per rank.

``torchrun --standalone`` runs every rank through :mod:`preflight.workers.rehearsal`, which joins the
process group once and runs the plan's phases in order. The launcher watches each rank's progress:
the earliest phase any rank is still in must end within that phase's budget (counted from the last
rank's entry into it; a rank waiting at the measurement gate is not counted), or the phase is a hang.
The run's own deadline may end a launch too; a phase stopped that way within its budget is ``cut``,
never called a hang of the node.

torchrun runs in its own session and dies with the process that started it (``PR_SET_PDEATHSIG``,
so :func:`start` must be called from a thread that lives as long as the launch: the main thread);
each rank dies with torchrun and watches for preflight itself. On every end the launcher stops what
is left: SIGTERM, then SIGKILL, to torchrun's process tree and to the ranks named by their pid files,
but only to processes whose command line carries this launch's own run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from preflight.launch import logs
from preflight.launch.outcome import (
    BROKEN,
    FINISHED,
    NOT_RUN,
    LaunchResult,
    PhaseResult,
    RankOutcome,
    ScriptResult,
    failure_exitcodes,
    root_cause_rank,
    signal_words,
)
from preflight.launch.phase_results import MalformedResult, OutputParser, RankError, read_rank_result
from preflight.launch.plan import LaunchPlan
from preflight.launch.reaper import LaunchCgroup, stop_launch
from preflight.locations import PACKAGE_DIR
from preflight.report.redact import redact_files
from preflight.workers.common import (
    BACKEND_ENV,
    PG_TIMEOUT_ENV,
    RUN_DIR_ENV,
    STARTUP,
    error_name,
    progress_name,
    result_name,
)
from preflight.workers.lifeline import PARENT_PID_ENV, RANK_DEADLINE_ENV, die_with_parent
from preflight.workers.rank_log import create_private, private_dirs

EXIT_GRACE_S = 10.0
LOG_TAIL_LINES = logs.LOG_TAIL_LINES
POLL_S = 0.05
PLAN_FILE = "plan.json"
GATE_FILE = "gate"
RANK_DEADLINE_GRACE_S = 15.0


@dataclass(frozen=True, slots=True)
class RankProgress:
    """What ``rank<N>.progress`` says: the phase, the label inside it, since when, and what is done."""

    phase: str
    label: str
    seq: int
    time: float
    phase_started: float
    completed: tuple[str, ...]
    waiting: bool

    @classmethod
    def read(cls, path: Path) -> RankProgress | None:
        """The rank's last progress mark, or None before its first."""
        try:
            data = json.loads(path.read_text())
            return cls(str(data["phase"]), str(data["label"]), int(data["seq"]), float(data["time"]),
                       float(data["phase_started"]), tuple(data.get("completed", ())), bool(data.get("waiting")))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def torchrun_argv(nproc: int, plan_path: Path, python: str = sys.executable) -> list[str]:
    """The command line of a launch: the same launcher a user's job uses."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--max-restarts=0", "--monitor-interval=0.1", "-m", "preflight.workers.rehearsal", str(plan_path)]


class RunningLaunch:
    """A started launch: :meth:`wait` watches it to its end; :meth:`open_gate` lets measurements begin."""

    def __init__(self, plan: LaunchPlan, run_dir: Path, proc: subprocess.Popen[bytes], started: float,
                 hard_deadline: float, cut_reason: str, cgroup: LaunchCgroup | None = None) -> None:
        self.plan = plan
        self.cgroup = cgroup
        self.run_dir = run_dir
        self.proc = proc
        self.started = started
        self.hard_deadline = hard_deadline
        self.cut_reason = cut_reason
        self.gate = run_dir / GATE_FILE

    def open_gate(self) -> None:
        """Let gated phases (measurements) start."""
        self.gate.touch(exist_ok=True)

    def status(self) -> LaunchStatus:
        """Where the launch is now, for a live status line (reads the ranks' progress marks)."""
        marks = [RankProgress.read(self.run_dir / progress_name(r)) for r in range(self.plan.nproc)]
        return launch_status(self.plan, marks, time.time(), self.started_epoch,
                             deadline_s=self.hard_deadline - self.started)

    def current(self) -> tuple[str, str] | None:
        """(phase, label) of the rank that got the least far, for a live status line."""
        marks = [RankProgress.read(self.run_dir / progress_name(r)) for r in range(self.plan.nproc)]
        known = [m for m in marks if m is not None]
        if not known:
            return None
        least = min(known, key=lambda m: (self.plan.index(m.phase), m.seq))
        return least.phase, least.label

    def wait(self) -> LaunchResult:
        """Watch the launch until it ends, a phase runs past its budget or the deadline comes; then stop
        whatever is left and read every rank's files."""
        hung: str | None = None
        cut = False
        external: int | None = None
        try:
            hung, cut = self._watch()
            external = self.proc.poll()  # an exit before preflight signalled anything: torchrun's own, or a kill
        finally:
            report = stop_launch(self.proc, self.run_dir, self.cgroup)
        duration = time.monotonic() - self.started
        redact_files(self.run_dir)  # the ranks wrote raw: scrubbed before anything reads what they left
        log = logs.read_bounded(self.run_dir / "torchrun.log")
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        killed = -external if external is not None and external < 0 else None
        phases = read_phases(self.plan, self.run_dir, log, tail, hung=hung, cut=cut,
                             cut_reason=self.cut_reason, now=time.time(), launcher_signal=killed)
        return LaunchResult(name=self.plan.name, nproc=self.plan.nproc, phases=phases, timed_out=hung is not None,
                            cut=cut, returncode=self.proc.returncode, duration_s=duration, run_dir=self.run_dir,
                            launcher_tail=tail, leftovers=report.alive, stopped=report.stopped,
                            launcher_signal=killed)

    def _watch(self) -> tuple[str | None, bool]:
        """(the phase that ran past its budget, whether the hard deadline ended the launch)."""
        all_done_at: float | None = None
        while self.proc.poll() is None:
            now = time.monotonic()
            if now >= self.hard_deadline:
                return None, True
            marks = [RankProgress.read(self.run_dir / progress_name(r)) for r in range(self.plan.nproc)]
            over = overdue_phase(self.plan, marks, time.time(), self.started_epoch)
            if over is not None:
                return over, False
            if all_done_at is None and all(m is not None and len(m.completed) == len(self.plan.phases)
                                           for m in marks):
                all_done_at = now
            if all_done_at is not None and now - all_done_at > EXIT_GRACE_S:
                return None, False  # every rank reported: a wedged teardown must not cost the deadline
            time.sleep(POLL_S)
        return None, False

    @property
    def started_epoch(self) -> float:
        """Wall-clock time of the start (ranks write epoch times)."""
        return time.time() - (time.monotonic() - self.started)


@dataclass(frozen=True, slots=True)
class LaunchStatus:
    """A launch as a person watching it wants to see it: the earliest phase any rank is in (the one the
    launcher judges), what that rank is doing, how many ranks are through it, and the clocks."""

    launch: str
    phase: str
    label: str
    nproc: int
    ranks_done: int
    waiting: bool
    elapsed_s: float
    phase_elapsed_s: float
    phase_budget_s: float
    deadline_s: float


def launch_status(plan: LaunchPlan, marks: Sequence[RankProgress | None], now: float, started: float, *,
                  deadline_s: float) -> LaunchStatus:
    """The :class:`LaunchStatus` of ``plan`` from its ranks' marks (None: a rank not yet in a phase)."""
    pending = [(m.phase if m is not None else STARTUP, m) for m in marks]
    position = min(plan.index(phase) for phase, _ in pending)
    phase = plan.name_at(position)
    in_it = [m for p, m in pending if p == phase]
    least = min(in_it, key=lambda m: -1 if m is None else m.seq)
    entered = [m.phase_started if m is not None else started for m in in_it]
    done = sum(1 for p, m in pending if plan.index(p) > position or (m is not None and phase in m.completed))
    return LaunchStatus(launch=plan.name, phase=phase, label=least.label if least is not None else "",
                        nproc=plan.nproc, ranks_done=done, waiting=any(m is not None and m.waiting for m in in_it),
                        elapsed_s=max(0.0, now - started), phase_elapsed_s=max(0.0, now - max(entered)),
                        phase_budget_s=plan.budget(phase), deadline_s=deadline_s)


def overdue_phase(plan: LaunchPlan, marks: Sequence[RankProgress | None], now: float, started: float) -> str | None:
    """The phase that ran past its budget, or None. The earliest phase any rank is in is judged, its
    clock started by the last rank to enter it; ranks in later phases wait on it, so are not judged."""
    pending = [(m.phase if m is not None else STARTUP, m) for m in marks]
    phase = plan.name_at(min(plan.index(phase) for phase, _ in pending))
    in_it = [m for p, m in pending if p == phase]
    if any(m is not None and m.waiting for m in in_it):
        return None  # the gate is closed: the launcher, not the node, holds this phase
    entered = [m.phase_started if m is not None else started for m in in_it]
    if entered and now - max(entered) > plan.budget(phase):
        return phase
    return None


def start(plan: LaunchPlan, *, run_dir: Path, deadline_s: float, cut_reason: str = "", python: str = sys.executable,
          pg_timeout_s: float | None = None) -> RunningLaunch:
    """Start ``plan`` under torchrun in ``run_dir`` (which must be this launch's own, empty directory).

    ``deadline_s`` is the most this launch may take (the run's and the launch's deadline together);
    a phase still inside its budget when it passes is ``cut`` with ``cut_reason``. Call from the main
    thread: the kernel kills torchrun when the thread that started it ends."""
    private_dirs(run_dir)
    plan_path = run_dir / PLAN_FILE
    plan.write(plan_path, gate=None if not any(p.gated for p in plan.phases) else run_dir / GATE_FILE)
    # The process group's own timeout is longer than any phase's budget, so a hang is seen by the
    # launcher with every rank still alive (and each rank's last label known), not as a peer's error.
    longest = max([plan.startup_budget_s, *(p.budget_s for p in plan.phases)])
    env = _environment(plan.env, run_dir, deadline_s, backend=plan.backend,
                       pg_timeout_s=pg_timeout_s if pg_timeout_s is not None else longest + 30.0)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stage_workers(run_dir)), env.get("PYTHONPATH")]))
    for rank in range(plan.nproc):
        os.close(create_private(run_dir / f"rank{rank}.log"))  # private before any rank writes a byte
    cgroup = LaunchCgroup.make()
    sink = create_private(run_dir / "torchrun.log")
    started = time.monotonic()
    try:
        # cwd is the launch's own directory: ``-m`` puts the working directory first on the ranks'
        # sys.path, and a stray ./numpy where preflight was started must not shadow the real one
        proc = subprocess.Popen(torchrun_argv(plan.nproc, plan_path, python), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=run_dir,
                                preexec_fn=_child_setup(cgroup))  # noqa: PLW1509 - prctl and a cgroup write only
    finally:
        os.close(sink)
    return RunningLaunch(plan, run_dir, proc, started, started + deadline_s, cut_reason, cgroup)


def _child_setup(cgroup: LaunchCgroup | None) -> Callable[[], None]:
    """What torchrun's child runs before exec: into the launch's cgroup, then die with preflight."""

    def setup() -> None:
        if cgroup is not None:
            cgroup.enter()
        die_with_parent()

    return setup


def stage_workers(run_dir: Path) -> Path:
    """A directory holding only ``preflight`` (a link to this package), put first on the ranks' path:
    the job's interpreter (``--python``) may not have preflight installed, or another version of it.
    The ranks import ``preflight.workers`` from it, which needs nothing but the standard library and torch."""
    stage = run_dir / ".import"
    private_dirs(stage)
    link = stage / "preflight"
    if not link.exists():
        link.symlink_to(PACKAGE_DIR, target_is_directory=True)
    return stage


def launch(plan: LaunchPlan, *, run_dir: Path, deadline_s: float, cut_reason: str = "",
           python: str = sys.executable) -> LaunchResult:
    """Start ``plan`` and wait for its end (no gate: measurements start at once)."""
    running = start(plan, run_dir=run_dir, deadline_s=deadline_s, cut_reason=cut_reason, python=python)
    running.open_gate()
    return running.wait()


class LaunchWatch(Protocol):
    """What a caller of :func:`launch_script` watches while the launch runs (the rehearsal's beat files)."""

    def prepare(self, run_dir: Path, nproc: int) -> None:
        """Before torchrun starts: create what the ranks will write into."""

    def poll(self, now: float) -> str | None:
        """Every poll of the running launch (``time.monotonic()``): a reason to end it now, or None."""

    def finish(self, run_dir: Path) -> None:
        """After every process is stopped, before the run directory is scrubbed: turn what the ranks left
        into files (the directory exists again by then, even if the script removed it)."""


@dataclass(frozen=True, slots=True)
class HeldLog:
    """A rank's log as preflight's own descriptor sees it: survives the script deleting the file."""

    rank: int
    fd: int
    path: Path


def launch_script(script: Path, *, nproc: int, run_dir: Path, deadline_s: float, args: Sequence[str] = (),
                  env: Mapping[str, str | None] | None = None, python: str = sys.executable,
                  watch: LaunchWatch | None = None) -> ScriptResult:
    """``torchrun --standalone --nproc-per-node=N script args`` as the job's own launch would be, with
    the launcher's guarantees (own session and cgroup, dies with preflight, hard deadline, every process
    it started stopped, only its own). For a user's script, which writes no phase results: each rank's
    end comes from its exit code in torchrun's failure summary (none for ranks that exited 0) or the
    deadline. preflight creates every rank's log (private) and keeps it open, so what a rank printed is
    read even when the script deleted the directory, and a log of any size is read in bounded pieces."""
    private_dirs(run_dir)
    held = [HeldLog(rank, create_private(run_dir / f"rank{rank}.log"), run_dir / f"rank{rank}.log")
            for rank in range(nproc)]
    sink = create_private(run_dir / "torchrun.log")
    try:
        if watch is not None:
            watch.prepare(run_dir, nproc)
        return _run_script(script, nproc=nproc, run_dir=run_dir, deadline_s=deadline_s, args=args, env=env,
                           python=python, watch=watch, held=held, sink=sink)
    finally:
        for log in held:
            os.close(log.fd)
        os.close(sink)


def _run_script(script: Path, *, nproc: int, run_dir: Path, deadline_s: float, args: Sequence[str],
                env: Mapping[str, str | None] | None, python: str, watch: LaunchWatch | None,
                held: Sequence[HeldLog], sink: int) -> ScriptResult:
    environment = _environment(env or {}, run_dir, deadline_s, backend=None, pg_timeout_s=None)
    argv = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0",
            "--monitor-interval=0.1", str(script), *args]
    cgroup = LaunchCgroup.make()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=environment, start_new_session=True,
                            preexec_fn=_child_setup(cgroup))  # noqa: PLW1509 - prctl and a cgroup write only
    timed_out = False
    ended_by: str | None = None
    external: int | None = None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - started >= deadline_s:
                timed_out = True
                break
            ended_by = watch.poll(now) if watch is not None else None
            if ended_by:
                break
            time.sleep(POLL_S)
        external = proc.poll()
    finally:
        report = stop_launch(proc, run_dir, cgroup)
    duration = time.monotonic() - started
    removed = _restore(run_dir, held, sink)
    if watch is not None:
        watch.finish(run_dir)
    redact_files(run_dir)  # the script's ranks wrote raw: scrubbed before anything reads what they left
    log = logs.read_bounded(run_dir / "torchrun.log")
    tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
    exitcodes = failure_exitcodes(log)
    root = root_cause_rank(log)
    killed = -external if external is not None and external < 0 else None
    ranks = tuple(_script_rank(run_dir, rank, exitcodes.get(rank), root, timed_out or bool(ended_by),
                               proc.returncode, killed) for rank in range(nproc))
    return ScriptResult(nproc=nproc, ranks=ranks, timed_out=timed_out, returncode=proc.returncode,
                        duration_s=duration, deadline_s=deadline_s, run_dir=run_dir,
                        launcher_tail=tail, root=root, leftovers=report.alive, stopped=report.stopped,
                        launcher_signal=killed, ended_by=ended_by, files_removed=removed,
                        log_bytes=tuple(_size(log.fd) for log in held))


def _size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def _restore(run_dir: Path, held: Sequence[HeldLog], sink: int) -> bool:
    """Every rank log (and torchrun's) written back from preflight's descriptors, bounded in size; True
    when the script had removed any of them (or the whole directory) while it ran."""
    removed = not run_dir.is_dir()
    with contextlib.suppress(OSError):
        private_dirs(run_dir)
    for fd, path in [*((log.fd, log.path) for log in held), (sink, run_dir / "torchrun.log")]:
        try:
            gone = os.fstat(fd).st_nlink == 0
            removed = removed or gone
            if gone or os.fstat(fd).st_size > logs.KEEP_BYTES:
                logs.write_bounded(fd, path)
        except OSError:
            continue
    return removed


def _script_rank(run_dir: Path, rank: int, exitcode: int | None, root: int | None, timed_out: bool,
                 returncode: int | None, launcher_signal: int | None = None) -> RankOutcome:
    log_path = run_dir / f"rank{rank}.log"
    tail = logs.tail(log_path)
    if exitcode is None:
        if launcher_signal is not None:
            return RankOutcome(rank, "stopped", error=f"ended with torchrun, which was {signal_words(launcher_signal)}",
                               log_tail=tail, log_path=str(log_path))
        if timed_out:
            return RankOutcome(rank, "hung", error="still running at the deadline", log_tail=tail,
                               log_path=str(log_path))
        state = FINISHED if returncode == 0 else "stopped"
        return RankOutcome(rank, state, exitcode=0 if state == FINISHED else None, log_tail=tail,
                           log_path=str(log_path))
    if exitcode == -signal.SIGTERM and root is not None and root != rank:
        return RankOutcome(rank, "stopped", error="terminated by torchrun after a peer failed", exitcode=exitcode,
                           log_tail=tail, log_path=str(log_path))
    how = signal_words(-exitcode) if exitcode < 0 else f"exit code {exitcode}"
    return RankOutcome(rank, "crashed", error=how, exitcode=exitcode, log_tail=tail, log_path=str(log_path))


def inherited_environment() -> dict[str, str]:
    """What a launch (and the op build its ranks load from) inherits: preflight's own process environment.

    The one place a launch reads ``os.environ``: torchrun and its ranks are real processes started from
    preflight's process, whatever environment a test hands the node model (``Transports.environ`` is this
    same environment in a real run); the op build must see what the ranks see, or they look for its
    folder elsewhere (``deepspeed_ops.extensions_root``, ``op_cache.identity``)."""
    return dict(os.environ)


def _environment(overrides: Mapping[str, str | None], run_dir: Path, deadline_s: float, *, backend: str | None,
                 pg_timeout_s: float | None) -> dict[str, str]:
    """The inherited environment with a launch's overrides (``None`` removes) and preflight's own variables."""
    env = inherited_environment()
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env[RUN_DIR_ENV] = str(run_dir)
    env[PARENT_PID_ENV] = str(os.getpid())
    env[RANK_DEADLINE_ENV] = str(time.time() + deadline_s + RANK_DEADLINE_GRACE_S)
    if backend is not None:
        env[BACKEND_ENV] = backend
    if pg_timeout_s is not None:
        env[PG_TIMEOUT_ENV] = str(pg_timeout_s)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


# -- reading what the ranks left ------------------------------------------------------------------------


def read_phases(plan: LaunchPlan, run_dir: Path, log: str, tail: str, *, hung: str | None, cut: bool,
                cut_reason: str, now: float, launcher_signal: int | None = None) -> tuple[PhaseResult, ...]:
    """One :class:`PhaseResult` per planned phase from the files the ranks left."""
    exitcodes = failure_exitcodes(log)
    root = root_cause_rank(log)
    marks = [RankProgress.read(run_dir / progress_name(r)) for r in range(plan.nproc)]
    startup_errors = [RankError.read(run_dir / error_name(r, "startup")) for r in range(plan.nproc)]
    in_startup = any(m is None or m.phase == STARTUP for m in marks)
    results: list[PhaseResult] = []
    broken: PhaseResult | None = None
    for position, phase in enumerate(plan.phases):
        ranks = tuple(_rank_outcome(run_dir, rank, phase.name, phase.parse_output, position, marks[rank],
                                    startup_errors[rank], exitcodes, root, hung=hung, cut=cut, now=now,
                                    launcher_signal=launcher_signal)
                      for rank in range(plan.nproc))
        states = {r.state for r in ranks}
        reason = ""
        if states == {FINISHED}:
            state = FINISHED
        elif broken is not None or states == {NOT_RUN}:
            state = NOT_RUN
            reason = (f"phase {broken.phase} broke the launch first ({broken.describe()})" if broken is not None
                      else cut_reason if cut else "the launch ended before this phase")
        else:
            state = BROKEN
        phase_cut = state == BROKEN and cut and hung is None
        started = [m.phase_started for m in marks if m is not None and m.phase == phase.name]
        result = PhaseResult(
            phase=phase.name, worker=phase.entry, nproc=plan.nproc, ranks=ranks, state=state,
            timed_out=state == BROKEN and hung in (phase.name, STARTUP), cut=phase_cut,
            duration_s=max(now - min(started) if started else 0.0, _finished_duration(ranks)),
            deadline_s=phase.budget_s, run_dir=run_dir, launcher_tail=tail,
            reason=cut_reason if phase_cut else reason,
            during=STARTUP if state == BROKEN and position == 0 and in_startup else "", launch_name=plan.name,
            launcher_signal=launcher_signal if state == BROKEN else None)
        if state == BROKEN and broken is None:
            broken = result
        results.append(result)
    return tuple(results)


def _finished_duration(ranks: Sequence[RankOutcome]) -> float:
    durations = [r.result.duration_s for r in ranks if r.state == FINISHED and r.result is not None]
    return max(durations, default=0.0)


def _rank_outcome(run_dir: Path, rank: int, phase: str, parse_output: OutputParser, position: int,
                  mark: RankProgress | None, startup_error: RankError | None, exitcodes: dict[int, int],
                  root: int | None, *, hung: str | None, cut: bool, now: float,
                  launcher_signal: int | None = None) -> RankOutcome:
    log_path = run_dir / f"rank{rank}.log"
    tail = logs.tail(log_path)
    seq = mark.seq if mark is not None else 0
    try:
        result = read_rank_result(run_dir / result_name(rank, phase), parse_output)
    except MalformedResult as exc:  # the rank finished but wrote what its worker never writes: its fault, named
        return RankOutcome(rank, "crashed", error=f"its {phase} result cannot be read: {exc}",
                           exitcode=exitcodes.get(rank), log_tail=tail, log_path=str(log_path), progress_seq=seq)
    if result is not None:
        return RankOutcome(rank, FINISHED, result=result, log_tail=tail, log_path=str(log_path), progress_seq=seq)
    error = RankError.read(run_dir / error_name(rank, phase))
    if error is None and position == 0:
        error = startup_error
    if error is not None:
        return RankOutcome(rank, "crashed", error=error.error, exitcode=1, log_tail=tail,
                           log_path=str(log_path), error_time=error.time, progress_seq=seq)
    current = mark.phase if mark is not None else STARTUP
    here = current == phase or (position == 0 and current == STARTUP)
    if not here:
        return RankOutcome(rank, NOT_RUN, log_tail=tail, log_path=str(log_path), progress_seq=seq)
    label = mark.label if mark is not None else None
    idle = max(0.0, now - mark.time) if mark is not None else None
    if hung in (phase, STARTUP):
        return RankOutcome(rank, "hung", error="still running past the phase's budget", log_tail=tail,
                           log_path=str(log_path), last_phase=label, idle_s=idle, progress_seq=seq)
    if cut:
        return RankOutcome(rank, "cut", error="stopped by the deadline", log_tail=tail, log_path=str(log_path),
                           last_phase=label, idle_s=idle, progress_seq=seq)
    exitcode = exitcodes.get(rank)
    if exitcode == -signal.SIGTERM and root is not None and root != rank:
        return RankOutcome(rank, "stopped", error="terminated by torchrun after a peer failed", exitcode=exitcode,
                           log_tail=tail, log_path=str(log_path), last_phase=label, progress_seq=seq)
    if exitcode is not None:
        how = signal_words(-exitcode) if exitcode < 0 else f"exit code {exitcode}"
        return RankOutcome(rank, "crashed", error=how, exitcode=exitcode, log_tail=tail, log_path=str(log_path),
                           last_phase=label, progress_seq=seq)
    if launcher_signal is not None:  # torchrun itself was killed (the OOM killer picks the biggest process)
        return RankOutcome(rank, "stopped", error=f"ended with torchrun, which was {signal_words(launcher_signal)}",
                           log_tail=tail, log_path=str(log_path), last_phase=label, progress_seq=seq)
    return RankOutcome(rank, "stopped", error="ended without a result after a peer failed", log_tail=tail,
                       log_path=str(log_path), last_phase=label, progress_seq=seq)
