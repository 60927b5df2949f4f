"""Processes and ports: our ancestors, leftover training runs, a listener on the rendezvous port.

The process table is read from ``/proc`` under a filesystem root (proc(5): ``<pid>/stat`` for the
parent and name, ``<pid>/cmdline``, ``<pid>/status`` for the owner, ``<pid>/fd`` for the sockets a
process holds), so a test lays out a fake ``/proc``. Reading other users' processes or sockets may be
refused; that becomes "unknown", never a crash.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RENDEZVOUS_PORT = 29500
"""torch.distributed's default MASTER_PORT (torchrun without --standalone, DeepSpeed, accelerate)."""

_TRAINING_SCRIPT = re.compile(r"(^|[_\-/])(train|training|pretrain|finetune|fine_tune|sft)[^/]*\.py$", re.IGNORECASE)
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.launch",
                     "deepspeed.launcher.runner")
_LAUNCHER_NAMES = ("torchrun", "deepspeed", "accelerate")
_NCCL_TESTS = re.compile(
    r"^(all_reduce|all_gather|alltoall|broadcast|reduce|reduce_scatter|sendrecv|scatter|gather|hypercube)_perf"
)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process as the probes see it."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    username: str | None = None

    def command(self) -> str:
        """The command line as one string (the name when the command line is hidden)."""
        return " ".join(self.cmdline) if self.cmdline else f"[{self.name}]"


@dataclass(frozen=True, slots=True)
class TrainingProcess:
    """A process that looks like a training job, and why."""

    process: ProcessInfo
    reason: str


@dataclass(frozen=True, slots=True)
class PortFacts:
    """Who listens on ``port``: ``state`` is ``listening``, ``free`` or ``unknown``."""

    port: int
    state: str
    pids: tuple[int, ...] = ()
    evidence: str = ""


ProcessProvider = Callable[[], Sequence[ProcessInfo]]


def list_processes(root: Path = Path("/")) -> list[ProcessInfo]:
    """Every process ``root/proc`` lists; fields that cannot be read are left empty."""
    proc = root / "proc"
    try:
        entries = [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return []
    found: list[ProcessInfo] = []
    for entry in sorted(entries, key=lambda e: int(e.name)):
        try:
            stat = (entry / "stat").read_text(errors="replace")
        except OSError:
            continue  # the process ended, or is hidden
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 1:].split()
        try:
            cmdline = tuple(a for a in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0") if a)
        except OSError:
            cmdline = ()
        ppid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
        found.append(ProcessInfo(int(entry.name), ppid, name, cmdline, _owner(entry / "status")))
    return found


def _owner(status: Path) -> str | None:
    """The user name of the real uid in ``/proc/<pid>/status``, else the uid, else None."""
    try:
        uid = next(line.split()[1] for line in status.read_text().splitlines() if line.startswith("Uid:"))
    except (OSError, StopIteration, IndexError):
        return None
    try:
        import pwd

        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, ValueError, ImportError):
        return uid


def ancestors(pid: int, processes: Sequence[ProcessInfo]) -> list[ProcessInfo]:
    """Parent, grandparent, ... of ``pid`` up to init, from the process table."""
    by_pid = {proc.pid: proc for proc in processes}
    chain: list[ProcessInfo] = []
    current = by_pid.get(pid)
    seen = {pid}
    while current is not None and current.ppid not in seen and current.ppid in by_pid:
        seen.add(current.ppid)
        current = by_pid[current.ppid]
        chain.append(current)
    return chain


def descendants(pid: int, processes: Sequence[ProcessInfo]) -> set[int]:
    """Every pid below ``pid`` in the process tree."""
    children: dict[int, list[int]] = {}
    for proc in processes:
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def training_processes(processes: Sequence[ProcessInfo], own_pid: int | None = None) -> list[TrainingProcess]:
    """Processes that look like training runs, excluding ourselves, our ancestors and children."""
    own = os.getpid() if own_pid is None else own_pid
    excluded = {own} | {p.pid for p in ancestors(own, processes)} | descendants(own, processes)
    preflight_runs: set[int] = set()  # another preflight (a run or a rehearse) and all it started
    for proc in processes:
        if proc.pid not in excluded and classify(proc) == PREFLIGHT_RUN:
            preflight_runs |= {proc.pid} | descendants(proc.pid, processes)
    found: list[TrainingProcess] = []
    for proc in processes:
        if proc.pid in excluded:
            continue
        reason = classify(proc)
        if reason:
            found.append(TrainingProcess(proc, PREFLIGHT_RUN if proc.pid in preflight_runs else reason))
    return found


PREFLIGHT_RUN = "preflight run"
_REHEARSE_BOOTSTRAP = os.path.join("preflight", "rehearse", "bootstrap.py")
"""What `preflight rehearse`'s torchrun and ranks run (`launch_script` of `rehearse/bootstrap.py`)."""


def classify(proc: ProcessInfo) -> str | None:
    """Why ``proc`` looks like a training job (launcher, nccl-tests, train script), or None.
    Another preflight's launch (its torchrun and ranks run ``preflight.workers.rehearsal``, or
    ``preflight rehearse``'s bootstrap) is :data:`PREFLIGHT_RUN`: a run in progress, not a leftover;
    :func:`training_processes` calls everything such a run started one too (the user's script under it)."""
    argv = proc.cmdline
    program = os.path.basename(argv[0]) if argv else proc.name
    if "preflight.workers.rehearsal" in argv or program == "preflight" or argv[1:3] == ("-m", "preflight") or \
            any(arg.endswith(_REHEARSE_BOOTSTRAP) for arg in argv):  # a `preflight rehearse` launch and its ranks
        return PREFLIGHT_RUN
    if (program in _LAUNCHER_NAMES or proc.name in _LAUNCHER_NAMES) and (
        program != "accelerate" or "launch" in argv[1:2]
    ):
        return f"{program} launcher"
    for module in _LAUNCHER_MODULES:
        if module in argv:
            return f"python -m {module}"
    if _NCCL_TESTS.match(program):
        return "nccl-tests benchmark"
    if program.startswith("python") or proc.name.startswith("python"):
        for arg in argv[1:]:
            if arg.startswith("-"):
                continue
            if _TRAINING_SCRIPT.search(arg):
                return f"python training script {os.path.basename(arg)}"
            break
    return None


def probe_port(
    port: int = DEFAULT_RENDEZVOUS_PORT,
    proc_net: Path = Path("/proc/net"),
    connections: Callable[[], Iterable[object]] | None = None,
) -> PortFacts:
    """Listeners on ``port`` from ``/proc/net/tcp{,6}`` (readable by anyone); their pids from the processes
    whose ``/proc/<pid>/fd`` holds the socket's inode (as ``ss -p`` finds them), or from ``connections``
    (psutil-style records) when given."""
    lines: list[str] = []
    readable = False
    for name in ("tcp", "tcp6"):
        try:
            text = (proc_net / name).read_text()
        except OSError:
            continue
        readable = True
        lines += [line.strip() for line in text.splitlines()[1:] if _is_listener(line, port)]
    if not readable:
        return PortFacts(port, "unknown", evidence=f"{proc_net}/tcp and tcp6 could not be read")
    if not lines:
        return PortFacts(port, "free")
    pids = _socket_owners(proc_net.parent, lines) if connections is None else _listening_pids(port, connections)
    return PortFacts(port, "listening", pids, evidence="\n".join(lines))


def _socket_owners(proc: Path, lines: Sequence[str]) -> tuple[int, ...]:
    """Pids whose open files include the sockets of these ``/proc/net/tcp`` rows (field 10 is the inode)."""
    inodes = {f"socket:[{line.split()[9]}]" for line in lines if len(line.split()) > 9}
    owners: set[int] = set()
    try:
        entries = [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return ()
    for entry in entries:
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                owners.add(int(entry.name))
        except OSError:
            continue  # another user's process: its fds are not ours to read
    return tuple(sorted(owners))


def _is_listener(line: str, port: int) -> bool:
    """A ``/proc/net/tcp`` row in state 0A (LISTEN) whose local port is ``port``."""
    fields = line.split()
    if len(fields) < 4 or ":" not in fields[1]:
        return False
    try:
        return int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"
    except ValueError:
        return False


def _listening_pids(port: int, connections: Callable[[], Iterable[object]] | None) -> tuple[int, ...]:
    """Owners of the listening socket, when psutil is allowed to see them (often needs root)."""
    if connections is None:
        import psutil

        def connections() -> Iterable[object]:
            return psutil.net_connections(kind="tcp")

    try:
        found = {
            conn.pid  # type: ignore[attr-defined]  # psutil's sconn or a test double; the getattr below checks it
            for conn in connections()
            if getattr(conn, "status", "") == "LISTEN"
            and getattr(getattr(conn, "laddr", None), "port", None) == port
            and getattr(conn, "pid", None)
        }
    except Exception:  # psutil.AccessDenied and platform errors: owner unknown, listener still real
        return ()
    return tuple(sorted(found))
