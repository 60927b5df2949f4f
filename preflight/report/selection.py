"""Which checks a run selected, so a partial run never passes for a whole one.

``-k``, ``-m``, the profile and ``--strategy`` choose what runs; the run records them with the suite's
size before deselection (``collected``) and what was left (``selected``). A partial run's verdict is
then shown as ``READY: 1 of 45 checks selected`` in the terminal, the one-line status and the HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Selection:
    """What chose the checks of a run, and how many were left of the suite."""

    keyword: str | None = None
    markexpr: str | None = None
    profile: str = "full"
    strategy: list[str] | None = None
    slow: bool = False
    collected: int = 0
    deselected: int = 0

    @property
    def selected(self) -> int:
        """Checks left after deselection (they run, or SKIP)."""
        return max(0, self.collected - self.deselected)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: the report's ``run.selection``."""
        return {"keyword": self.keyword, "markexpr": self.markexpr, "profile": self.profile,
                "strategy": list(self.strategy) if self.strategy is not None else None, "slow": self.slow,
                "collected": self.collected, "selected": self.selected, "deselected": self.deselected,
                "partial": self.selected < self.collected}


def selection_note(report: dict[str, Any]) -> str | None:
    """``1 of 45 checks selected`` when only some of the suite's checks were selected, else None."""
    run = report.get("run")
    selection = run.get("selection") if isinstance(run, dict) else None
    if not isinstance(selection, dict) or not selection.get("partial"):
        return None
    selected, collected = selection.get("selected"), selection.get("collected")
    if not isinstance(selected, int) or not isinstance(collected, int):
        return None
    return f"{selected} of {collected} checks selected"


def selection_flags(report: dict[str, Any]) -> str:
    """What selected them, as the user typed it: ``-k ddp -m 'not slow'`` (empty when nothing did)."""
    run = report.get("run")
    selection = run.get("selection") if isinstance(run, dict) else None
    if not isinstance(selection, dict):
        return ""
    parts = []
    for flag, key in (("-k", "keyword"), ("-m", "markexpr")):
        value = selection.get(key)
        if value:
            parts.append(f"{flag} {value}" if " " not in str(value) else f"{flag} '{value}'")
    return " ".join(parts)
