"""The rehearsal's plan, from ``preflight rehearse [options] -- SCRIPT [ARGS...]``.

Every input error is a :class:`UsageError` (one line, exit code 2) raised before anything runs:
no ``--``, no script, a script that is missing or a directory, a rank count below 1 or above what
this node can run (its visible GPUs; without GPUs, its CPU cores, one gloo rank per core).
The command after ``--`` may also be the job's own ``torchrun ... train.py ...`` line: torch's
own parser takes it apart, and its ``--nproc-per-node`` becomes the largest size.

The job runs in the interpreter its command names, as it would without preflight: ``python
train.py`` and ``/venv/bin/python -m torch.distributed.run ... train.py`` name it; ``torchrun`` names
it in its first line (the interpreter pip wrote there); a bare ``train.py`` runs in ``--python`` or
preflight's own. So a package missing from the job's environment fails the rehearsal as it would
fail the job.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.errors import UsageError
from preflight.inputs import not_a_file, read_bytes, shown
from preflight.probe.job_torch import JobTorch

DEFAULT_WARMUP = 5
DEFAULT_STEPS = 50
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_STALL_S = 180.0
DEFAULT_MEASURE_FOR_S = 20.0
CPU_RANKS = 2
LAUNCHERS = ("torchrun",)
TORCH_RUN_MODULE = ("-m", "torch.distributed.run")
PYTHON_NAME = re.compile(r"python[0-9.]*$")
PYTHON_FLAGS = ("-u", "-O", "-OO", "-B", "-W", "-X")  # options of the interpreter before a script (-W/-X take one)
SHEBANG_BYTES = 4096


@dataclass(frozen=True, slots=True)
class RehearsalPlan:
    """What to run, on how many ranks, for how long."""

    script: Path
    script_text: str
    args: tuple[str, ...]
    cwd: Path
    sizes: tuple[int, ...]
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    timeout_s: float = DEFAULT_TIMEOUT_S
    stall_s: float = DEFAULT_STALL_S
    on_gpu: bool = False
    model_params: int | None = None
    grad_bytes: float | None = None
    strategy: str | None = None
    price_per_hour: float | None = None
    busbw_gbps: float | None = None
    busbw_source: str | None = None
    sweep: bool = True
    keep_going: bool = False
    launch_command: tuple[str, ...] = ()
    python: str = sys.executable  # the job's interpreter: torchrun and the ranks run it
    cpu_cores: int = 0  # the cores this process may use (CPU ranks share them)
    step_function: str | None = None  # the script's function whose calls are its steps
    measure_for_s: float = DEFAULT_MEASURE_FOR_S  # the longest a size's window grows while its spread is unknown
    job_torch: JobTorch | None = field(default=None, compare=False, repr=False)  # as asked to count the GPUs

    @property
    def target(self) -> int:
        """Steps each rank runs before it stops: warm-up plus measured."""
        return self.warmup + self.steps

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        return {"script": self.script_text, "script_path": str(self.script), "args": list(self.args),
                "cwd": str(self.cwd), "sizes": list(self.sizes), "warmup": self.warmup, "steps": self.steps,
                "timeout_s": self.timeout_s, "stall_timeout_s": self.stall_s, "device": "gpu" if self.on_gpu else "cpu",
                "launch_command": list(self.launch_command) or None, "python": self.python,
                "step_function": self.step_function}


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Options before ``--``, the script and its arguments after it."""
    if "--" not in argv:
        strays = [a for a in argv if not a.startswith("-")]
        hint = f" (found {strays[-1]!r})" if strays else ""
        raise UsageError("put -- before the script: preflight rehearse [options] -- train.py [its arguments]" + hint)
    at = list(argv).index("--")
    tail = list(argv[at + 1:])
    if not tail:
        raise UsageError("no script after --: preflight rehearse [options] -- train.py [its arguments]")
    return list(argv[:at]), tail


@dataclass(frozen=True, slots=True)
class JobCommand:
    """The command after ``--`` taken apart: the script, its arguments, the launcher's
    ``--nproc-per-node`` when a torchrun line gave one, and the interpreter the command names."""

    script: str
    args: tuple[str, ...]
    nproc_per_node: str | None = None
    python: str | None = None  # None: the command names none (a bare script)


def script_and_args(tail: Sequence[str]) -> tuple[str, list[str], str | None]:
    """``train.py --lr 1`` or ``torchrun --nproc-per-node=8 train.py --lr 1`` -> script, its
    arguments, and the launcher's ``--nproc-per-node`` when one was given."""
    command = job_command(tail)
    return command.script, list(command.args), command.nproc_per_node


def job_command(tail: Sequence[str]) -> JobCommand:
    """The job's command: ``[torchrun|PYTHON -m torch.distributed.run] [its options] SCRIPT ARGS`` or
    ``PYTHON [-u] SCRIPT ARGS`` or ``SCRIPT ARGS``."""
    words = list(tail)
    first = Path(words[0]).name
    if first in LAUNCHERS:
        return _torchrun_line(words[1:], tail, launcher_python(words[0]))
    if PYTHON_NAME.match(first):
        python = interpreter_path(words[0])
        if tuple(words[1:3]) == TORCH_RUN_MODULE:
            return _torchrun_line(words[3:], tail, python)
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            flag = rest.pop(0)
            if flag in ("-m", "-c") or flag not in PYTHON_FLAGS and not flag.startswith(("-W", "-X")):
                raise UsageError(f"rehearse runs a script file; `{shlex.join(words[:2])}` is not one (give "
                                 "python train.py, or python -m torch.distributed.run ... train.py)")
            if flag in ("-W", "-X") and rest:
                rest.pop(0)
        if not rest:
            raise UsageError(f"no script after {words[0]}: preflight rehearse -- {words[0]} train.py [its arguments]")
        return JobCommand(script=rest[0], args=tuple(rest[1:]), python=python)
    return JobCommand(script=words[0], args=tuple(words[1:]))


def _torchrun_line(rest: list[str], tail: Sequence[str], python: str) -> JobCommand:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    try:
        parsed = parser.parse_args(rest)
    except SystemExit:
        raise UsageError(f"torchrun would not accept this command: {' '.join(tail)}") from None
    if parsed.module or parsed.no_python:
        raise UsageError("rehearse runs a script file; torchrun's -m/--no-python entry points are not supported")
    return JobCommand(script=str(parsed.training_script), args=tuple(parsed.training_script_args),
                      nproc_per_node=str(parsed.nproc_per_node), python=python)


def interpreter_path(text: str) -> str:
    """``python3`` or ``/venv/bin/python``: an executable file, as an absolute path."""
    path = shutil.which(text) if os.sep not in text else text
    if not path or not os.path.isfile(path):
        raise UsageError(f"no such interpreter: {text} (the command after -- names it)")
    if not os.access(path, os.X_OK):
        raise UsageError(f"not executable: {text} (the command after -- names it)")
    return os.path.abspath(path)


def launcher_python(launcher: str) -> str:
    """The interpreter a ``torchrun`` launcher runs in: the first line pip wrote into it (``#!/venv/bin/python``,
    ``#!/usr/bin/env python3``, or the ``/bin/sh`` trampoline pip writes for long paths)."""
    path = shutil.which(launcher) if os.sep not in launcher else launcher
    if not path or not os.path.isfile(path):
        raise UsageError(f"{launcher} is not on PATH: the job's own launch line would fail the same way (give "
                         "python -m torch.distributed.run, or put the environment's bin directory on PATH)")
    try:
        with open(path, "rb") as handle:
            head = handle.read(SHEBANG_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = head.splitlines()
    words = lines[0][2:].split() if lines and lines[0].startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        if words:
            return interpreter_path(words[0])
    elif words and Path(words[0]).name in ("sh", "bash"):
        match = re.search(r"exec'\s+\"?([^\"\s]+)\"?", head)
        if match:
            return interpreter_path(match.group(1))
    elif words:
        return interpreter_path(words[0])
    raise UsageError(f"{path} names no interpreter in its first line: give --python, or run the job as "
                     "PYTHON -m torch.distributed.run ...")


def check_script(text: str, cwd: Path) -> Path:
    """The script as an absolute path; missing or a directory is a usage error."""
    path = (cwd / text).resolve() if not os.path.isabs(text) else Path(text)
    if path.is_dir():
        raise UsageError(f"{shown(text)} is a directory, not a script")
    problem = not_a_file(str(path))  # a FIFO or a device is never opened
    if problem == "does not exist":
        raise UsageError(f"script not found: {shown(text)}")
    if problem is not None:
        raise UsageError(f"script {shown(text)} {problem}")
    return path


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1,8`` -> (1, 8); every entry a whole number >= 1."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise ValueError(f"--nproc takes rank counts like 1,8; {part!r} is not a whole number") from None
        if value < 1:
            raise ValueError(f"--nproc takes rank counts >= 1, got {value}")
        sizes.append(value)
    if not sizes:
        raise ValueError("--nproc needs at least one rank count")
    return tuple(sorted(set(sizes)))


def default_sizes(capacity: int) -> tuple[int, ...]:
    """1, then 2 when there are more than 2, then all: the advice 'run on 2 first, then the node'."""
    return tuple(sorted({1, *((2,) if capacity > 2 else ()), capacity}))


def launcher_sizes(nproc_per_node: str | None, gpus: int, cpu_cores: int) -> int | None:
    """The largest size the job's own torchrun line asks for (``gpu`` = the visible GPUs)."""
    if nproc_per_node is None:
        return None
    if nproc_per_node == "gpu":
        if not gpus:
            raise UsageError("the torchrun line asks for --nproc-per-node=gpu, but torch sees no GPU here")
        return gpus
    if nproc_per_node in ("auto", "cpu"):
        return gpus or min(CPU_RANKS, cpu_cores)
    try:
        return int(nproc_per_node)
    except ValueError:
        raise UsageError(f"the torchrun line's --nproc-per-node={nproc_per_node} is not a rank count") from None


def check_sizes(sizes: Sequence[int], gpus: int, cpu_cores: int) -> None:
    """No size above what this node can run."""
    top = max(sizes)
    if gpus and top > gpus:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        extra = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise UsageError(f"--nproc {top} is more than the {gpus} GPU{'s' if gpus != 1 else ''} visible here{extra}")
    if not gpus and top > cpu_cores:
        raise UsageError(f"--nproc {top}: no GPU is visible, and this node has {cpu_cores} CPU core"
                         f"{'s' if cpu_cores != 1 else ''} for gloo ranks (one per core at most)")


def busbw_from_report(path: Path) -> tuple[float, str]:
    """The peak all-reduce busbw a preflight report measured, and where it came from."""
    try:  # a regular file only, bounded: /dev/zero or a FIFO is refused without waiting (preflight.inputs)
        report = json.loads(read_bytes(str(path), what=f"--from-report {shown(str(path))}"))
    except ValueError:
        raise UsageError(f"--from-report {shown(str(path))} is not a JSON report") from None
    except RecursionError:
        raise UsageError(f"--from-report {shown(str(path))} is nested too deeply to be a report") from None
    as_is: list[tuple[float, str]] = []  # the bandwidth check's own figure: the node as the job finds it
    other: list[tuple[float, str]] = []
    for check in report.get("checks", []) if isinstance(report, dict) else []:
        for metric in check.get("metrics", []):
            name, value = str(metric.get("name", "")), metric.get("value")
            if name.endswith("busbw_peak") and isinstance(value, (int, float)) and value > 0:
                (as_is if name == "busbw_peak" else other).append((float(value), str(check.get("id", ""))))
    if not as_is and not other:
        raise UsageError(f"--from-report {path} has no all-reduce busbw (run preflight with its bandwidth check)")
    value, check_id = max(as_is or other)
    return value, f"peak busbw from {path.name} ({check_id.rsplit('::', 1)[-1]})"
