"""How preflight reaches the node: the one bundle every probe goes through, and the only thing a test fakes.

A run builds its :class:`Transports` once from the ``pytest_preflight_transports`` hook (firstresult;
preflight's own implementation returns the real ones). A test-only plugin returns fakes at the
lowest layer: a fake NVML C library under the real nvidia-ml-py binding, a command runner that
answers like a captured command, an environment, a filesystem root (``/proc``, ``/sys``, ``/etc``
laid out under it), the ``statvfs`` of that filesystem and the host's name (the facts a directory tree
cannot carry: how big a mount is, what ``gethostname`` says). Nothing else in preflight knows whether a
transport is real.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from preflight.probe.command import CommandRunner, run_command
from preflight.probe.nvml_transport import REAL, NvmlTransport


def _environment() -> dict[str, str]:
    return dict(os.environ)


@dataclass(frozen=True, slots=True)
class Transports:
    """NVML, the command runner, the environment the job inherits, the job's interpreter, the filesystem root
    and the host's name."""

    nvml: NvmlTransport = REAL  # the driver's libnvidia-ml.so.1, or (tests) a fake C library the NVML child loads
    run: CommandRunner = run_command
    environ: Mapping[str, str] = field(default_factory=_environment)
    python: str = sys.executable  # the job's interpreter: torch is asked there, torchrun runs it
    root: Path = Path("/")
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs  # sizes of the mounts under ``root``
    hostname: Callable[[], str] = socket.gethostname  # the report's ``node.hostname``
