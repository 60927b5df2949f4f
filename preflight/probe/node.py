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


def torch_facts() -> dict[str, Any]:
    """torch's version, CUDA build and NCCL version, without creating a CUDA context."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is itself a fact
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_build": torch.version.cuda is not None,
        "distributed": torch.distributed.is_available(),
        "nccl": None,
        "device_count": 0,
    }
    if torch.version.cuda is not None:
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:  # noqa: BLE001 - built without NCCL
            facts["nccl"] = None
        try:
            facts["device_count"] = torch.cuda.device_count()
        except Exception:  # noqa: BLE001 - no driver: count stays 0
            facts["device_count"] = 0
    return facts


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
