"""The only code that starts ``torchrun``: one launch, a hard deadline, a verdict per rank.

``torchrun --standalone`` runs as a child in its own session. torchrun starts each rank in a
session of its own too, so on expiry the launcher signals every process group it can find
(torchrun's, each rank's from a snapshot of descendants taken before anything is killed, and the
pids the ranks wrote), first SIGTERM, then SIGKILL after a grace period. Each rank writes
``rank<N>.json`` (finished), ``rank<N>.error.json`` (raised) and ``rank<N>.log``; a rank with
neither file was killed while still running (hung) or died without a word (crashed by a signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from preflight.workers.common import BACKEND_ENV, PG_TIMEOUT_ENV, RUN_DIR_ENV

TERM_GRACE_S = 3.0
EXIT_GRACE_S = 10.0
LOG_TAIL_LINES = 30
POLL_S = 0.05

_ROOT_CAUSE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """How one rank ended: ``finished``, ``crashed``, ``hung`` or ``stopped`` (killed after a peer failed)."""

    rank: int
    state: str
    result: dict[str, Any] | None = None
    error: str | None = None
    exitcode: int | None = None
    log_tail: str = ""
    log_path: str = ""
    last_phase: str | None = None
    idle_s: float | None = None
    progress_seq: int = 0
    error_time: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report (the result itself is reported by the check)."""
        return {"rank": self.rank, "state": self.state, "error": self.error, "exitcode": self.exitcode,
                "log_path": self.log_path, "last_phase": self.last_phase, "idle_s": self.idle_s}

    def where(self) -> str:
        """``at 'DDP step' for 12 s`` (where a rank was when it stopped), or empty."""
        if self.last_phase is None:
            return "before it started"
        idle = f" for {self.idle_s:.0f} s" if self.idle_s is not None else ""
        return f"at '{self.last_phase}'{idle}"


@dataclass(frozen=True, slots=True)
class LaunchResult:
    """Everything one launch produced."""

    worker: str
    nproc: int
    ranks: tuple[RankOutcome, ...]
    timed_out: bool
    returncode: int | None
    duration_s: float
    deadline_s: float
    run_dir: Path
    launcher_tail: str
    leftovers: tuple[int, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every rank finished and wrote a result."""
        return all(r.state == "finished" for r in self.ranks)

    def ranks_in(self, state: str) -> list[int]:
        """Ranks that ended in ``state``."""
        return [r.rank for r in self.ranks if r.state == state]

    def describe(self) -> str:
        """One line: what went wrong, naming ranks (empty when ok)."""
        if self.ok:
            return ""
        parts = []
        root = self.root_cause()
        if root is not None:
            parts.append(f"rank {root} failed first ({self.ranks[root].error})")
        others = [r for r in self.ranks_in("crashed") if r != root]
        if others:
            parts.append(f"{_ranks(others)} also crashed")
        hung = [r for r in self.ranks if r.state == "hung"]
        if hung:
            parts.append(f"{_ranks([r.rank for r in hung])} did not finish: "
                         + ", ".join(f"rank {r.rank} {r.where()}" for r in hung))
            stuck = self.stuck_ranks()
            if stuck and len(stuck) < len(hung):
                parts.append(f"{_ranks(stuck)} got the least far (the others wait on it)")
        stopped = self.ranks_in("stopped")
        if stopped:
            parts.append(f"{_ranks(stopped)} {'was' if len(stopped) == 1 else 'were'} stopped after a peer failed")
        if self.timed_out:
            parts.append(f"launch killed at its {self.deadline_s:.0f} s deadline")
        return "; ".join(parts) or f"torchrun exited with code {self.returncode}"

    def root_cause(self) -> int | None:
        """The rank that failed first: torchrun's "Root Cause" when it names one, else the earliest error."""
        crashed = [r for r in self.ranks if r.state == "crashed"]
        if not crashed:
            return None
        named = _root_cause_rank(self.launcher_tail)
        if named is not None and any(r.rank == named for r in crashed):
            return named
        return min(crashed, key=lambda r: r.error_time if r.error_time is not None else float("inf")).rank

    def stuck_ranks(self) -> list[int]:
        """Among hung ranks, those that got the least far: the likely culprits (peers wait on them)."""
        hung = [r for r in self.ranks if r.state == "hung"]
        if not hung:
            return []
        least = min(r.progress_seq for r in hung)
        return [r.rank for r in hung if r.progress_seq == least]

    def evidence(self) -> dict[str, str]:
        """Log tails of every rank that did not finish, plus torchrun's own tail."""
        out = {f"rank{r.rank} log tail ({r.state})": r.log_tail for r in self.ranks if r.state != "finished"}
        if not self.ok and self.launcher_tail:
            out["torchrun output tail"] = self.launcher_tail
        return out


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def torchrun_argv(worker: str, nproc: int, args: Sequence[str] = ()) -> list[str]:
    """The command line of a launch: the same launcher a user's job uses."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--max-restarts=0", "--monitor-interval=0.1", "-m", worker, *args]


def launch(
    worker: str,
    *,
    nproc: int,
    deadline_s: float,
    args: Sequence[str] = (),
    env_overrides: Mapping[str, str | None] | None = None,
    backend: str = "auto",
    pg_timeout_s: float | None = None,
    run_dir: Path | None = None,
) -> LaunchResult:
    """Run ``python -m <worker>`` on ``nproc`` ranks under torchrun; never outlive ``deadline_s`` by more
    than the kill grace. An ``env_overrides`` value of ``None`` removes that variable for the launch."""
    run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="preflight-launch-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for key, value in (env_overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env[RUN_DIR_ENV] = str(run_dir)
    env[BACKEND_ENV] = backend
    # The process group's own timeout is longer than the deadline, so a hang is seen by the launcher
    # with every rank still alive (and each rank's last phase known), not as a peer's timeout error.
    env[PG_TIMEOUT_ENV] = str(pg_timeout_s if pg_timeout_s is not None else deadline_s + 30.0)
    env.setdefault("OMP_NUM_THREADS", "1")
    launcher_log = run_dir / "torchrun.log"
    started = time.monotonic()
    with open(launcher_log, "wb") as sink:
        proc = subprocess.Popen(torchrun_argv(worker, nproc, args), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        timed_out = False
        try:
            timed_out = _wait(proc, run_dir, nproc, started + deadline_s)
        finally:
            leftovers = _stop(proc, run_dir)
    duration = time.monotonic() - started
    launcher_tail = _tail(launcher_log)
    ranks = tuple(_rank_outcome(run_dir, rank, timed_out, launcher_tail) for rank in range(nproc))
    return LaunchResult(worker=worker, nproc=nproc, ranks=ranks, timed_out=timed_out, returncode=proc.returncode,
                        duration_s=duration, deadline_s=deadline_s, run_dir=run_dir, launcher_tail=launcher_tail,
                        leftovers=tuple(leftovers))


def _wait(proc: subprocess.Popen[bytes], run_dir: Path, nproc: int, deadline: float) -> bool:
    """Wait for torchrun; True when the deadline passed first. Once every rank has written its
    result, torchrun gets a short grace to exit (a teardown that wedges must not cost the deadline)."""
    all_done_at: float | None = None
    while proc.poll() is None:
        now = time.monotonic()
        if now >= deadline:
            return True
        if all_done_at is None and all((run_dir / f"rank{r}.json").exists() for r in range(nproc)):
            all_done_at = now
        if all_done_at is not None and now - all_done_at > EXIT_GRACE_S:
            return False
        time.sleep(POLL_S)
    return False


def _stop(proc: subprocess.Popen[bytes], run_dir: Path) -> list[int]:
    """Terminate torchrun and every rank (each in its own session), then kill what is left.

    Returns pids still alive after SIGKILL (should be empty)."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    family.extend(_rank_processes(run_dir, {p.pid for p in family}))
    groups = {p.pid for p in family} | {proc.pid}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in family if _alive(p)]
        if not alive and proc.poll() is not None:
            break
        for pgid in _process_groups(groups):
            _signal_group(pgid, sig)
        for p in alive:
            _signal_pid(p.pid, sig)
        psutil.wait_procs(alive, timeout=TERM_GRACE_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=TERM_GRACE_S)
    return [p.pid for p in family if _alive(p)]


def _rank_processes(run_dir: Path, known: set[int]) -> list[psutil.Process]:
    """Ranks found through the pid files they wrote (they are re-parented if torchrun died first).
    A pid is trusted only while its command line still names a python process."""
    found = []
    for pid_file in run_dir.glob("rank*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            proc = psutil.Process(pid)
            if pid not in known and "python" in " ".join(proc.cmdline()).lower():
                found.append(proc)
        except (ValueError, OSError, psutil.Error):
            continue
    return found


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _process_groups(pids: set[int]) -> set[int]:
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
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


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _rank_outcome(run_dir: Path, rank: int, timed_out: bool, launcher_tail: str) -> RankOutcome:
    log_path = run_dir / f"rank{rank}.log"
    tail = _tail(log_path)
    phase, idle, seq = _progress(run_dir, rank)
    result_file = run_dir / f"rank{rank}.json"
    error_file = run_dir / f"rank{rank}.error.json"
    if result_file.exists():
        return RankOutcome(rank, "finished", result=json.loads(result_file.read_text()), log_tail=tail,
                           log_path=str(log_path))
    if error_file.exists():
        data = json.loads(error_file.read_text())
        return RankOutcome(rank, "crashed", error=data.get("error"), exitcode=1, log_tail=tail,
                           log_path=str(log_path), error_time=data.get("time"))
    if timed_out:
        return RankOutcome(rank, "hung", error="still running at the deadline", log_tail=tail,
                           log_path=str(log_path), last_phase=phase, idle_s=idle, progress_seq=seq)
    exitcode = _exitcode_from_torchrun(launcher_tail, rank)
    root = _root_cause_rank(launcher_tail)
    if exitcode == -signal.SIGTERM and root is not None and root != rank:
        return RankOutcome(rank, "stopped", error="terminated by torchrun after a peer failed", exitcode=exitcode,
                           log_tail=tail, log_path=str(log_path))
    if exitcode is not None:
        how = f"killed by {_signal_name(-exitcode)}" if exitcode < 0 else f"exit code {exitcode}"
        return RankOutcome(rank, "crashed", error=how, exitcode=exitcode, log_tail=tail or launcher_tail,
                           log_path=str(log_path))
    return RankOutcome(rank, "stopped", error="ended without a result after a peer failed", log_tail=tail,
                       log_path=str(log_path))


def _progress(run_dir: Path, rank: int) -> tuple[str | None, float | None, int]:
    """The rank's last announced phase, how long ago it began, and how many phases it went through."""
    try:
        data = json.loads((run_dir / f"rank{rank}.progress").read_text())
        return str(data["phase"]), max(0.0, time.time() - float(data["time"])), int(data.get("seq", 0))
    except (OSError, ValueError, KeyError):
        return None, None, 0


def _root_cause_rank(text: str) -> int | None:
    """The rank torchrun names under "Root Cause (first observed failure)"."""
    marker = text.find("Root Cause")
    if marker < 0:
        return None
    match = _ROOT_CAUSE.search(text, marker)
    return int(match.group(1)) if match else None


def _exitcode_from_torchrun(text: str, rank: int) -> int | None:
    """torchrun's failure summary names each failed rank with its exit code."""
    for match in _ROOT_CAUSE.finditer(text):
        if int(match.group(1)) == rank:
            return int(match.group(2))
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
