"""What the run is waiting for right now, and until when, so the live line can say it.

Code that blocks on something slow (the NVML walk, the job's torch, DeepSpeed's op build) wraps the
wait in :func:`waiting`; :mod:`preflight.report.live` reads :func:`current` on every tick. Nothing
here prints: the code that waits never knows whether a terminal is watching. Standard library only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Wait:
    """One wait: what for, since when, and the deadline of the thing waited for (``time.monotonic()``)."""

    what: str
    started: float
    until: float | None = None

    def elapsed_s(self, now: float) -> float:
        """Seconds waited so far."""
        return max(0.0, now - self.started)


_lock = threading.Lock()
_active: list[Wait] = []


@contextlib.contextmanager
def waiting(what: str, until: float | None = None) -> Iterator[Wait]:
    """Announce a wait for ``what`` (which ends at the latest at ``until``, a monotonic time) while the
    body runs. Waits nest: the innermost one is the one shown."""
    wait = Wait(what, time.monotonic(), until)
    with _lock:
        _active.append(wait)
    try:
        yield wait
    finally:
        with _lock:
            _active.remove(wait)


def current() -> Wait | None:
    """The innermost wait in progress, or None."""
    with _lock:
        return _active[-1] if _active else None
