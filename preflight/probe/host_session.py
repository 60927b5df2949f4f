"""Will a job started from this shell survive the SSH connection dropping?

Signals, each recorded as found: tmux/screen/zellij (their variables and the parent chain),
nohup or an ignored SIGHUP, a scheduler or service manager (Slurm, Kubernetes, systemd), no
controlling terminal at all (setsid, cron), and SSH itself (``SSH_CONNECTION``, ``sshd`` in the
parent chain).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from preflight.probe.host_processes import ProcessInfo, ancestors, list_processes

SESSION_VARIABLES = (
    "TMUX", "STY", "ZELLIJ", "SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST", "INVOCATION_ID",
    "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY",
)
"""Environment variables that say where the shell runs (values are kept only for these)."""

KEEPERS = {"tmux": "tmux", "tmux: server": "tmux", "screen": "screen", "SCREEN": "screen",
           "zellij": "zellij", "nohup": "nohup", "slurmstepd": "slurm", "systemd": "systemd"}
"""Ancestor process names that keep the job alive when the connection drops."""


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """Where this shell runs: its session variables, parent chain, SIGHUP handling and terminal."""

    variables: Mapping[str, str]
    parents: tuple[ProcessInfo, ...]
    sighup_ignored: bool
    controlling_tty: bool | None

    @property
    def over_ssh(self) -> bool:
        """Reached over SSH (variables or sshd among the parents)."""
        return any(k in self.variables for k in ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")) or any(
            p.name == "sshd" or p.name.startswith("sshd-") for p in self.parents
        )

    def keepers(self) -> list[str]:
        """What keeps a job alive past a disconnect, each with its evidence."""
        found: list[str] = []
        named = {"TMUX": "tmux", "STY": "screen", "ZELLIJ": "zellij", "SLURM_JOB_ID": "slurm job",
                 "KUBERNETES_SERVICE_HOST": "kubernetes pod", "INVOCATION_ID": "systemd unit"}
        for variable, what in named.items():
            if variable in self.variables:
                found.append(f"{what} ({variable} is set)")
        for parent in self.parents:
            keeper = KEEPERS.get(parent.name)
            if keeper and parent.pid != 1 and not any(f.startswith(keeper) for f in found):
                found.append(f"{keeper} (parent process {parent.pid} {parent.name})")
        if self.sighup_ignored:
            found.append("SIGHUP is ignored (nohup)")
        if self.controlling_tty is False:
            found.append("no controlling terminal (setsid, cron or a service)")
        return found


def probe_session(
    env: Mapping[str, str],
    processes: Callable[[], Sequence[ProcessInfo]] = list_processes,
    own_pid: int | None = None,
    sighup_handler: Callable[[], object] | None = None,
    proc_root: Path = Path("/proc"),
) -> SessionFacts:
    """Session variables (of the job's environment), the parent chain, SIGHUP disposition and the
    controlling terminal."""
    pid = os.getpid() if own_pid is None else own_pid
    try:
        parents = tuple(ancestors(pid, processes()))
    except Exception:  # a process table we may not read: judge from the variables alone
        parents = ()
    handler = sighup_handler() if sighup_handler is not None else signal.getsignal(signal.SIGHUP)
    return SessionFacts(
        variables={k: env[k] for k in SESSION_VARIABLES if k in env},
        parents=parents,
        sighup_ignored=handler == signal.SIG_IGN,
        controlling_tty=_has_controlling_tty(proc_root / str(pid) / "stat"),
    )


def _has_controlling_tty(stat_path: Path) -> bool | None:
    """Field 7 of ``/proc/<pid>/stat`` (tty_nr) is 0 without a controlling terminal."""
    try:
        text = stat_path.read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 5 or not fields[4].lstrip("-").isdigit():
        return None
    return int(fields[4]) != 0
