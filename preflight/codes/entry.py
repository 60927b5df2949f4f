"""What one catalogue entry is (:class:`Code`) and the kinds problems are listed by (:class:`Kind`).

A module of its own so the area modules (``preflight/codes/<area>.py``) build their entries without
importing the catalogue that imports them (the classification rules are in ``preflight/codes/__init__.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(str, enum.Enum):
    """What a problem is, in the order problems are listed (``preflight/codes/__init__.py`` says how to choose)."""

    RMA = "rma"
    HARDWARE = "hardware"
    BLOCKER = "blocker"
    COST = "cost"
    NOTE = "note"

    @property
    def rank(self) -> int:
        """0 for what must be listed first (RMA) up to NOTE."""
        return list(Kind).index(self)

    @property
    def label(self) -> str:
        """How the catalogue names the class: ``replace the hardware``, ``stops the job``, ..."""
        return _KIND_LABELS[self]


_KIND_LABELS = {Kind.RMA: "replace the hardware", Kind.HARDWARE: "hardware fault", Kind.BLOCKER: "stops the job",
                Kind.COST: "costs the job", Kind.NOTE: "note"}
DEFAULT_KIND = Kind.BLOCKER
"""The class of an entry not yet classified, and of a code the catalogue does not know."""


@dataclass(frozen=True, slots=True)
class Code:
    """One catalogue entry. ``meaning``: what preflight saw; ``why``: what it does to the training job;
    ``fix``: what to do. The report's own remediation fills in the node's ids; this is the general form.
    ``kind``: where its problems are listed (None: not classified yet, listed as :data:`DEFAULT_KIND`)."""

    code: str
    meaning: str
    why: str
    fix: str
    kind: Kind | None = None

    @property
    def problem_kind(self) -> Kind:
        """The kind the order of problems uses."""
        return self.kind or DEFAULT_KIND
