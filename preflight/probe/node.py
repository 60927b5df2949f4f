"""Facts about the host every report carries: who, what OS, which Python and torch."""

from __future__ import annotations

import os
import platform
import socket
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


def node_facts() -> dict[str, Any]:
    """Hostname, OS, kernel, CPU, memory and Python of this node."""
    memory = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "os": os_name(),
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "memory_bytes": int(memory.total),
        "python": platform.python_version(),
    }
