"""The rehearsal's plan, from ``preflight rehearse [options] -- SCRIPT [ARGS...]``.

Every input error is a :class:`UsageError` (one line, exit code 2) raised before anything runs:
no ``--``, no script, a script that is missing or a directory, a rank count below 1 or above what
this node can run (its visible GPUs; without GPUs, its CPU cores, one gloo rank per core).
The command after ``--`` may also be the job's own ``torchrun ... train.py ...`` line: torch's
own parser takes it apart, and its ``--nproc-per-node`` becomes the largest size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.errors import UsageError
from preflight.inputs import not_a_file, read_bytes, shown

DEFAULT_WARMUP = 5
DEFAULT_STEPS = 50
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_STALL_S = 180.0
CPU_RANKS = 2
LAUNCHERS = ("torchrun",)
TORCH_RUN_MODULE = ("-m", "torch.distributed.run")


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

    @property
    def target(self) -> int:
        """Steps each rank runs before it stops: warm-up plus measured."""
        return self.warmup + self.steps

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        return {"script": self.script_text, "script_path": str(self.script), "args": list(self.args),
                "cwd": str(self.cwd), "sizes": list(self.sizes), "warmup": self.warmup, "steps": self.steps,
                "timeout_s": self.timeout_s, "stall_timeout_s": self.stall_s, "device": "gpu" if self.on_gpu else "cpu",
                "launch_command": list(self.launch_command) or None}


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


def script_and_args(tail: Sequence[str]) -> tuple[str, list[str], str | None]:
    """``train.py --lr 1`` or ``torchrun --nproc-per-node=8 train.py --lr 1`` -> script, its
    arguments, and the launcher's ``--nproc-per-node`` when one was given."""
    words = list(tail)
    if words[0] in LAUNCHERS or (Path(words[0]).name.startswith("python") and tuple(words[1:3]) == TORCH_RUN_MODULE):
        rest = words[1:] if words[0] in LAUNCHERS else words[3:]
        from torch.distributed.run import get_args_parser

        parser = get_args_parser()
        try:
            parsed = parser.parse_args(rest)
        except SystemExit:
            raise UsageError(f"torchrun would not accept this command: {' '.join(tail)}") from None
        if parsed.module or parsed.no_python:
            raise UsageError("rehearse runs a script file; torchrun's -m/--no-python entry points are not supported")
        return str(parsed.training_script), list(parsed.training_script_args), str(parsed.nproc_per_node)
    return words[0], words[1:], None


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
