"""Processes and ports: our ancestors, leftover training runs, a listener on the rendezvous port.

The process table comes from a provider (psutil by default) so the tests can hand in a fake one.
Reading other users' processes or sockets may be refused; that becomes "unknown", never a crash.
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


def list_processes() -> list[ProcessInfo]:
    """Every process psutil can see; fields it may not read are left empty."""
    import psutil

    found: list[ProcessInfo] = []
    for proc in psutil.process_iter(["pid", "ppid", "name", "cmdline", "username"]):
        info = proc.info
        found.append(
            ProcessInfo(
                pid=info["pid"],
                ppid=info.get("ppid") or 0,
                name=info.get("name") or "",
                cmdline=tuple(info.get("cmdline") or ()),
                username=info.get("username"),
            )
        )
    return found


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
    """Listeners on ``port`` from ``/proc/net/tcp{,6}`` (readable by anyone), pids from psutil."""
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
    return PortFacts(port, "listening", _listening_pids(port, connections), evidence="\n".join(lines))


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
