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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

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
)
from preflight.launch.plan import LaunchPlan
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

TERM_GRACE_S = 3.0
EXIT_GRACE_S = 10.0
LOG_TAIL_LINES = 30
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
                 hard_deadline: float, cut_reason: str) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.proc = proc
        self.started = started
        self.hard_deadline = hard_deadline
        self.cut_reason = cut_reason
        self.gate = run_dir / GATE_FILE

    def open_gate(self) -> None:
        """Let gated phases (measurements) start."""
        self.gate.touch(exist_ok=True)

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
        try:
            hung, cut = self._watch()
        finally:
            leftovers = stop(self.proc, self.run_dir)
        duration = time.monotonic() - self.started
        redact_files(self.run_dir)  # the ranks wrote raw: scrubbed before anything reads what they left
        log = _read(self.run_dir / "torchrun.log")
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        phases = read_phases(self.plan, self.run_dir, log, tail, hung=hung, cut=cut,
                             cut_reason=self.cut_reason, now=time.time())
        return LaunchResult(name=self.plan.name, nproc=self.plan.nproc, phases=phases, timed_out=hung is not None,
                            cut=cut, returncode=self.proc.returncode, duration_s=duration, run_dir=self.run_dir,
                            launcher_tail=tail, leftovers=tuple(leftovers))

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
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / PLAN_FILE
    plan.write(plan_path, gate=None if not any(p.gated for p in plan.phases) else run_dir / GATE_FILE)
    # The process group's own timeout is longer than any phase's budget, so a hang is seen by the
    # launcher with every rank still alive (and each rank's last label known), not as a peer's error.
    longest = max([plan.startup_budget_s, *(p.budget_s for p in plan.phases)])
    env = _environment(plan.env, run_dir, deadline_s, backend=plan.backend,
                       pg_timeout_s=pg_timeout_s if pg_timeout_s is not None else longest + 30.0)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stage_workers(run_dir)), env.get("PYTHONPATH")]))
    started = time.monotonic()
    with open(run_dir / "torchrun.log", "wb") as sink:
        # cwd is the launch's own directory: ``-m`` puts the working directory first on the ranks'
        # sys.path, and a stray ./numpy where preflight was started must not shadow the real one
        proc = subprocess.Popen(torchrun_argv(plan.nproc, plan_path, python), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=run_dir,
                                preexec_fn=die_with_parent)  # noqa: PLW1509 - only prctl runs before exec
    return RunningLaunch(plan, run_dir, proc, started, started + deadline_s, cut_reason)


def stage_workers(run_dir: Path) -> Path:
    """A directory holding only ``preflight`` (a link to this package), put first on the ranks' path:
    the job's interpreter (``--python``) may not have preflight installed, or another version of it.
    The ranks import ``preflight.workers`` from it, which needs nothing but the standard library and torch."""
    stage = run_dir / ".import"
    stage.mkdir(parents=True, exist_ok=True)
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


def launch_script(script: Path, *, nproc: int, run_dir: Path, deadline_s: float, args: Sequence[str] = (),
                  env: Mapping[str, str | None] | None = None, python: str = sys.executable) -> ScriptResult:
    """``torchrun --standalone --nproc-per-node=N script args`` as the job's own launch would be, with
    the launcher's guarantees (own session, dies with preflight, hard deadline, only its own processes
    stopped). For a user's script, which writes no phase results: each rank's end comes from its exit
    code in torchrun's failure summary (none for ranks that exited 0) or the deadline."""
    run_dir.mkdir(parents=True, exist_ok=True)
    environment = _environment(env or {}, run_dir, deadline_s, backend=None, pg_timeout_s=None)
    argv = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0",
            "--monitor-interval=0.1", str(script), *args]
    started = time.monotonic()
    with open(run_dir / "torchrun.log", "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=environment, start_new_session=True,
                                preexec_fn=die_with_parent)  # noqa: PLW1509 - only prctl runs before exec
    timed_out = False
    try:
        while proc.poll() is None:
            if time.monotonic() - started >= deadline_s:
                timed_out = True
                break
            time.sleep(POLL_S)
    finally:
        leftovers = stop(proc, run_dir)
    duration = time.monotonic() - started
    redact_files(run_dir)  # the script's ranks wrote raw: scrubbed before anything reads what they left
    log = _read(run_dir / "torchrun.log")
    tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
    exitcodes = failure_exitcodes(log)
    root = root_cause_rank(log)
    ranks = tuple(_script_rank(run_dir, rank, exitcodes.get(rank), root, timed_out, proc.returncode)
                  for rank in range(nproc))
    return ScriptResult(nproc=nproc, ranks=ranks, timed_out=timed_out, returncode=proc.returncode,
                        duration_s=duration, deadline_s=deadline_s, run_dir=run_dir,
                        launcher_tail=tail, root=root, leftovers=tuple(leftovers))


def _script_rank(run_dir: Path, rank: int, exitcode: int | None, root: int | None, timed_out: bool,
                 returncode: int | None) -> RankOutcome:
    log_path = run_dir / f"rank{rank}.log"
    tail = _tail(log_path)
    if exitcode is None:
        if timed_out:
            return RankOutcome(rank, "hung", error="still running at the deadline", log_tail=tail,
                               log_path=str(log_path))
        state = FINISHED if returncode == 0 else "stopped"
        return RankOutcome(rank, state, exitcode=0 if state == FINISHED else None, log_tail=tail,
                           log_path=str(log_path))
    if exitcode == -signal.SIGTERM and root is not None and root != rank:
        return RankOutcome(rank, "stopped", error="terminated by torchrun after a peer failed", exitcode=exitcode,
                           log_tail=tail, log_path=str(log_path))
    how = f"killed by {_signal_name(-exitcode)}" if exitcode < 0 else f"exit code {exitcode}"
    return RankOutcome(rank, "crashed", error=how, exitcode=exitcode, log_tail=tail, log_path=str(log_path))


def _environment(overrides: Mapping[str, str | None], run_dir: Path, deadline_s: float, *, backend: str | None,
                 pg_timeout_s: float | None) -> dict[str, str]:
    """The inherited environment with a launch's overrides (``None`` removes) and preflight's own variables."""
    env = dict(os.environ)
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


# -- stopping ---------------------------------------------------------------------------------------


def stop(proc: subprocess.Popen[bytes], run_dir: Path) -> list[int]:
    """Terminate torchrun and every rank of this launch (each in its own session), then kill what is
    left. Only processes started for ``run_dir`` are signalled. Returns pids still alive (should be none)."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    family = [p for p in family if p.pid == proc.pid or _ours(p, run_dir)]
    family.extend(_rank_processes(run_dir, {p.pid for p in family}))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in family if _alive(p)]
        if not alive and proc.poll() is not None:
            break
        for pgid in _process_groups(alive):
            _signal_group(pgid, sig)
        for p in alive:
            _signal_pid(p.pid, sig)
        psutil.wait_procs(alive, timeout=TERM_GRACE_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=TERM_GRACE_S)
    return [p.pid for p in family if _alive(p)]


def _ours(process: psutil.Process, run_dir: Path) -> bool:
    """True for a process of this launch: it inherited the launch's ``PREFLIGHT_RUN_DIR``, or its
    command line (or a parent's: torch's own helpers) names the launch's directory. Never a process
    of another run."""
    try:
        with contextlib.suppress(psutil.AccessDenied, OSError):
            if process.environ().get(RUN_DIR_ENV) == str(run_dir):
                return True
        if str(run_dir) in " ".join(process.cmdline()):
            return True
        return any(str(run_dir) in " ".join(parent.cmdline()) for parent in process.parents())
    except psutil.Error:
        return False


def _rank_processes(run_dir: Path, known: set[int]) -> list[psutil.Process]:
    """Ranks found through the pid files they wrote (they are re-parented if torchrun died first)."""
    found = []
    for pid_file in run_dir.glob("rank*.pid"):
        try:
            pid = int(json.loads(pid_file.read_text())["pid"])
            process = psutil.Process(pid)
            if pid not in known and _ours(process, run_dir):
                found.append(process)
        except (ValueError, KeyError, TypeError, OSError, psutil.Error):
            continue
    return found


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _process_groups(processes: Sequence[psutil.Process]) -> set[int]:
    groups = set()
    for p in processes:
        try:
            groups.add(os.getpgid(p.pid))
        except ProcessLookupError:
            continue
    groups.discard(os.getpgid(0))  # never signal our own group
    return groups


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# -- reading what the ranks left ------------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(_read(path).splitlines()[-lines:])


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_phases(plan: LaunchPlan, run_dir: Path, log: str, tail: str, *, hung: str | None, cut: bool,
                cut_reason: str, now: float) -> tuple[PhaseResult, ...]:
    """One :class:`PhaseResult` per planned phase from the files the ranks left."""
    exitcodes = failure_exitcodes(log)
    root = root_cause_rank(log)
    marks = [RankProgress.read(run_dir / progress_name(r)) for r in range(plan.nproc)]
    startup_errors = [_json(run_dir / error_name(r, "startup")) for r in range(plan.nproc)]
    in_startup = any(m is None or m.phase == STARTUP for m in marks)
    results: list[PhaseResult] = []
    broken: PhaseResult | None = None
    for position, phase in enumerate(plan.phases):
        ranks = tuple(_rank_outcome(run_dir, rank, phase.name, position, marks[rank], startup_errors[rank],
                                    exitcodes, root, hung=hung, cut=cut, now=now) for rank in range(plan.nproc))
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
            during=STARTUP if state == BROKEN and position == 0 and in_startup else "", launch_name=plan.name)
        if state == BROKEN and broken is None:
            broken = result
        results.append(result)
    return tuple(results)


def _finished_duration(ranks: Sequence[RankOutcome]) -> float:
    durations = [float((r.result or {}).get("duration_s", 0.0)) for r in ranks if r.state == FINISHED]
    return max(durations, default=0.0)


def _rank_outcome(run_dir: Path, rank: int, phase: str, position: int, mark: RankProgress | None,
                  startup_error: dict[str, Any] | None, exitcodes: dict[int, int], root: int | None, *,
                  hung: str | None, cut: bool, now: float) -> RankOutcome:
    log_path = run_dir / f"rank{rank}.log"
    tail = _tail(log_path)
    seq = mark.seq if mark is not None else 0
    result = _json(run_dir / result_name(rank, phase))
    if result is not None:
        return RankOutcome(rank, FINISHED, result=result, log_tail=tail, log_path=str(log_path), progress_seq=seq)
    error = _json(run_dir / error_name(rank, phase))
    if error is None and position == 0:
        error = startup_error
    if error is not None:
        return RankOutcome(rank, "crashed", error=str(error.get("error")), exitcode=1, log_tail=tail,
                           log_path=str(log_path), error_time=_float(error.get("time")), progress_seq=seq)
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
        how = f"killed by {_signal_name(-exitcode)}" if exitcode < 0 else f"exit code {exitcode}"
        return RankOutcome(rank, "crashed", error=how, exitcode=exitcode, log_tail=tail, log_path=str(log_path),
                           last_phase=label, progress_seq=seq)
    return RankOutcome(rank, "stopped", error="ended without a result after a peer failed", log_tail=tail,
                       log_path=str(log_path), last_phase=label, progress_seq=seq)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
