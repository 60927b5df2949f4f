"""The catalogue of every verdict code preflight can emit: what it means, why it matters, the fix.

Codes are stable names for problems (``GPU_ECC_UNCORRECTABLE``); a report, the JUnit file and the
one-line status carry them, and ``preflight explain CODE`` prints the entry. The entries live in
one module per area (``preflight/codes/<area>.py``, each a ``CODES`` tuple of the :class:`Code` of
``preflight/codes/entry.py``, which imports nothing back from here); a test scans the
judges' source and fails when a code is used that has no entry, or an entry no code uses.

Every entry has a :class:`Kind`, and problems are listed by it everywhere (the terminal, ``--oneline``,
the HTML, the JSON's ``problems``): what needs the hardware replaced, then other hardware faults, then
what stops the job, then what it costs, each group worst status first. How to classify a new code:

- ``RMA``: the hardware is broken for good and only replacing it helps (a failed row remap).
- ``HARDWARE``: a fault of the GPUs, their memory or their links that a reset, a reboot or a reseat may
  clear, or hardware seen computing or copying wrongly (ECC errors, a pending remap, an NVLink down).
- ``BLOCKER``: the job cannot start, or cannot be trusted to run correctly, on this node as it is set up
  (software, configuration, the environment, the job's own plan), or a check could not decide.
- ``COST``: the job runs, but pays in time or money (slow links, a small /dev/shm, a session that dies
  with SSH).
- ``NOTE``: a fact that costs nothing; it shows in a finding's table, never as a problem of its own.

An entry without a kind counts as ``BLOCKER`` (the middle of the order) and ``tests/test_catalogue.py``
names it until it is classified.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from preflight.codes import devices, distributed, fabric, host, plan, toolkit
from preflight.codes.entry import DEFAULT_KIND, Code, Kind

__all__ = ["DEFAULT_KIND", "Area", "Code", "Kind", "areas", "catalogue", "close_matches", "iter_codes", "kind_of",
           "lookup"]


@dataclass(frozen=True, slots=True)
class Area:
    """The codes of one area, in the order the catalogue shows them."""

    title: str
    codes: tuple[Code, ...]


def areas() -> tuple[Area, ...]:
    """Every area of the catalogue, in the order it is shown."""
    return tuple(Area(module.AREA, module.CODES) for module in (devices, fabric, toolkit, host, distributed, plan))


def catalogue() -> dict[str, tuple[Area, Code]]:
    """CODE -> (its area, its entry). A code listed twice is a bug in the data: it raises."""
    return dict(_catalogue())


@functools.cache
def _catalogue() -> dict[str, tuple[Area, Code]]:
    out: dict[str, tuple[Area, Code]] = {}
    for area in areas():
        for entry in area.codes:
            if entry.code in out:
                raise ValueError(f"code {entry.code} is catalogued twice")
            out[entry.code] = (area, entry)
    return out


def lookup(code: str) -> Code | None:
    """The entry for ``code`` (case and surrounding spaces ignored), or None."""
    found = _catalogue().get(code.strip().upper().replace("-", "_"))
    return found[1] if found else None


def close_matches(code: str, limit: int = 3) -> list[str]:
    """Catalogued codes that look like ``code``: a prefix or substring first, then spelling neighbours."""
    wanted = code.strip().upper().replace("-", "_")
    names = sorted(catalogue())
    near = difflib.get_close_matches(wanted, names, n=limit, cutoff=0.6)
    contains = [name for name in names if wanted and wanted in name and name not in near] if len(wanted) >= 3 else []
    return (contains + near)[:limit] if contains else near


def kind_of(code: str | None) -> Kind:
    """The class of a report's code; a code without an entry (or none) counts as :data:`DEFAULT_KIND`."""
    entry = lookup(code) if code else None
    return entry.problem_kind if entry is not None else DEFAULT_KIND


def iter_codes() -> Iterator[tuple[Area, Code]]:
    """Every entry with its area, area by area."""
    for area in areas():
        for entry in area.codes:
            yield area, entry
