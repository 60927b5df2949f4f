"""What one rehearsal launch produced, as plain data: each rank's record joined with how the
launcher saw it end. The judges read only these dataclasses."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from preflight.launch.outcome import RankOutcome, ScriptResult
from preflight.launch.reaper import Stopped
from preflight.rehearse.bootstrap import RECORD_SUFFIX
from preflight.rehearse.watch import BeatWatch, Spread, block_spread

# How a rank ended, from its own record. ``killed``: the record stopped updating while the rank
# was running (a signal, torchrun's SIGTERM after a peer failed); ``missing``: no record at all.
FINISHED = ("steps_done", "returned")
ENDINGS = ("steps_done", "returned", "exit", "raised", "stalled", "deadline", "parent_gone", "os_exit",
           "uncountable", "killed", "missing")
OWN_LINE = "[preflight rehearsal rank "  # the bootstrap's banner in a rank's log, not the script's output
LAST_LINES = 3


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a rank's main-thread stack."""

    file: str
    line: int
    function: str
    code: str = ""

    def where(self) -> str:
        """``train.py:57 (time.sleep(3600))``."""
        code = f" ({self.code})" if self.code else ""
        return f"{Path(self.file).name}:{self.line}{code}"


@dataclass(frozen=True, slots=True)
class RankRun:
    """One rank of one launch. Times are seconds since preflight started torchrun."""

    rank: int
    ended: str
    steps: int
    step_starts_s: tuple[float, ...] = ()
    window_s: float | None = None
    window_steps: int = 0
    exit_code: int | None = None
    launcher_state: str = "finished"
    launcher_error: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str = ""
    error_time: float | None = None
    stack: tuple[Frame, ...] = ()
    idle_s: float | None = None
    still_s: float | None = None  # how long the main thread had sat in one call when its stack was taken
    pg_up_s: float | None = None
    backend: str | None = None
    device: str | None = None
    param_elements: int | None = None
    param_bytes: int | None = None
    sharded_params: bool = False
    deepspeed: bool = False
    rss_peak_bytes: int | None = None
    gpu_peak_bytes: int | None = None
    log_tail: str = ""
    log_path: str = ""
    notes: tuple[str, ...] = ()
    error_frames: tuple[Frame, ...] = ()  # where the error (or the script's os._exit / SystemExit) was raised
    optimizers: tuple[str, ...] = ()  # torch.optim.Optimizer classes the script constructed
    ddp_modules: int = 0  # DistributedDataParallel modules it constructed
    backward_passes: int = 0
    backward_span_s: float | None = None  # first to last backward pass
    marked_steps: bool = False  # the script marked its steps (--step-function or preflight_rehearsal.step())
    stopped: tuple[str, ...] = ()  # processes the rank stopped on its way out ("pid command")
    frozen_s: float | None = None  # its watchdog was silent this long while the process lived
    frozen_state: str = ""  # /proc state and wait channel of a frozen rank
    ended_s: float | None = None
    param_types: tuple[str, ...] = ()  # classes of the stepped parameters (FSDP1's FlatParameter)

    @property
    def last_lines(self) -> tuple[str, ...]:
        """The script's own last lines of output (the bootstrap's banner left out)."""
        lines = [line.rstrip() for line in self.log_tail.splitlines() if line.strip() and OWN_LINE not in line]
        return tuple(lines[-LAST_LINES:])

    @property
    def first_step_s(self) -> float | None:
        """Seconds from the launch to this rank's first optimizer step."""
        return self.step_starts_s[0] if self.step_starts_s else None

    @property
    def peak_memory_bytes(self) -> int | None:
        """Peak GPU memory the allocator reserved, or the peak RSS on a CPU rank."""
        return self.gpu_peak_bytes if self.gpu_peak_bytes is not None else self.rss_peak_bytes

    def intervals_s(self, warmup: int) -> list[float]:
        """Seconds between consecutive steps after the warm-up (host clock at each step)."""
        starts = self.step_starts_s
        return [b - a for a, b in zip(starts[warmup:], starts[warmup + 1:], strict=False)]

    def steps_per_s(self, warmup: int) -> float | None:
        """The synchronised window when the rank ran all its steps, else its host-clock intervals."""
        if self.window_s and self.window_steps:
            return self.window_steps / self.window_s
        gaps = self.intervals_s(warmup)
        return len(gaps) / sum(gaps) if gaps and sum(gaps) > 0 else None


@dataclass(frozen=True, slots=True)
class SizeRun:
    """One launch of the script on ``nproc`` ranks."""

    nproc: int
    ranks: tuple[RankRun, ...]
    warmup: int
    steps: int
    deadline_s: float
    stall_s: float
    duration_s: float
    timed_out: bool = False
    launcher_tail: str = ""
    run_dir: str = ""
    root_cause: int | None = None
    leftovers: tuple[int, ...] = field(default=())
    on_gpu: bool = False
    cpu_cores: int = 0
    launcher_signal: int | None = None  # torchrun itself was ended by this signal (not by preflight)
    stopped: tuple[Stopped, ...] = ()  # what the launcher had to stop when the launch ended
    files_removed: bool = False  # the script removed the rehearsal's files while it ran
    log_bytes: tuple[int, ...] = ()
    ended_by: str | None = None  # why preflight ended the launch before its deadline (a frozen rank)
    notes: tuple[str, ...] = ()

    @property
    def target(self) -> int:
        """Steps each rank runs at least: warm-up plus measured."""
        return self.warmup + self.steps

    @property
    def elapsed_s(self) -> float:
        """How long the script ran, as observed: the launch's time, the deadline when that ended it."""
        return min(self.duration_s, self.deadline_s)

    def left_behind(self) -> list[Stopped]:
        """Processes other than torchrun and the ranks that preflight had to stop: what the script's ranks
        started and left running (a setsid daemon, a pool worker started while its rank was leaving)."""
        return [s for s in self.stopped if s.role == "other"]


@dataclass(frozen=True, slots=True)
class SizeFigures:
    """The measured figures of one size (the slowest rank decides: collectives pace every rank)."""

    nproc: int
    first_step_s: float | None
    step_median_s: float | None
    step_p90_s: float | None
    steps_per_s: float | None
    measured_steps: int
    complete: bool
    peak_memory_bytes: tuple[int | None, ...]
    memory_kind: str
    steps_reached: tuple[int, ...]
    pg_up_s: float | None = None
    spread: Spread | None = None  # the step rate's spread over the measured window's blocks
    idle_ranks: tuple[int, ...] = ()  # ranks that never stepped: the size is not a size of nproc ranks

    @property
    def throughput(self) -> float | None:
        """Per-rank batches per second: steps/s x ranks."""
        return None if self.steps_per_s is None else self.steps_per_s * self.nproc


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation, as numpy's default."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def size_figures(run: SizeRun) -> SizeFigures | None:
    """Figures of a size whose ranks stepped at least once; None when no rank did. The slowest rank
    gives the rate and its spread (collectives pace every rank); ranks that never stepped are named."""
    stepped = [r for r in run.ranks if r.steps > 0]
    if not stepped:
        return None
    rates = [(r.steps_per_s(run.warmup), r) for r in stepped]
    measured = [(rate, r) for rate, r in rates if rate is not None]
    slowest = min(measured, key=lambda item: item[0])[1] if measured else None
    gaps = slowest.intervals_s(run.warmup) if slowest is not None else []
    complete = all(r.ended == "steps_done" for r in run.ranks)
    firsts = [r.first_step_s for r in stepped if r.first_step_s is not None]
    gpu = any(r.gpu_peak_bytes is not None for r in run.ranks)
    return SizeFigures(
        nproc=run.nproc,
        first_step_s=max(firsts) if firsts else None,
        step_median_s=statistics.median(gaps) if gaps else None,
        step_p90_s=percentile(gaps, 0.9) if gaps else None,
        steps_per_s=min(rate for rate, _ in measured) if measured else None,
        measured_steps=min(r.window_steps if r.window_steps else max(0, r.steps - run.warmup - 1) for r in stepped),
        complete=complete,
        peak_memory_bytes=tuple(r.gpu_peak_bytes if gpu else r.rss_peak_bytes for r in run.ranks),
        memory_kind="GPU" if gpu else "RSS",
        steps_reached=tuple(r.steps for r in run.ranks),
        pg_up_s=max((r.pg_up_s for r in run.ranks if r.pg_up_s is not None), default=None),
        spread=block_spread(slowest.step_starts_s, run.warmup) if slowest is not None else None,
        idle_ranks=tuple(r.rank for r in run.ranks if r.steps == 0),
    )


# -- reading what a launch left behind ---------------------------------------------------------

def _frames(data: Any) -> tuple[Frame, ...]:
    if not isinstance(data, list):
        return ()
    return tuple(Frame(str(f.get("file", "")), int(f.get("line") or 0), str(f.get("function", "")),
                       str(f.get("code", ""))) for f in data if isinstance(f, Mapping))


class _LauncherView(TypedDict):
    """The fields of :class:`RankRun` the launcher gives, whether or not the rank wrote a record."""

    launcher_state: str
    launcher_error: str | None
    log_tail: str
    log_path: str


def rank_run(record: Mapping[str, Any] | None, outcome: RankOutcome) -> RankRun:
    """Join a rank's own record (None when it wrote none) with the launcher's view of it."""
    base: _LauncherView = {"launcher_state": outcome.state, "launcher_error": outcome.error,
                           "log_tail": outcome.log_tail, "log_path": outcome.log_path}
    if record is None:
        return RankRun(rank=outcome.rank, ended="missing", steps=0, exit_code=outcome.exitcode, **base)
    ended = str(record.get("ended", "running"))
    if ended == "running":
        ended = "killed"  # the rank never reached an ending of its own: a signal ended it
    error: Mapping[str, Any] | None = record["error"] if isinstance(record.get("error"), Mapping) else None
    memory: Mapping[str, Any] = record["memory"] if isinstance(record.get("memory"), Mapping) else {}
    frozen: Mapping[str, Any] | None = record["frozen"] if isinstance(record.get("frozen"), Mapping) else None
    exit_code = record.get("exit_code")
    return RankRun(
        rank=int(record.get("rank", outcome.rank)),
        ended=ended,
        steps=int(record.get("steps", 0)),
        step_starts_s=tuple(float(t) for t in record.get("step_starts_s", [])),
        window_s=record.get("window_s"),
        window_steps=int(record.get("window_steps") or 0),
        exit_code=int(exit_code) if exit_code is not None else outcome.exitcode,
        error_type=str(error["type"]) if error and error.get("type") else None,
        error_message=str(error.get("message", "")) if error else None,
        traceback=str(error.get("traceback", "")) if error else "",
        error_time=float(error["time"]) if error and error.get("time") is not None else None,
        stack=_frames(record.get("stack")),
        idle_s=record.get("idle_s"),
        still_s=record.get("still_s"),
        pg_up_s=record.get("pg_up_s"),
        backend=record.get("backend"),
        device=record.get("device"),
        param_elements=record.get("param_elements"),
        param_bytes=record.get("param_bytes"),
        sharded_params=bool(record.get("sharded_params")),
        deepspeed=bool(record.get("deepspeed")),
        rss_peak_bytes=memory.get("rss_peak_bytes"),
        gpu_peak_bytes=memory.get("cuda_reserved_peak_bytes"),
        notes=tuple(str(n) for n in record.get("notes", [])),
        error_frames=_frames(error.get("frames")) if error else (),
        optimizers=tuple(str(o) for o in record.get("optimizers") or ()),
        ddp_modules=int(record.get("ddp_modules") or 0),
        backward_passes=int(record.get("backward_passes") or 0),
        backward_span_s=record.get("backward_span_s"),
        marked_steps=bool(record.get("marked_steps")),
        stopped=tuple(str(p) for p in record.get("stopped") or ()),
        frozen_s=frozen.get("silent_s") if frozen else None,
        frozen_state=" ".join(filter(None, [f"state {frozen.get('state')}" if frozen and frozen.get("state") else "",
                                            f"waiting in {frozen.get('wchan')}" if frozen and frozen.get("wchan")
                                            else ""])),
        ended_s=record.get("ended_s"),
        param_types=tuple(str(t) for t in record.get("param_types") or ()),
        **base,
    )


def read_record(run_dir: Path, rank: int) -> dict[str, Any] | None:
    """``rank<N>.rehearsal.json``, or None when the rank wrote none (or only half of one)."""
    try:
        data = json.loads((run_dir / f"rank{rank}{RECORD_SUFFIX}").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def size_run_from_launch(launch: ScriptResult, *, warmup: int, steps: int, stall_s: float, on_gpu: bool = False,
                         cpu_cores: int = 0, watch: BeatWatch | None = None) -> SizeRun:
    """The judges' view of one launch: each rank's record as the watch built it (its file may not have been
    written: a full disk), else as the rank's file holds it."""
    kept = watch.records if watch is not None else {}
    ranks = tuple(rank_run(kept.get(outcome.rank) or read_record(launch.run_dir, outcome.rank), outcome)
                  for outcome in launch.ranks)
    return SizeRun(nproc=launch.nproc, ranks=ranks, warmup=warmup, steps=steps, deadline_s=launch.deadline_s,
                   stall_s=stall_s, duration_s=launch.duration_s, timed_out=launch.timed_out,
                   launcher_tail=launch.launcher_tail, run_dir=str(launch.run_dir), root_cause=launch.root_cause(),
                   leftovers=launch.leftovers, on_gpu=on_gpu, cpu_cores=cpu_cores,
                   launcher_signal=launch.launcher_signal, stopped=launch.stopped,
                   files_removed=launch.files_removed, log_bytes=launch.log_bytes, ended_by=launch.ended_by,
                   notes=tuple(watch.problems) if watch is not None else ())
