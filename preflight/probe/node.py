"""Facts about the host every report carries: who, what OS, which CPU, memory and Python.

The files are read under the node's filesystem root (``Transports.root``: ``/proc/cpuinfo``,
``/etc/os-release``) and the hostname is the transports' (``Transports.hostname``: ``gethostname``);
the kernel, CPU count and memory are what this process's own system calls say (uname, sched/sysconf,
sysinfo), which a directory tree cannot carry.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (``model name`` in /proc/cpuinfo), else platform's answer."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def os_name(os_release: Path = Path("/etc/os-release")) -> str:
    """``PRETTY_NAME`` from /etc/os-release, else ``platform.platform()``."""
    try:
        for line in os_release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


@dataclass(frozen=True, slots=True)
class HostIdentity:
    """Hostname, OS, kernel, CPU, memory and Python of this node: the report's ``node`` headline."""

    hostname: str
    os: str
    kernel: str
    architecture: str
    cpu: str
    cpu_count: int
    memory_bytes: int
    python: str

    def as_dict(self) -> dict[str, Any]:
        """The report's keys."""
        return {"hostname": self.hostname, "os": self.os, "kernel": self.kernel, "architecture": self.architecture,
                "cpu": self.cpu, "cpu_count": self.cpu_count, "memory_bytes": self.memory_bytes,
                "python": self.python}


def probe_identity(root: Path, hostname: Callable[[], str]) -> HostIdentity:
    """The node's identity, its files read under ``root``, its name from ``hostname``."""
    return HostIdentity(
        hostname=hostname(),
        os=os_name(root / "etc/os-release"),
        kernel=platform.release(),
        architecture=platform.machine(),
        cpu=cpu_model(root / "proc/cpuinfo"),
        cpu_count=os.cpu_count() or 0,
        memory_bytes=int(psutil.virtual_memory().total),
        python=platform.python_version(),
    )
