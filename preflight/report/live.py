"""The live line: what the run is doing while nothing else prints, and until when.

A person watching ``preflight`` should never look at a silent screen for more than a couple of
seconds. Once nothing has been printed for :data:`SHOW_AFTER_S`, the live line says, in this order
of precedence:

- the rehearsal launch, while a distributed check waits on it: the earliest phase any rank is in,
  ranks through it, the phase's clock against its budget, the launch's against its deadline, and the
  slowest rank's label (:class:`~preflight.launch.torchrun.LaunchStatus`);
- the innermost announced wait (:mod:`preflight.waits`: the NVML walk, the job's torch, DeepSpeed's
  op build): what, for how long, and until what time at the latest;
- otherwise what the run is busy with (a check that takes a while, the collection, the reports).

On a terminal the line is redrawn in place (``\\r``) and cleared before any other line is printed.
Anywhere else (a log, a pipe) nothing can be redrawn: after :data:`PLAIN_AFTER_S` of silence a plain
line is printed when something new is shown (a wait again every :data:`LOG_EVERY_S` while it lasts;
a launch once per phase it enters).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import psutil

from preflight import waits
from preflight.launch.torchrun import LaunchStatus
from preflight.workers.common import LEAVING, STARTUP

TICK_S = 0.25
SHOW_AFTER_S = 1.0  # silence before the line appears on a terminal: inside the two seconds a person tolerates
PLAIN_AFTER_S = 2.0  # silence before a plain line is printed (a log need not hear of every short wait)
LOG_EVERY_S = 30.0  # a plain line about a wait repeats this often while the wait lasts
PREFIX = "  > "


def process_started() -> float:
    """When this process started, as a ``time.monotonic()`` instant (now, when that cannot be read)."""
    try:
        return time.monotonic() - max(0.0, time.time() - psutil.Process().create_time())
    except psutil.Error:
        return time.monotonic()


def _cut(text: str, width: int) -> str:
    text = " ".join(text.splitlines()).rstrip()
    return text if len(text) <= width else text[: max(0, width - 3)].rstrip() + "..."


def _phase_name(phase: str) -> str:
    return {STARTUP: "start-up", LEAVING: "leaving"}.get(phase, phase)


def clock(monotonic: float, now: float | None = None) -> str:
    """The wall-clock time (``HH:MM:SS``) of a ``time.monotonic()`` instant."""
    now = time.monotonic() if now is None else now
    return time.strftime("%H:%M:%S", time.localtime(time.time() + (monotonic - now)))


def live_text(status: LaunchStatus, width: int) -> str:
    """The live line of a launch: phase, ranks through it, its clock against its budget, the launch's
    clock against its deadline, then what the slowest rank is doing (cut first when room is short)."""
    text = (f"{PREFIX}{status.launch} {_phase_name(status.phase)}: {status.ranks_done}/{status.nproc} ranks done, "
            f"{status.phase_elapsed_s:.0f}/{status.phase_budget_s:.0f} s, launch "
            f"{status.elapsed_s:.0f}/{status.deadline_s:.0f} s")
    label = "waiting for the probe checks" if status.waiting else status.label
    return _cut(f"{text}  {label}" if label else text, width - 1)  # the last column would wrap on some terminals


def phase_line(status: LaunchStatus, width: int) -> str:
    """The line printed when a launch enters a phase, where no live line can be redrawn (not a terminal)."""
    return _cut(f"{PREFIX}{status.launch}: {_phase_name(status.phase)} ({status.nproc} ranks, budget "
                f"{status.phase_budget_s:.0f} s) at {status.elapsed_s:.0f} s", width)


def wait_text(wait: waits.Wait, now: float, width: int) -> str:
    """``  > waiting for the job's torch (/usr/bin/python3): 4 s, until 10:42:07 at the latest``."""
    text = f"{PREFIX}waiting for {wait.what}: {wait.elapsed_s(now):.0f} s"
    if wait.until is not None:
        text += f", until {clock(wait.until, now)} at the latest"
    return _cut(text, width - 1)


def busy_text(activity: str, since: float, now: float, width: int) -> str:
    """``  > <what the run is doing>: 3 s``."""
    return _cut(f"{PREFIX}{activity}: {max(0.0, now - since):.0f} s", width - 1)


@dataclass(frozen=True, slots=True)
class Shown:
    """What the line shows: its text and what it is about (a new subject gets a new plain line)."""

    subject: tuple[str, ...]
    text: str
    plain: str


class LiveLine:
    """The live line of one run, drawn by a thread of its own onto ``out`` (under the caller's ``lock``,
    which every other writer to ``out`` holds too, calling :meth:`clear` before it writes)."""

    def __init__(self, out: IO[str], *, tty: bool, width: int, lock: threading.Lock,
                 launch: Callable[[], LaunchStatus | None] | None = None) -> None:
        self.out = out
        self.tty = tty
        self.width = width
        self.lock = lock
        self.launch = launch or (lambda: None)
        self.activity = "starting"
        self.activity_since = time.monotonic()
        self.launch_watched = False
        self._drawn = ""
        self._quiet_since = process_started()  # the start-up (imports, plugins) was silent too
        self._plain_subject: tuple[str, ...] | None = None
        self._plain_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the run is doing (set by the reporter's hooks) ---------------------------------------

    def busy(self, activity: str, *, watch_launch: bool = False) -> None:
        """The run is now doing ``activity``; ``watch_launch``: a distributed check waits on the launch."""
        self.activity, self.activity_since, self.launch_watched = activity, time.monotonic(), watch_launch

    # -- drawing --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start drawing (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="preflight-live-line", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop drawing and clear the line."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        with self.lock:
            self.clear()

    def clear(self) -> None:
        """Remove the drawn line (the caller holds the lock and is about to write): output happened."""
        if self._drawn and not self.out.closed:
            self.out.write("\r" + " " * len(self._drawn) + "\r")
        self._drawn = ""
        self._quiet_since = time.monotonic()

    def shown(self, now: float) -> Shown | None:
        """What the line would show now, or None (nothing to say)."""
        if self.launch_watched:
            try:
                status = self.launch()
            except (OSError, ValueError, KeyError, IndexError):
                status = None  # a launch between its files: the next tick reads them again
            if status is not None:
                subject = ("launch", status.launch, status.phase)
                return Shown(subject, live_text(status, self.width), phase_line(status, self.width))
        wait = waits.current()
        if wait is not None:
            text = wait_text(wait, now, self.width)
            return Shown(("wait", wait.what), text, text)
        if not self.activity:
            return None
        text = busy_text(self.activity, self.activity_since, now, self.width)
        return Shown(("busy", self.activity), text, text)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            with self.lock:
                if self.out.closed or self._stop.is_set():
                    continue
                self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        """Draw once (the caller holds the lock)."""
        if now - self._quiet_since < (SHOW_AFTER_S if self.tty else PLAIN_AFTER_S):
            return
        shown = self.shown(now)
        if shown is None:
            return
        if self.tty:
            text = shown.text.ljust(len(self._drawn))
            if text.rstrip() != self._drawn:
                self.out.write("\r" + text)
                self._drawn = text.rstrip()
                self.out.flush()
            return
        repeat = shown.subject == self._plain_subject
        if repeat and (shown.subject[0] == "launch" or now - self._plain_at < LOG_EVERY_S):
            return
        if shown.subject[0] == "launch" and shown.subject[2] == LEAVING:
            return
        self.out.write(shown.plain + "\n")
        self.out.flush()
        self._plain_subject, self._plain_at = shown.subject, now
        self._quiet_since = now
