"""The converters of preflight's own options: the text a user typed -> a typed value, or ``ValueError`` with
the reason in words (the CLI and pytest show it in one line). The generic ones (counts, deadlines, an
interpreter) live in :mod:`preflight.options`; these know what a strategy, a framework or a launch is."""

from __future__ import annotations

import os
from pathlib import Path

from preflight.inputs import not_a_file, shown
from preflight.judge.sizing import BASE_BITS
from preflight.judge.strategies import STRATEGIES
from preflight.parse.launch_command import LaunchCommand, parse_launch_command
from preflight.probe.job_plan import resolve

KNOWN_FRAMEWORKS = ("deepspeed", "cpp-extensions", "ddp", "fsdp")
ALL = "all"
"""``--strategy all``: every strategy."""


def framework_name(text: str) -> str:
    """One framework the job will use; ``deepspeed`` and ``cpp-extensions`` make the toolkit a requirement."""
    name = text.strip().lower()
    if name not in KNOWN_FRAMEWORKS:
        raise ValueError(f"unknown framework {text!r} (known: {', '.join(KNOWN_FRAMEWORKS)})")
    return name


def parse_strategies(text: str) -> tuple[str, ...]:
    """``fsdp``, ``ddp,zero2`` or ``all`` -> strategy names; unknown names raise ValueError."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError(f"expected a strategy name, got {text!r}")
    unknown = [name for name in names if name != ALL and name not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}; expected {', '.join((*STRATEGIES, ALL))}")
    return STRATEGIES if ALL in names else tuple(dict.fromkeys(names))


def strategy_option(text: str) -> str:
    """The ``--strategy`` converter: validates and returns the names comma-joined (one value may name several)."""
    return ",".join(parse_strategies(text))


def script_file(text: str) -> str:
    """An existing, readable file (the training script to scan)."""
    path = Path(text).expanduser()
    problem = not_a_file(str(path))  # a FIFO or /dev/zero is refused here, before anything reads it
    if problem is not None:
        raise ValueError(f"script {shown(text)} {problem}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"script {shown(text)} is not readable")
    return text


def launch_option(text: str) -> LaunchCommand:
    """The ``--launch`` command; a script it names that exists here but is not a regular file (a FIFO,
    ``/dev/zero``) is refused in one line. A script that is not here is the check's to report (the job
    may start from another directory)."""
    command = parse_launch_command(text)
    if command.script and not command.runs_module and os.path.exists(resolve(command.script)):
        problem = not_a_file(str(resolve(command.script)))
        if problem is not None:
            raise ValueError(f"the launch command's script {shown(command.script)} {problem}")
    return command


def base_bits(text: str) -> int:
    """16, 8 or 4."""
    if text.strip() not in {str(b) for b in BASE_BITS}:
        raise ValueError(f"base bits must be one of {', '.join(map(str, BASE_BITS))}, got {text!r}")
    return int(text)
