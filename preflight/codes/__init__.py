"""The catalogue of every verdict code preflight can emit: what it means, why it matters, the fix.

Codes are stable names for problems (``GPU_ECC_UNCORRECTABLE``); a report, the JUnit file and the
one-line status carry them, and ``preflight explain CODE`` prints the entry. The entries live in
one module per area (``preflight/codes/<area>.py``, each a ``CODES`` tuple); a test scans the
judges' source and fails when a code is used that has no entry, or an entry no code uses.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Code:
    """One catalogue entry. ``meaning``: what preflight saw; ``why``: what it does to the training job;
    ``fix``: what to do. The report's own remediation fills in the node's ids; this is the general form."""

    code: str
    meaning: str
    why: str
    fix: str


@dataclass(frozen=True, slots=True)
class Area:
    """The codes of one area, in the order the catalogue shows them."""

    title: str
    codes: tuple[Code, ...]


def areas() -> tuple[Area, ...]:
    """Every area of the catalogue (imported here so the data modules stay plain)."""
    from preflight.codes import devices, distributed, fabric, host, plan, toolkit

    return tuple(Area(module.AREA, module.CODES) for module in (devices, fabric, toolkit, host, distributed, plan))


def catalogue() -> dict[str, tuple[Area, Code]]:
    """CODE -> (its area, its entry). A code listed twice is a bug in the data: it raises."""
    out: dict[str, tuple[Area, Code]] = {}
    for area in areas():
        for entry in area.codes:
            if entry.code in out:
                raise ValueError(f"code {entry.code} is catalogued twice")
            out[entry.code] = (area, entry)
    return out


def lookup(code: str) -> Code | None:
    """The entry for ``code`` (case and surrounding spaces ignored), or None."""
    found = catalogue().get(code.strip().upper().replace("-", "_"))
    return found[1] if found else None


def close_matches(code: str, limit: int = 3) -> list[str]:
    """Catalogued codes that look like ``code``: a prefix or substring first, then spelling neighbours."""
    wanted = code.strip().upper().replace("-", "_")
    names = sorted(catalogue())
    near = difflib.get_close_matches(wanted, names, n=limit, cutoff=0.6)
    contains = [name for name in names if wanted and wanted in name and name not in near] if len(wanted) >= 3 else []
    return (contains + near)[:limit] if contains else near


def iter_codes() -> Iterator[tuple[Area, Code]]:
    """Every entry with its area, area by area."""
    for area in areas():
        for entry in area.codes:
            yield area, entry
