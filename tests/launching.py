"""Launch helpers for tests: one phase (or a few) on real torchrun, gloo ranks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from preflight.launch.outcome import LaunchResult, PhaseResult
from preflight.launch.phase_results import OtherResult, OutputParser
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import launch


def launch_phases(phases: Sequence[Phase], *, nproc: int, run_dir: Path, deadline_s: float = 120.0,
                  env: Mapping[str, str | None] | None = None, startup_budget_s: float = 60.0) -> LaunchResult:
    """Run ``phases`` in one launch and return the whole result."""
    plan = LaunchPlan("test", tuple(phases), nproc, env=dict(env or {}), startup_budget_s=startup_budget_s)
    return launch(plan, run_dir=run_dir, deadline_s=deadline_s)


def launch_phase(entry: str, *, nproc: int, run_dir: Path, args: Sequence[str] = (), budget_s: float = 90.0,
                 deadline_s: float = 120.0, env: Mapping[str, str | None] | None = None,
                 name: str = "phase", parse_output: OutputParser = OtherResult.parse) -> PhaseResult:
    """Run one phase (``module:function``, its result read with ``parse_output``) and return its result."""
    phase = Phase(name, entry, tuple(args), budget_s=budget_s, parse_output=parse_output)
    return launch_phases([phase], nproc=nproc, run_dir=run_dir, deadline_s=deadline_s, env=env).phase(name)
