"""The rehearsal's side of a running launch: the ranks' beat files, read while the launch runs.

Before torchrun starts, one beat file per rank (:mod:`preflight.rehearse.beat`), kept open. While it
runs, every poll reads their headers and:

- ends the launch when a rank that has stepped has had no watchdog tick for the stall limit: its
  interpreter is frozen (native code holding the GIL, a stopped process), so its own watchdog
  cannot call the stall; the process's state and kernel wait channel are kept as evidence;
- decides where the measured window ends (``stop_at``): the ranks start with it undecided (the
  beat's room), and once the slowest rank has a few steps after the warm-up it is set to at least
  the plan's steps and ``MIN_WINDOW_S``; later it grows while the step rate's 95 % interval is wider
  than ``TARGET_SPREAD``, within ``MAX_WINDOW_S``, the beat's room and the deadline. It is written
  only while every rank is at least ``MARGIN_S`` of steps short of both the old and the new value,
  and the ranks' counts are read again after the write: every rank then reads it before it gets
  there, and all stop at the same step (``preflight/rehearse/bootstrap.py`` says why that matters);
- answers the live line: the step the slowest rank is at, or what the launch waits for (a rank's
  next step) and until when (the stall limit).

When the launch has ended it builds each rank's record from the beat file (the header's counts and
times, which every step wrote, over the record's slower copy), keeps it for the judges, and writes it
as ``rank<N>.rehearsal.json`` (private) when the disk takes it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.launch.torchrun import LaunchStatus
from preflight.rehearse import beat as beats
from preflight.rehearse.bootstrap import RECORD_SUFFIX
from preflight.workers.rank_log import create_private

MIN_WINDOW_S = 3.0
MAX_WINDOW_S = 20.0
TARGET_SPREAD = 0.05  # 95 % half-width of the step rate, relative
MAX_FACTOR = 20  # the window grows to at most this many times the planned steps ...
MIN_ROOM = 20000  # ... or this many steps (fast steps need thousands for MIN_WINDOW_S)
BLOCKS = 6  # the window is cut into this many blocks to see its spread
MARGIN_S = 1.0  # stop_at moves only while every rank is this many seconds of steps short of it
DECIDE_EVERY_S = 0.25
WAITING_AFTER_S = 2.0  # the live line says what it waits for after this long without a step
FROZEN_MARGIN_S = 2.0
FROZEN_AT_END_S = 3.0  # a rank the launch ended whose watchdog had been silent this long was frozen
DEADLINE_SAFETY_S = 5.0
# two-sided 95 % Student t quantiles by degrees of freedom (blocks - 1)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def capacity_for(warmup: int, steps: int) -> int:
    """Step times a beat file holds: room for the window to grow (``MAX_FACTOR`` times, or ``MIN_ROOM``)."""
    return warmup + max(steps * MAX_FACTOR, MIN_ROOM) + 2


@dataclass(frozen=True, slots=True)
class Spread:
    """A rate from equal blocks of a window: its mean (steps/s) and 95 % half-width relative to it."""

    rate: float
    relative: float
    blocks: int


def block_spread(starts: list[float] | tuple[float, ...], first: int, blocks: int = BLOCKS) -> Spread | None:
    """The step rate over ``starts[first:]`` in ``blocks`` equal blocks of steps (None below 2 steps a block)."""
    window = list(starts[first:])
    per = (len(window) - 1) // blocks
    if per < 2:
        return None
    rates = []
    for index in range(blocks):
        begin, end = window[index * per], window[(index + 1) * per]
        if end <= begin:
            return None
        rates.append(per / (end - begin))
    mean = statistics.fmean(rates)
    half = T95.get(blocks - 1, 2.0) * statistics.stdev(rates) / math.sqrt(blocks)
    return Spread(rate=mean, relative=half / mean if mean > 0 else math.inf, blocks=blocks)


@dataclass(frozen=True, slots=True)
class Frozen:
    """A rank whose watchdog went silent while it lived: what the kernel says the process is doing."""

    rank: int
    pid: int
    silent_s: float
    after_step: int
    state: str
    wchan: str


def _proc_state(pid: int) -> tuple[str, str]:
    """The process's state letter and kernel wait channel, from /proc ('' where unreadable)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        wchan = ""
    return state, "" if wchan == "0" else wchan


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    state, _ = _proc_state(pid)
    return state not in ("", "Z", "X")


class BeatWatch:
    """One launch's beat files (a :class:`preflight.launch.torchrun.LaunchWatch`)."""

    def __init__(self, *, label: str, warmup: int, steps: int, stall_s: float, launched: float, deadline_s: float,
                 capacity: int, measure_for_s: float = MAX_WINDOW_S) -> None:
        self.measure_for_s = measure_for_s
        self.label = label
        self.warmup = warmup
        self.target = warmup + steps
        self.stall_s = stall_s
        self.launched = launched
        self.deadline_s = deadline_s
        self.capacity = capacity
        self.fds: dict[int, int] = {}
        self.nproc = 0
        self.problems: list[str] = []
        self.frozen: list[Frozen] = []
        self.views: dict[int, beats.BeatView] = {}
        self.records: dict[int, dict[str, Any]] = {}  # kept here too: a full disk may refuse the file
        self.undecided = capacity - 2  # the ranks' stop until the first decision
        self.stop_at = self.undecided
        self.decided = False
        self.fixed = False  # the plan's window, not to be moved (a rank counts where preflight cannot write)
        self.late: str | None = None  # a decision that a rank may have overtaken (never seen in practice)
        self._next_decision = 0.0
        self.last_poll = launched
        self._lock = threading.Lock()
        self._closed = False

    # -- LaunchWatch -----------------------------------------------------------------------------

    def prepare(self, run_dir: Path, nproc: int) -> None:
        """A beat file per rank, allocated now (a disk that fills later cannot take it)."""
        self.nproc = nproc
        for rank in range(nproc):
            try:
                self.fds[rank] = beats.create(run_dir / beats.beat_name(rank), capacity=self.capacity,
                                              target=self.target, launched=self.launched, stop_at=self.undecided)
            except OSError as exc:
                self.problems.append(f"rank {rank}'s beat file could not be made ({exc.strerror or exc}): it "
                                     "counts in a file of its own, and the window is the plan's")
        if len(self.fds) < nproc:  # a rank without preflight's file stops at the plan's step: every rank must
            for fd in self.fds.values():
                beats.set_stop_at(fd, self.target)
            self.stop_at, self.decided, self.fixed = self.target, True, True

    def poll(self, now: float) -> str | None:
        """A frozen rank ends the launch; otherwise the window may grow."""
        self.last_poll = now
        headers = self._headers()
        frozen = [self._frozen(rank, view, now) for rank, view in headers.items()]
        found = [f for f in frozen if f is not None]
        if found:
            self.frozen = found
            worst = max(found, key=lambda f: f.silent_s)
            return (f"rank {worst.rank}'s watchdog was silent for {worst.silent_s:.0f} s after step "
                    f"{worst.after_step} while the process lived")
        if now >= self._next_decision:
            self._next_decision = now + DECIDE_EVERY_S
            self._grow(headers, now)
        return None

    def finish(self, run_dir: Path) -> None:
        """Each rank's record from its beat file (through the kept descriptor), then the beat file goes."""
        with self._lock:
            self._closed = True
            for rank in range(self.nproc):
                fd = self.fds.pop(rank, None)
                path = run_dir / beats.beat_name(rank)
                try:  # a rank whose file preflight could not make made its own, when it could
                    view = beats.parse(beats.read_bytes(fd)) if fd is not None else beats.read_path(path)
                except OSError:
                    view = None
                finally:
                    if fd is not None:
                        os.close(fd)
                if view is not None and view.pid:  # pid 0: no rank ever opened it (torchrun started none)
                    self.views[rank] = view
                    self._frozen_at_end(rank, view)
                    self._write_record(run_dir, rank, view)
                path.unlink(missing_ok=True)

    # -- the live line ---------------------------------------------------------------------------

    def status(self, nproc: int, now: float) -> LaunchStatus:
        """The launch as the live line shows it: the step the slowest rank is at, or, after a while without
        a step, whose step it waits for and until when (the stall limit); before the first step, the launch's
        clock against its deadline."""
        headers = self._headers()
        elapsed = max(0.0, now - self.launched)
        started = [v for v in headers.values() if v.pid]

        def line(phase: str, label: str, done: int, phase_elapsed: float, budget: float) -> LaunchStatus:
            return LaunchStatus(launch=self.label, phase=phase, label=label, nproc=nproc, ranks_done=done,
                                waiting=False, elapsed_s=elapsed, phase_elapsed_s=phase_elapsed,
                                phase_budget_s=budget, deadline_s=self.deadline_s)

        if len(started) < nproc:
            return line("start-up", f"{len(started)}/{nproc} ranks started", 0, elapsed, self.deadline_s)
        done = sum(1 for v in started if v.ended != "running")
        running = [v for v in started if v.ended == "running"]
        if not running:
            return line("leaving", f"{done}/{nproc} ranks ended", done, 0.0, self.stall_s)
        slowest = min(running, key=lambda v: (v.count, v.heartbeat))  # a frozen rank's heartbeat is the oldest
        if slowest.count == 0:
            return line("before the first optimizer step", "importing, loading data, building the model", done,
                        elapsed, self.deadline_s)
        idle = max(0.0, now - slowest.last_step)
        rank = next(r for r, v in headers.items() if v is slowest)
        if idle >= WAITING_AFTER_S:
            return line(f"waiting for rank {rank}'s step {slowest.count + 1}",
                        f"hung if none by {self.stall_s:.0f} s", done, idle, self.stall_s)
        goal = "the window's end undecided" if not self.decided else f"to step {self.stop_at}"
        return line("measuring", f"step {slowest.count}, {goal}", done, idle, self.stall_s)

    # -- inside ----------------------------------------------------------------------------------

    def _headers(self) -> dict[int, beats.BeatView]:
        with self._lock:
            if self._closed:
                return dict(self.views)
            out = {}
            for rank, fd in self.fds.items():
                view = beats.read_header(fd)
                if view is not None:
                    out[rank] = view
            return out

    def _frozen(self, rank: int, view: beats.BeatView, now: float) -> Frozen | None:
        if view.count < 1 or view.ended != "running" or not view.heartbeat:
            return None
        silent = now - view.heartbeat
        if silent < self.stall_s + FROZEN_MARGIN_S or not _alive(view.pid):
            return None
        state, wchan = _proc_state(view.pid)
        return Frozen(rank=rank, pid=view.pid, silent_s=silent, after_step=view.count, state=state, wchan=wchan)

    def _frozen_at_end(self, rank: int, view: beats.BeatView) -> None:
        """A rank the launch's end killed (it reached no ending of its own) whose watchdog had been silent
        for a while before: its interpreter was frozen, and its last stack is from before that."""
        if view.ended != "running" or not view.heartbeat or any(f.rank == rank for f in self.frozen):
            return
        silent = self.last_poll - view.heartbeat
        if silent >= FROZEN_AT_END_S:
            state, wchan = _proc_state(view.pid) if _alive(view.pid) else ("", "")
            self.frozen.append(Frozen(rank=rank, pid=view.pid, silent_s=silent, after_step=view.count, state=state,
                                      wchan=wchan))

    def _grow(self, headers: dict[int, beats.BeatView], now: float) -> None:
        """Set, then grow, every rank's stop (see the module doc)."""
        if self.fixed:
            return
        if len(headers) < self.nproc or not all(v.pid for v in headers.values()):
            return  # not every rank has started: its count is unknown
        running = [v for v in headers.values() if v.ended == "running"]  # a rank that ended has no stop to read
        if not running or any(v.count == 0 for v in running):
            return
        slowest = min(running, key=lambda v: v.count)
        fastest = max(v.count for v in running)
        if slowest.count < self.warmup + 4:
            return
        fd = self.fds[next(r for r, v in headers.items() if v is slowest)]
        try:
            raw = os.pread(fd, 8 * min(slowest.count, self.capacity), beats.TIMES_AT)
        except OSError:
            return
        times = [t for (t,) in struct.iter_unpack("<d", raw[: len(raw) // 8 * 8])]
        window = times[self.warmup:]
        if len(window) < 3 or window[-1] <= window[0]:
            return
        step_s = (window[-1] - window[0]) / (len(window) - 1)
        planned = self.target - self.warmup
        wanted = max(planned, math.ceil(min(MIN_WINDOW_S, self.measure_for_s) / step_s))
        spread = block_spread(times, self.warmup)
        if spread is not None and spread.relative > TARGET_SPREAD and \
                window[-1] - window[0] >= min(MIN_WINDOW_S, self.measure_for_s) / 2:
            wanted = max(wanted, math.ceil((len(window) - 1) * (spread.relative / TARGET_SPREAD) ** 2))
        left_s = self.launched + self.deadline_s - DEADLINE_SAFETY_S - now
        room = min(self.undecided - self.warmup, max(planned, math.floor(self.measure_for_s / step_s)),
                   max(planned, len(window) - 1 + math.floor(max(0.0, left_s) / step_s)))
        margin = max(2, math.ceil(MARGIN_S / step_s))
        new_stop = self.warmup + max(planned, min(wanted, room))
        if not self.decided:
            new_stop = max(new_stop, fastest + margin)  # never behind a rank that ran fast while undecided
        elif new_stop <= self.stop_at:
            return  # once decided, the window only grows
        if new_stop == self.stop_at or fastest + margin > min(new_stop, self.stop_at):
            return  # too close to a stop some rank may reach before it reads the new one: leave it
        for fd in self.fds.values():
            try:
                beats.set_stop_at(fd, new_stop)
            except OSError:
                continue
        self.stop_at, self.decided = new_stop, True
        after = self._headers()
        if any(v.count >= new_stop for v in after.values()):
            self.late = f"a rank had passed step {new_stop} when its stop was set: the ranks may end a step apart"

    def _write_record(self, run_dir: Path, rank: int, view: beats.BeatView) -> None:
        record: dict[str, Any] = dict(view.record or {})
        base = view.launched or self.launched
        record.update({
            "rank": record.get("rank", rank),
            "steps": view.count,
            "step_starts_s": [round(t - base, 6) for t in view.step_starts],
            "target_steps": max(view.stop_at, view.target),
            "backward_passes": view.backward,
        })
        if view.ended != "running" or record.get("ended") in (None, "running"):
            record["ended"] = view.ended
        if view.ended != "running":
            record["exit_code"] = view.exit_code
        if view.window_end > view.window_start > 0:
            record["window_s"] = round(view.window_end - view.window_start, 6)
            record["window_steps"] = view.count - self.warmup
        if view.heartbeat:
            record["heartbeat_age_s"] = round(time.monotonic() - view.heartbeat, 3)
        if view.first_backward:
            record["backward_span_s"] = round(view.last_backward - view.first_backward, 6)
        frozen = next((f for f in self.frozen if f.rank == rank), None)
        if frozen is not None:
            record["frozen"] = {"silent_s": round(frozen.silent_s, 1), "state": frozen.state, "wchan": frozen.wchan,
                                "after_step": frozen.after_step}
        record["notes"] = [*record.get("notes", []), *self.problems]
        self.records[rank] = record
        path = run_dir / f"rank{rank}{RECORD_SUFFIX}"
        try:
            fd = create_private(path)
            try:
                data = json.dumps(record, default=str).encode()
                if os.write(fd, data) < len(data):
                    raise OSError(28, "No space left on device (short write)")
            finally:
                os.close(fd)
        except OSError as exc:
            path.unlink(missing_ok=True)
            self.problems.append(f"rank {rank}'s record file could not be written ({exc.strerror or exc}): its "
                                 "figures come from its beat file, read before the disk refused the copy")
