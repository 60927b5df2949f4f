"""The options of one run, resolved once into a frozen object the checks read."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.options import Option, python_interpreter, rank_count, seconds

PROFILES = ("quick", "full")

CORE_OPTIONS: list[Option] = [
    Option(name="report-dir", help="where preflight.json, preflight.html and logs are written (default ./reports)",
           type=str, default="reports", metavar="DIR"),
    Option(name="profile", help="quick: a short run that fits a scheduler's health-check budget; full (default): "
           "the complete sweep", choices=PROFILES, default="full"),
    Option(name="nproc", help="ranks for the distributed checks (default: the number of visible GPUs, or 2 "
           "without GPUs)", type=rank_count, metavar="N"),
    Option(name="expect-gpus", help="the number of GPUs this node must present (FAIL otherwise)",
           type=rank_count, metavar="N"),
    Option(name="timeout", help="overall deadline for the whole run in seconds (default 300)", type=seconds,
           default=300.0, metavar="SECONDS"),
    Option(name="launch-timeout", help="longest any distributed phase (a DDP step, the sweep, an FSDP or ZeRO step) "
           "may run before it is called hung, in seconds, longer or shorter than its own budget (default: each "
           "phase's own; the whole run stays within --timeout)", type=seconds, metavar="SECONDS"),
    Option(name="strict", help="warnings make the exit code 1", flag=True, default=False),
    Option(name="cpu", help="a CPU rehearsal: run the distributed checks on CPU ranks (gloo) on a machine without "
           "NVIDIA GPUs (a laptop, CI); the verdict then says READY (CPU rehearsal)", flag=True, default=False),
    Option(name="python", help="the job's Python interpreter (default: the one preflight runs in): torch, DeepSpeed "
           "and numpy are judged there and every torchrun launch runs it, so preflight may live in a venv of its "
           "own", type=python_interpreter, metavar="PATH"),
]


@dataclass(frozen=True, slots=True)
class Settings:
    """What the user asked for, plus the run's clock."""

    report_dir: Path
    profile: str
    nproc: int | None
    expect_gpus: int | None
    timeout_s: float
    launch_timeout_s: float | None
    strict: bool
    python: str
    cpu: bool
    started: float = field(default_factory=time.monotonic)
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, values: Mapping[str, Any], started: float | None = None) -> Settings:
        """Build from a mapping of option ``dest`` -> parsed value."""
        return cls(
            report_dir=Path(values.get("report_dir") or "reports").resolve(),
            profile=values.get("profile") or "full",
            nproc=values.get("nproc"),
            expect_gpus=values.get("expect_gpus"),
            timeout_s=float(values.get("timeout") or 300.0),
            launch_timeout_s=float(values["launch_timeout"]) if values.get("launch_timeout") else None,
            strict=bool(values.get("strict")),
            python=str(values.get("python") or sys.executable),
            cpu=bool(values.get("cpu")),
            started=started if started is not None else time.monotonic(),
            options=dict(values),
        )

    def option(self, dest: str) -> Any:
        """Any option's value by its ``dest`` name (``model_params``), None when absent."""
        return self.options.get(dest)

    @property
    def quick(self) -> bool:
        """True for the quick profile."""
        return self.profile == "quick"

    def remaining_s(self) -> float:
        """Seconds left before the overall deadline."""
        return self.timeout_s - (time.monotonic() - self.started)

    def phase_budget_s(self, own_s: float) -> float:
        """How long a distributed phase whose own budget is ``own_s`` may run before it is hung:
        ``--launch-timeout`` when given (longer or shorter than ``own_s``, as --help says), else ``own_s``."""
        return self.launch_timeout_s if self.launch_timeout_s is not None else own_s
