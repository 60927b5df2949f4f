"""How a launch ended, phase by phase and rank by rank: the facts the judges read.

A phase ends ``finished`` (every rank wrote its result), ``broken`` (a rank crashed, hung past the
phase's budget, or was cut off by the run's deadline) or ``not_run`` (the launch ended before it;
``reason`` says why). For a broken phase each rank is ``finished``, ``crashed``, ``hung``, ``stopped``
(killed by torchrun after a peer failed), ``cut`` (stopped by the run's deadline while within the
phase's budget: not a fault of the node) or ``not_run``.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from preflight.launch.phase_results import PhaseOutput, RankResult
from preflight.launch.plan import STARTUP_TITLE
from preflight.launch.reaper import Stopped

# What gloo/NCCL/the TCPStore raise on a rank whose peer went away: an echo of another rank's failure.
PEER_FAILURE = re.compile(r"Connection closed by peer|Connection reset by peer|remote process exited|"
                          r"peer.*(closed|disconnect)|Broken pipe|DistBackendError|NCCL communicator was aborted|"
                          r"ProcessGroupNCCL.*(abort|timeout)|TCPStore.*(closed|failed)", re.IGNORECASE)
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")

T = TypeVar("T")
FINISHED = "finished"
BROKEN = "broken"
NOT_RUN = "not_run"


def signal_words(number: int) -> str:
    """``killed by signal 9 (SIGKILL), probably the OOM killer: see `dmesg | grep -i oom```: how a
    process a signal ended is named (SIGKILL from outside preflight is what the kernel's OOM killer sends)."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"killed by signal {number}"
    if number == signal.SIGKILL:
        return f"killed by signal {number} ({name}), probably the OOM killer: see `dmesg | grep -i oom`"
    if number == signal.SIGSEGV:
        return f"killed by signal {number} ({name}, a segmentation fault in native code)"
    return f"killed by signal {number} ({name})"


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """How one rank ended one phase."""

    rank: int
    state: str
    result: RankResult | None = None  # parsed where the launch ended; None for a rank that wrote none
    error: str | None = None
    exitcode: int | None = None
    log_tail: str = ""
    log_path: str = ""
    last_phase: str | None = None
    idle_s: float | None = None
    progress_seq: int = 0
    error_time: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report (the result itself is reported by the check)."""
        return {"rank": self.rank, "state": self.state, "error": self.error, "exitcode": self.exitcode,
                "log_path": self.log_path, "last_phase": self.last_phase, "idle_s": self.idle_s}

    @property
    def output(self) -> PhaseOutput | None:
        """What the phase function returned on this rank, typed; None without a result."""
        return self.result.output if self.result is not None else None

    def where(self) -> str:
        """``at 'DDP step' for 12 s`` (where a rank was when it stopped), or empty."""
        if self.last_phase is None:
            return "before it started"
        idle = f" for {self.idle_s:.0f} s" if self.idle_s is not None else ""
        return f"at '{self.last_phase}'{idle}"


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """One phase of one launch: what every rank did in it."""

    phase: str
    worker: str
    nproc: int
    ranks: tuple[RankOutcome, ...]
    state: str
    timed_out: bool = False  # the phase ran past its own budget: a hang
    cut: bool = False  # the run's (or the launch's) deadline stopped it while within its budget
    duration_s: float = 0.0
    deadline_s: float = 0.0  # the phase's budget
    run_dir: Path = field(default_factory=Path)
    launcher_tail: str = ""
    reason: str = ""  # why a phase did not run
    during: str = ""  # the phase a start-up failure is reported for
    launch_name: str = ""
    launcher_signal: int | None = None  # torchrun itself was ended by this signal (not by preflight)

    @property
    def ok(self) -> bool:
        """True when every rank finished the phase and wrote a result."""
        return self.state == FINISHED and all(r.state == FINISHED for r in self.ranks)

    @property
    def ran(self) -> bool:
        """False when the phase never started (the launch ended or was not started)."""
        return self.state != NOT_RUN

    def ranks_in(self, state: str) -> list[int]:
        """Ranks that ended in ``state``."""
        return [r.rank for r in self.ranks if r.state == state]

    def outputs(self, kind: type[T]) -> list[T]:
        """Every rank's output as ``kind``, in rank order: for a phase that finished (a rank without a
        result, or with another kind of output, raises ValueError or TypeError)."""
        out = []
        for rank in self.ranks:
            if rank.result is None:
                raise ValueError(f"rank {rank.rank} has no {self.phase} result ({rank.state})")
            out.append(rank.result.output_as(kind))
        return out

    def describe(self) -> str:
        """One line: what went wrong, naming ranks and the phase (empty when ok)."""
        if self.ok:
            return ""
        if self.state == NOT_RUN:
            return f"not run: {self.reason}" if self.reason else "not run"
        parts = []
        if self.launcher_signal is not None:
            parts.append(f"torchrun was {signal_words(self.launcher_signal)}; the ranks ended with it")
        if self.during:
            parts.append(f"the launch failed during {STARTUP_TITLE}, before this phase")
        root = self.root_cause()
        if root is not None:
            parts.append(f"rank {root} failed first ({self.ranks[root].error})")
        others = [r for r in self.ranks_in("crashed") if r != root]
        if others:
            parts.append(f"{_ranks(others)} also crashed")
        hung = [r for r in self.ranks if r.state == "hung"]
        if hung:
            parts.append(f"{_ranks([r.rank for r in hung])} did not finish: "
                         + ", ".join(f"rank {r.rank} {r.where()}" for r in hung))
            stuck = self.stuck_ranks()
            if stuck and len(stuck) < len(hung):
                parts.append(f"{_ranks(stuck)} got the least far (the others wait on it)")
        stopped = self.ranks_in("stopped")
        if stopped and self.launcher_signal is None:
            parts.append(f"{_ranks(stopped)} {'was' if len(stopped) == 1 else 'were'} stopped after a peer failed")
        if self.timed_out:
            parts.append(f"the phase ran past its {self.deadline_s:.0f} s budget")
        if self.cut:
            parts.append(self.reason or "stopped by the run's deadline")
        return "; ".join(parts) or "the launch ended without a result for this phase"

    def root_cause(self) -> int | None:
        """The rank that failed first: torchrun's "Root Cause" when it names a crashed rank, else the earliest error."""
        crashed = [r for r in self.ranks if r.state == "crashed"]
        if not crashed:
            return None
        own = [r for r in crashed if not PEER_FAILURE.search(r.error or "")]
        crashed = own or crashed  # a rank that only lost its peer is not the cause, whatever torchrun saw first
        named = root_cause_rank(self.launcher_tail)
        if named is not None and any(r.rank == named for r in crashed):
            return named
        return min(crashed, key=lambda r: r.error_time if r.error_time is not None else float("inf")).rank

    def stuck_ranks(self) -> list[int]:
        """Among hung ranks, those that got the least far: the likely culprits (peers wait on them)."""
        hung = [r for r in self.ranks if r.state == "hung"]
        if not hung:
            return []
        least = min(r.progress_seq for r in hung)
        return [r.rank for r in hung if r.progress_seq == least]

    def evidence(self) -> dict[str, str]:
        """Log tails of every rank that did not finish, plus torchrun's own tail."""
        out = {f"rank{r.rank} log tail ({r.state})": r.log_tail for r in self.ranks
               if r.state not in (FINISHED, NOT_RUN) and r.log_tail}
        if not self.ok and self.ran and self.launcher_tail:
            out["torchrun output tail"] = self.launcher_tail
        return out


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def root_cause_rank(text: str) -> int | None:
    """The rank torchrun names under "Root Cause (first observed failure)"."""
    marker = text.find("Root Cause")
    if marker < 0:
        return None
    match = _FAILURE.search(text, marker)
    return int(match.group(1)) if match else None


def failure_exitcodes(text: str) -> dict[int, int]:
    """Every rank torchrun's failure summary names, with its exit code. The ``Failures:`` block comes
    before ``Root Cause``, so the whole log is read, not its tail (torch/distributed/elastic/
    multiprocessing/errors/__init__.py, ``ChildFailedError.format_msg``)."""
    return {int(m.group(1)): int(m.group(2)) for m in _FAILURE.finditer(text)}




@dataclass(frozen=True, slots=True)
class LaunchResult:
    """Everything one launch produced: a :class:`PhaseResult` per planned phase, in plan order."""

    name: str
    nproc: int
    phases: tuple[PhaseResult, ...]
    timed_out: bool
    cut: bool
    returncode: int | None
    duration_s: float
    run_dir: Path
    launcher_tail: str
    leftovers: tuple[int, ...] = ()
    stopped: tuple[Stopped, ...] = ()  # what preflight had to stop when the launch ended
    launcher_signal: int | None = None

    def phase(self, name: str) -> PhaseResult:
        """The result of phase ``name``."""
        return next(p for p in self.phases if p.phase == name)

    @property
    def ok(self) -> bool:
        """True when every phase finished on every rank."""
        return all(p.ok for p in self.phases)

    def unrun(self) -> list[str]:
        """Phases the launch ended before."""
        return [p.phase for p in self.phases if p.state == NOT_RUN]

    def broken(self) -> PhaseResult | None:
        """The phase that crashed, hung or was cut, if any."""
        return next((p for p in self.phases if p.state == BROKEN), None)



@dataclass(frozen=True, slots=True)
class ScriptResult:
    """One launch of a user's script (``preflight rehearse``): how each rank ended, from its exit code."""

    nproc: int
    ranks: tuple[RankOutcome, ...]
    timed_out: bool
    returncode: int | None
    duration_s: float
    deadline_s: float
    run_dir: Path
    launcher_tail: str
    root: int | None = None
    leftovers: tuple[int, ...] = ()  # still alive after preflight stopped the launch (should be none)
    stopped: tuple[Stopped, ...] = ()  # what preflight had to stop when the launch ended
    launcher_signal: int | None = None  # torchrun was ended by this signal, not by preflight
    ended_by: str | None = None  # why the caller's watch ended the launch before its deadline
    files_removed: bool = False  # the script removed the launch's files while it ran (read back through preflight)
    log_bytes: tuple[int, ...] = ()  # what each rank printed, before a long log was cut

    def root_cause(self) -> int | None:
        """The rank torchrun named first, when it crashed; else the crashed rank with the lowest number."""
        crashed = [r.rank for r in self.ranks if r.state == "crashed"]
        if self.root in crashed:
            return self.root
        return min(crashed) if crashed else None

    def describe(self) -> str:
        """One line: which ranks did not finish, or empty."""
        bad = [f"rank {r.rank} {r.state}" + (f" ({r.error})" if r.error else "") for r in self.ranks
               if r.state != FINISHED]
        return "; ".join(bad)
