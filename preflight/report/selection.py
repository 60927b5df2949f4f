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
