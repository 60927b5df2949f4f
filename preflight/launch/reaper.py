"""Stopping everything a launch started, however it got away, and saying what had to be stopped.

A process a rank starts can leave the ranks' reach: a ``setsid`` double-fork daemon is re-parented to
init in a session of its own; a ``multiprocessing.Pool`` replaces the workers its rank stops. So a
launch is found four ways, each catching what the others miss:

- torchrun's process tree, and the ranks named by their pid files (re-parented when torchrun died);
- the run's tag: every process started under the launch inherits ``PREFLIGHT_RUN_DIR=<its own
  directory>`` in its environment (``/proc/PID/environ`` is the environment it was started with, so
  a forked daemon keeps it), which no process of another run carries;
- the process groups of everything found (a rank's helpers in its group);
- a cgroup of the launch's own where this process may make one (cgroup v2, ``cgroup.kill``): torchrun
  is started inside it and nothing it starts can leave it, whatever it does with its environment.

Everything found gets SIGTERM, then SIGKILL after a grace; whatever turns up while that happens (a
Pool's replacements) is killed at once, and the cgroup is killed last.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from preflight.workers.common import RUN_DIR_ENV

TERM_GRACE_S = 3.0
BOOTSTRAP_TAIL = "rehearse/bootstrap.py"  # in the command line of a rehearsal rank (and of its forks)
KILL_ROUNDS = 4
CGROUP_PREFIX = "preflight-launch-"


@dataclass(frozen=True, slots=True)
class Stopped:
    """One process the launcher stopped: who it was, how it was found, whether SIGTERM was enough."""

    pid: int
    command: str
    found_by: str
    role: str  # "torchrun", "rank" or "other" (something a rank started)
    needed_kill: bool

    def describe(self) -> str:
        """``pid 4242 (sleep 600; found by the run's tag; ignored SIGTERM)``."""
        killed = "; ignored SIGTERM" if self.needed_kill else ""
        return f"pid {self.pid} ({self.what}; found by {self.found_by}{killed})"

    @property
    def what(self) -> str:
        """The process in a few words: ``sleep 600``, or ``a fork of a rank`` (a daemon or a pool worker the
        script forked carries its rank's command line)."""
        words = self.command.split()
        if not words:
            return "a process that had left"
        if any(w.endswith(BOOTSTRAP_TAIL) for w in words):
            return "a fork of a rank"
        short = " ".join([os.path.basename(words[0]), *(os.path.basename(w) if "/" in w else w for w in words[1:])])
        return short if len(short) <= 60 else short[:57] + "..."


@dataclass(frozen=True, slots=True)
class StopReport:
    """What :func:`stop_launch` found and stopped, and anything still alive after it (should be nothing)."""

    stopped: tuple[Stopped, ...] = ()
    alive: tuple[int, ...] = ()

    def others(self) -> list[Stopped]:
        """The stopped processes that were neither torchrun nor a rank."""
        return [s for s in self.stopped if s.role == "other"]


# -- the launch's cgroup ------------------------------------------------------------------------


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 directory (``0::/path`` in /proc/self/cgroup under the cgroup2 mount)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    mount = next((line.split()[4] for line in mounts if " - cgroup2 " in line), None)
    if relative is None or mount is None:
        return None
    return Path(mount) / relative.lstrip("/")


class LaunchCgroup:
    """A cgroup v2 made for one launch below this process's own, when this process may make one
    (root, or a delegated subtree); :meth:`make` returns None everywhere else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._procs = os.fsencode(path / "cgroup.procs")  # ready before a fork: the child only makes syscalls

    @classmethod
    def make(cls) -> LaunchCgroup | None:
        """A new, empty cgroup for a launch, or None where none can be made (that is not an error)."""
        parent = _own_cgroup()
        if parent is None or not (parent / "cgroup.procs").exists():
            return None
        _remove_stale(parent)
        path = parent / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError:
            return None
        if not os.access(path / "cgroup.procs", os.W_OK):
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def enter(self) -> None:
        """Move the calling process in (a ``preexec_fn``: runs in the child before exec). Fails quietly:
        the other three ways still find the launch."""
        try:
            fd = os.open(self._procs, os.O_WRONLY)
            try:
                os.write(fd, b"%d" % os.getpid())
            finally:
                os.close(fd)
        except OSError:
            return

    def pids(self) -> list[int]:
        """Every process in the cgroup now."""
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """SIGKILL everything in it (``cgroup.kill``, Linux 5.14; each pid before that)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            for pid in self.pids():
                _signal(pid, signal.SIGKILL)

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the (emptied) cgroup; a cgroup still populated after ``wait_s`` is left for the next run."""
        until = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < until:
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _remove_stale(parent: Path) -> None:
    """Empty launch cgroups a killed preflight left (its pid is in the name and gone)."""
    with contextlib.suppress(OSError):
        for child in parent.glob(f"{CGROUP_PREFIX}*"):
            try:
                owner = int(child.name[len(CGROUP_PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if owner != os.getpid() and not psutil.pid_exists(owner):
                with contextlib.suppress(OSError):
                    child.rmdir()  # refused while populated: then it stays


# -- finding the launch's processes --------------------------------------------------------------


def tagged(run_dir: Path) -> list[int]:
    """Every live process whose starting environment carries this launch's ``PREFLIGHT_RUN_DIR``."""
    needle = f"{RUN_DIR_ENV}={run_dir}".encode()
    found = []
    me = os.getpid()
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for pid in entries:
        if pid == me:
            continue
        try:
            data = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if data.startswith(needle + b"\0") or (b"\0" + needle + b"\0") in data or data.endswith(b"\0" + needle):
            found.append(pid)
    return [pid for pid in found if _alive(pid)]


def ours(process: psutil.Process, run_dir: Path) -> bool:
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


def rank_pids(run_dir: Path) -> list[int]:
    """The pids the ranks wrote to ``rank<N>.pid``."""
    pids = []
    for pid_file in run_dir.glob("rank*.pid"):
        with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
            pids.append(int(json.loads(pid_file.read_text())["pid"]))
    return pids


def _tree(proc: subprocess.Popen[bytes], run_dir: Path) -> list[int]:
    try:
        root = psutil.Process(proc.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    return [p.pid for p in family if p.pid == proc.pid or ours(p, run_dir)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _command(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())[:400]
    except psutil.Error:
        return ""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _signal_groups(pids: Iterable[int], sig: int) -> None:
    own = os.getpgid(0)
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    for group in groups - {own}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


# -- stopping -----------------------------------------------------------------------------------


def stop_launch(proc: subprocess.Popen[bytes], run_dir: Path, cgroup: LaunchCgroup | None = None,
                grace_s: float = TERM_GRACE_S) -> StopReport:
    """Terminate torchrun and every process of this launch, then kill what is left. Only processes of
    ``run_dir``'s launch are signalled."""
    ranks = set(rank_pids(run_dir))
    found: dict[int, str] = {}
    for how, pids in (("torchrun's process tree", _tree(proc, run_dir)),
                      ("a rank's pid file", [p for p in ranks if _alive(p) and _is_ours(p, run_dir)]),
                      ("the run's tag", tagged(run_dir)),
                      ("the launch's cgroup", cgroup.pids() if cgroup is not None else [])):
        for pid in pids:
            found.setdefault(pid, how)
    found = {pid: how for pid, how in found.items() if pid != os.getpid() and _alive(pid)}
    commands = {pid: _command(pid) for pid in found}
    needed_kill: set[int] = set()
    if found:
        _signal_groups(found, signal.SIGTERM)
        for pid in found:
            _signal(pid, signal.SIGTERM)
        until = time.monotonic() + grace_s
        while time.monotonic() < until and any(_alive(pid) for pid in found):
            time.sleep(0.02)
        needed_kill = {pid for pid in found if _alive(pid)}
        _signal_groups(needed_kill, signal.SIGKILL)
        for pid in needed_kill:
            _signal(pid, signal.SIGKILL)
    for _ in range(KILL_ROUNDS):  # what turned up meanwhile (a Pool's replacement workers): killed at once
        newcomers = [pid for pid in [*tagged(run_dir), *(cgroup.pids() if cgroup is not None else [])]
                     if pid not in found and pid != os.getpid() and _alive(pid)]
        if not newcomers:
            break
        for pid in newcomers:
            found[pid] = "the run's tag (started while the launch was being stopped)"
            commands[pid] = _command(pid)
            needed_kill.add(pid)
            _signal(pid, signal.SIGKILL)
        time.sleep(0.05)
    if cgroup is not None:
        cgroup.kill()
        cgroup.remove()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(_alive(pid) for pid in found):
        time.sleep(0.02)
    stopped = tuple(Stopped(pid=pid, command=commands.get(pid, ""), found_by=how,
                            role="torchrun" if pid == proc.pid else "rank" if pid in ranks else "other",
                            needed_kill=pid in needed_kill) for pid, how in found.items())
    return StopReport(stopped=stopped, alive=tuple(pid for pid in found if _alive(pid)))


def _is_ours(pid: int, run_dir: Path) -> bool:
    try:
        return ours(psutil.Process(pid), run_dir)
    except psutil.Error:
        return False
