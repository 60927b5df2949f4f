"""What one torchrun launch runs: an ordered list of phases over one process group.

A :class:`Phase` names the function every rank calls (``module:function``), its arguments, its own
budget (a phase still running after its budget is a hang of that phase), whether it is a
measurement that waits for the launcher's gate, and how its result is read (``parse_output``). The
plan is written as JSON into the launch's run directory and read by :mod:`preflight.workers.rehearsal` in every rank.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from preflight.launch.phase_results import OtherResult, OutputParser
from preflight.workers.common import LEAVING, STARTUP

LEAVING_BUDGET_S = 30.0
STARTUP_TITLE = "start-up (torch import, rendezvous, process-group join)"


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a launch, run by every rank."""

    name: str
    entry: str
    args: tuple[str, ...] = ()
    budget_s: float = 60.0
    gated: bool = False
    parse_output: OutputParser = OtherResult.parse
    """How the launcher reads what the phase function returned (:mod:`preflight.launch.phase_results`);
    a test plugin that replaces the entry keeps it."""

    def as_dict(self) -> dict[str, object]:
        """The JSON the ranks read."""
        return {"name": self.name, "entry": self.entry, "args": list(self.args), "gated": self.gated,
                "budget_s": self.budget_s}


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Phases in order, the rank count, and the environment changes of this launch."""

    name: str
    phases: tuple[Phase, ...]
    nproc: int
    env: Mapping[str, str | None] = field(default_factory=dict)
    backend: str = "auto"
    startup_budget_s: float = 60.0
    answer_torch: bool = False
    """Rank 0 writes what the job's torch is (:data:`preflight.workers.rehearsal.TORCH_ANSWER`) before it joins."""

    def __post_init__(self) -> None:
        names = [p.name for p in self.phases]
        if not names:
            raise ValueError("a launch needs at least one phase")
        if len(set(names)) != len(names) or STARTUP in names or LEAVING in names:
            raise ValueError(f"phase names must be unique and not empty: {names}")
        if self.nproc < 1:
            raise ValueError(f"a launch needs at least one rank, got {self.nproc}")

    def budget(self, phase: str) -> float:
        """The budget of ``phase`` (the start-up budget for :data:`STARTUP`)."""
        if phase == STARTUP:
            return self.startup_budget_s
        if phase == LEAVING:
            return LEAVING_BUDGET_S
        return next(p.budget_s for p in self.phases if p.name == phase)

    def index(self, phase: str) -> int:
        """Position of ``phase`` in the plan; -1 for :data:`STARTUP`, one past the last for :data:`LEAVING`."""
        if phase == STARTUP:
            return -1
        if phase == LEAVING:
            return len(self.phases)
        return [p.name for p in self.phases].index(phase)

    def name_at(self, index: int) -> str:
        """Inverse of :meth:`index`."""
        if index < 0:
            return STARTUP
        return LEAVING if index >= len(self.phases) else self.phases[index].name

    def only(self, names: Sequence[str]) -> LaunchPlan:
        """The same launch restricted to ``names`` (for a relaunch of the phases that did not run)."""
        kept = tuple(p for p in self.phases if p.name in names)
        return LaunchPlan(self.name, kept, self.nproc, self.env, self.backend, self.startup_budget_s)  # no answer

    def write(self, path: Path, gate: Path | None) -> None:
        """Write the plan the ranks read."""
        path.write_text(json.dumps({"name": self.name, "gate": str(gate) if gate else None,
                                    "answer_torch": self.answer_torch, "phases": [p.as_dict() for p in self.phases]},
                                   indent=1))
