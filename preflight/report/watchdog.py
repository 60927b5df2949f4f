"""Signals and the overall deadline of a run: whatever stops it, the report is still written.

Ctrl-C and SIGTERM are held while the report directory is opened and while the reports are written (a
signal would otherwise leave either half done), then delivered; SIGTERM during the checks raises
:class:`RunInterrupted` so pytest unwinds as for Ctrl-C. The :class:`Watchdog` thread enforces
``--timeout``: it interrupts the main thread, and when that does not unwind (stuck in C) it has the
partial report written from its own thread and ends the process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from preflight.errors import EXIT_NOT_READY
from preflight.report.model import RunRecord
from preflight.settings import Settings

WATCHDOG_GRACE_S = 3.0
WATCHDOG_HARD_S = 10.0
HELD = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or the overall deadline, so pytest unwinds and the
    report is still written."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class SignalGuard:
    """Ctrl-C and SIGTERM for one run: held from :meth:`hold` until :meth:`release`, then SIGTERM marks the
    run interrupted and raises :class:`RunInterrupted`, until :meth:`restore` puts the old handler back."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self._held: list[int] = []
        self._previous: dict[int, Any] = {}
        self._old_sigterm: Any = None

    def hold(self) -> None:
        """Hold both signals (only the main thread can set handlers)."""
        if _in_main_thread():
            self._previous = {s: signal.signal(s, lambda signum, frame: self._held.append(signum)) for s in HELD}

    def release(self, *, deliver: bool) -> None:
        """Stop holding: from here on a SIGTERM ends in a report marked interrupted. Held signals are
        delivered (``deliver``) or, at the end of a run that never started, recorded as its interruption."""
        if not self._previous:
            return
        previous, self._previous = self._previous, {}
        signal.signal(signal.SIGINT, previous[signal.SIGINT])
        self._old_sigterm = previous[signal.SIGTERM]
        signal.signal(signal.SIGTERM, self._on_sigterm)
        held, self._held = list(dict.fromkeys(self._held)), []
        if held and not deliver:
            self.record.interrupted = True
            self.record.interruption = self.record.interruption or (
                "terminated by SIGTERM" if held[0] == signal.SIGTERM else "interrupted by the user (Ctrl-C)")
        for signum in held if deliver else ():
            signal.raise_signal(signum)

    def restore(self) -> None:
        """The SIGTERM handler that was there before the run (at the end of the run)."""
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.record.interrupted = True
        self.record.interruption = "terminated by SIGTERM"
        raise RunInterrupted("SIGTERM")


@contextmanager
def signals_held() -> Generator[list[int], None, None]:
    """Hold Ctrl-C and SIGTERM in the main thread for the block (elsewhere nothing is held); yields the
    signals that arrived meanwhile, which are then dropped: the caller records them."""
    held: list[int] = []
    if not _in_main_thread():
        yield held
        return
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in HELD}
    try:
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Watchdog:
    """Enforces the overall ``--timeout`` from a daemon thread: at the deadline (plus a grace) it marks the
    run interrupted and sends SIGINT to the main thread; if the run has not finished ``WATCHDOG_HARD_S``
    later, it calls ``write_partial`` and ends the process (exit code 1, NOT READY)."""

    def __init__(self, record: RunRecord, settings: Settings, finished: threading.Event,
                 write_partial: Callable[[], str]) -> None:
        self.record = record
        self.settings = settings
        self.finished = finished
        self.write_partial = write_partial

    def start(self) -> None:
        threading.Thread(target=self._run, name="preflight-watchdog", daemon=True).start()

    def _run(self) -> None:
        if self.finished.wait(max(0.0, self.settings.remaining_s()) + WATCHDOG_GRACE_S):
            return
        self.record.interrupted = True
        self.record.interruption = f"overall --timeout of {self.settings.timeout_s:.0f} s reached"
        os.kill(os.getpid(), signal.SIGINT)
        if self.finished.wait(WATCHDOG_HARD_S):
            return
        try:
            where = self.write_partial()
            print(f"preflight: {self.record.verdict().value} (run stopped at its deadline); reports: {where}",
                  file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_NOT_READY)
