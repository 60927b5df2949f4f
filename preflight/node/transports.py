"""How preflight reaches the node: the one bundle every probe goes through, and the only thing a test fakes.

A run builds its :class:`Transports` once from the ``pytest_preflight_transports`` hook (firstresult;
preflight's own implementation returns the real ones). A test-only plugin returns fakes at the
lowest layer: a command runner that answers like a captured command, an environment, a filesystem
root. Nothing else in preflight knows whether a transport is real.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from preflight.probe.command import CommandRunner, run_command


def _environment() -> dict[str, str]:
    return dict(os.environ)


@dataclass(frozen=True, slots=True)
class Transports:
    """The command runner, the environment the job inherits, the job's interpreter and the filesystem root."""

    run: CommandRunner = run_command
    environ: Mapping[str, str] = field(default_factory=_environment)
    python: str = sys.executable  # the job's interpreter: torch is asked there, torchrun runs it
    root: Path = Path("/")
