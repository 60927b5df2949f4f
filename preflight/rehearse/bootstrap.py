"""The torchrun entry point of a rehearsal: runs the user's script unchanged and counts its steps.

``torchrun --standalone --nproc-per-node=K .../bootstrap.py train.py --its --own --args``

Each rank sends its output to ``rank<N>.log`` (private: the launcher made it), registers a global
optimizer-step hook (``torch.optim.optimizer.register_optimizer_step_post_hook``, public since
torch 2.0; it fires for every ``torch.optim.Optimizer``, so for DDP, FSDP2 and the optimizers
DeepSpeed wraps), sets ``PREFLIGHT_REHEARSAL=1`` and runs the script as ``__main__`` with
``runpy.run_path`` (``sys.argv`` and ``sys.path[0]`` as ``python train.py`` would set them).
It imports nothing but torch and the standard library, and loads its two siblings
(``beat.py``, ``../workers/rank_log.py``, both standard library only) by their paths: preflight
may live in another environment than the job, and this file runs with the job's interpreter.

**What a step is.** One training iteration, whatever number of ``Optimizer.step`` calls it makes.
A call that touches a parameter group already stepped in the current iteration begins the next
one; calls on other groups join the current one. So DeepSpeed's ZeRO optimizers (which call the
inner optimizer once per parameter group or sub-group) and a script with two optimizers (a GAN)
count one step per iteration. A step nested in another (a subclass calling ``super().step()``) is
counted once: only the outermost ``Optimizer.step`` wrapper counts (looked for in the few frames
above the hook, where an outer step would be, so the check costs the same at any stack depth).
A script that updates its parameters itself marks its steps instead: ``--step-function NAME``
counts each call of its function ``NAME``, or the script calls ``preflight_rehearsal.step()``
(a module that exists only in a rehearsal); then the optimizer hook is not used.

**How every rank stops at the same step, and why that is safe.** Each rank stops at the hook call
that begins step ``stop_at + 1``, a value in its beat file that every rank reads at every step and
that preflight sets while they run (``preflight.rehearse.watch``: long enough to know the window's
spread, and only while every rank is well short of both the old and the new value): it
synchronises its CUDA device, writes its record and leaves with ``os._exit(0)``. A data-parallel
job (DDP, FSDP, ZeRO) is SPMD: every rank issues the same collectives in the same order, and the
hook calls fall at the same points of that order on every rank (every rank runs the same
iterations; with gloo a rank cannot even pass a collective its peers have not joined). Stopping
every rank at the same hook call therefore cuts the job where each rank has issued exactly the
same collectives: the gradient all-reduce (DDP), reduce-scatter and norm all-reduce (ZeRO, FSDP's
clipping) of that iteration were issued by all ranks before the optimizer ran, and the parameter
all-gathers that come after it (ZeRO-1/2 after the step, FSDP in the next forward) are issued by
none. No rank is left alone in a collective, and the CUDA synchronise completes because every
kernel in flight has all its peers enqueued too. ``os._exit`` skips what would come next in the
script (a final checkpoint save, itself a collective in DeepSpeed and DCP,
``destroy_process_group``) and the interpreter's teardown, where a wedged NCCL or CUDA destructor
could hold the rank.

**What is shared with preflight, and how it survives.** Every figure goes into the rank's beat file
(``beat.py``), which preflight made before the launch and keeps open: written in place, so a full
disk, a script that deletes the report directory, or a signal cannot take what was measured.
No write of the rank's own may stop it: a failed one becomes a note, and the rank still stops at
its step. A script's own ``os._exit`` is recorded (its code, where it was called) before it runs.

**Never outlive preflight.** A watchdog thread exits the rank (after writing its record) when
torchrun or preflight is gone, when the rank's own deadline passes, or when no step came for the
stall limit after the first one. While the main thread makes no progress it records the main
thread's Python stack, so a hang is reported with where each rank waits. On its way out a rank
stops every process it started, the ones a ``multiprocessing.Pool`` starts while it does included.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import importlib.util
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preflight.rehearse import beat as beats
    from preflight.workers import rank_log
else:

    def _sibling(name: str, relative: str) -> types.ModuleType:
        """A standard-library-only module of preflight, loaded by its path (preflight need not be importable)."""
        path = Path(__file__).resolve().parent / relative
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module

    beats = _sibling("_preflight_rehearsal_beat", "beat.py")
    rank_log = _sibling("_preflight_rank_log", os.path.join("..", "workers", "rank_log.py"))

REHEARSAL_ENV = "PREFLIGHT_REHEARSAL"
RUN_DIR_ENV = "PREFLIGHT_RUN_DIR"  # the launcher's (preflight.workers.common.RUN_DIR_ENV)
WARMUP_ENV = "PREFLIGHT_REHEARSAL_WARMUP"
STEPS_ENV = "PREFLIGHT_REHEARSAL_STEPS"
STALL_ENV = "PREFLIGHT_REHEARSAL_STALL_S"
DEADLINE_ENV = "PREFLIGHT_REHEARSAL_DEADLINE"  # time.monotonic() value (CLOCK_MONOTONIC is system-wide)
LAUNCHED_ENV = "PREFLIGHT_REHEARSAL_LAUNCHED"  # time.monotonic() when preflight started torchrun
PARENT_ENV = "PREFLIGHT_REHEARSAL_PARENT_PID"  # preflight's own pid
CAPACITY_ENV = "PREFLIGHT_REHEARSAL_CAPACITY"  # step times the beat file holds (the most steps a rank may run)
STEP_FUNCTION_ENV = "PREFLIGHT_REHEARSAL_STEP_FUNCTION"  # NAME or Class.NAME: each call is one step
MARK_MODULE = "preflight_rehearsal"  # ``from preflight_rehearsal import step``: the documented step mark
STEP_DECORATOR = "__preflight_rehearsal_step__"

RECORD_SUFFIX = ".rehearsal.json"  # the record preflight writes from the beat file once the launch ended
EXIT_STALLED = 86
EXIT_DEADLINE = 87
EXIT_PARENT_GONE = 88

TICK_S = 0.25
WRITE_EVERY_S = 1.0
STACK_AFTER_S = 2.0  # idle this long: keep the main thread's stack in the record
STACK_FRAMES = 14
ERROR_FRAMES = 30
TRACEBACK_LINES = 40
NESTED_FRAMES = 8
MAX_NOTES = 8
STOP_GRACE_S = 1.0

_REAL_EXIT = os._exit  # the bootstrap's own way out; the script's os._exit is recorded first


def _now() -> float:
    return time.monotonic()


class StepCounter:
    """One rank's state: steps seen, what it measured, how it ended; mirrored into its beat file."""

    def __init__(self, run_dir: Path, rank: int, script: str, warmup: int, steps: int, stall_s: float,
                 deadline: float | None, launched: float | None, parent_pid: int | None,
                 capacity: int | None = None) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.pid = os.getpid()
        self.script = script
        self.warmup = warmup
        self.target = warmup + steps
        self.stall_s = stall_s
        self.deadline = deadline
        self.started = _now()
        self.launched = launched if launched is not None else self.started
        self.parent_pid = parent_pid
        self.parent_start = _proc_start_time(parent_pid) if parent_pid else None
        self.torchrun_pid = os.getppid()
        self.count = 0
        self.starts: list[float] = []
        self.current: set[int] = set()
        self.window: tuple[float, float] | None = None
        self.window_start: float | None = None
        self.ended = "running"
        self.exit_code: int | None = None
        self.error: dict[str, Any] | None = None
        self.stack: list[dict[str, Any]] | None = None
        self._still_frame: Any = None  # the main thread's innermost frame at the last look
        self._still_line = 0
        self._still_since: float | None = None
        self.pg_up: float | None = None
        self.backend: str | None = None
        self.device: Any = None
        self.params: dict[int, tuple[int, int, bool]] = {}
        self.param_types: set[str] = set()
        self.deepspeed = False
        self.optimizers: list[str] = []  # torch.optim.Optimizer classes constructed, in order (first few)
        self.ddp = 0  # DistributedDataParallel instances constructed
        self.backward = 0
        self.marking = False  # the script marks its steps: the optimizer hook no longer counts
        self.stopped: list[str] = []  # processes stopped on the way out: "pid command"
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._final = False
        self._wrapper_code: Any = None
        self.forked = False  # True in a child the script forked (DataLoader, Pool): it inherits the hooks
        os.register_at_fork(after_in_child=self._in_child)
        self.beat, problem = beats.Beat.attach(run_dir / beats.beat_name(rank),
                                               capacity=capacity or self.target + 2, target=self.target,
                                               launched=self.launched)
        if problem:
            self.add_note(problem)
        self.beat.ints[beats.PID] = self.pid
        self.beat.floats[beats.STARTED] = self.started
        self.beat.floats[beats.HEARTBEAT] = self.started

    def _in_child(self) -> None:
        self.forked = True

    def add_note(self, text: str) -> None:
        """Something the report should say about the rehearsal itself (a failed write, a hook error)."""
        if len(self.notes) < MAX_NOTES and text not in self.notes:
            self.notes.append(text)

    @property
    def stop_at(self) -> int:
        """The last step this rank runs: what preflight decided (never fewer than the plan's, never past the
        beat's room); the plan's when preflight is not watching."""
        decided = int(self.beat.ints[beats.STOP_AT])
        return min(max(self.target, decided), max(self.target, self.beat.capacity - 1))

    # -- the hooks (main thread) -------------------------------------------------------------

    def post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Count the step; stop the rank at the step after the last one measured."""
        if self.marking or self.forked:  # marks count instead; or a forked child inherited the hook
            return
        try:
            if self._nested():
                return
            groups = [id(group["params"][0]) for group in optimizer.param_groups if group["params"]]
            if self.count == 0 or not self.current.isdisjoint(groups):
                self._begin_step(optimizer)
                self.current = set(groups)
            else:
                self.current.update(groups)
            if self.count == 1:
                self._note_params(optimizer)
        except Exception as exc:  # noqa: BLE001 - the rehearsal must never break the user's step
            self.add_note(f"step hook failed: {type(exc).__name__}: {exc}")

    def mark(self) -> None:
        """One step, as the script marks it (``--step-function`` or ``preflight_rehearsal.step()``)."""
        if self.forked:
            return
        try:
            if not self.marking:
                self.marking = True
                if self.count:  # optimizer steps seen before the first mark: the marks count from here
                    self.add_note(f"the script marks its steps: {self.count} optimizer steps before its first mark "
                              "are not counted")
                    self.count, self.starts, self.window_start = 0, [], None
            self._begin_step(None)
        except Exception as exc:  # noqa: BLE001 - never break the user's step
            self.add_note(f"step mark failed: {type(exc).__name__}: {exc}")

    def _begin_step(self, optimizer: Any) -> None:
        now = _now()
        if self.count >= self.stop_at:
            self._stop(optimizer)
        if self.count == self.warmup:
            self._synchronize(optimizer)
            now = _now()
            self.window_start = now
            self.beat.floats[beats.WINDOW_START] = now
        index = self.count
        self.count += 1
        self.starts.append(now)
        if index < self.beat.capacity:
            self.beat.times[index] = now
        self.beat.ints[beats.COUNT] = self.count
        self.beat.floats[beats.LAST_STEP] = now

    def on_backward(self) -> None:
        """A backward pass ran: a script with backward passes and no optimizer step has steps no hook can
        count; after as many backward passes as the rehearsal has steps it ends, saying so."""
        if self.forked:
            return
        now = _now()
        self.backward += 1
        self.beat.ints[beats.BACKWARD] = self.backward
        if self.backward == 1:
            self.beat.floats[beats.FIRST_BACKWARD] = now
        self.beat.floats[beats.LAST_BACKWARD] = now
        if self.count == 0 and not self.marking and not self.optimizers and self.backward > self.target:
            self.finish("uncountable", 0)

    def on_optimizer(self, optimizer: Any) -> None:
        """A torch.optim.Optimizer was constructed."""
        if os.getpid() == self.pid and len(self.optimizers) < 8:
            self.optimizers.append(type(optimizer).__name__)

    def on_ddp(self) -> None:
        """A DistributedDataParallel module was constructed: the job exchanges gradients that way."""
        if os.getpid() == self.pid:
            self.ddp += 1

    def _nested(self) -> bool:
        """True inside another Optimizer.step (a subclass calling super().step()): count the outer one."""
        code = self._wrapper_code
        frame = sys._getframe(2)  # skip this method and post_hook: frame is the wrapper calling us
        if code is None:
            code = self._wrapper_code = frame.f_code
        outer = frame.f_back
        for _ in range(NESTED_FRAMES):  # an outer step sits a few frames up (subclass, ZeRO wrapper)
            if outer is None:
                return False
            if outer.f_code is code:
                return True
            outer = outer.f_back
        return False

    def _note_params(self, optimizer: Any) -> None:
        """Parameters of the first step (numel is global for FSDP2's DTensors; a ZeRO partition on
        one rank is the whole model), and whether DeepSpeed drives the step."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                if id(param) not in self.params:
                    self.params[id(param)] = (int(param.numel()), int(param.element_size()),
                                              hasattr(param, "to_local"))
                    self.param_types.add(type(param).__name__)
                if self.device is None:
                    self.device = param.device
        self.deepspeed = self.deepspeed or "deepspeed" in sys.modules

    def _synchronize(self, optimizer: Any) -> None:
        """Wait for the device's queued work, so the measured window is the device's time."""
        import torch

        cuda: Any = torch.cuda  # torch.cuda's helpers carry no annotations
        if not cuda.is_initialized():
            return
        device = self.device
        for group in optimizer.param_groups if optimizer is not None else ():
            for param in group["params"]:
                device = param.device
                break
        if device is not None and getattr(device, "type", "") == "cuda":
            cuda.synchronize(device)
        elif optimizer is None:
            cuda.synchronize()

    def _stop(self, optimizer: Any) -> None:
        self._synchronize(optimizer)
        end = _now()
        if self.window_start is not None:
            self.window = (self.window_start, end)
            self.beat.floats[beats.WINDOW_END] = end
        self.finish("steps_done", 0)

    # -- ending ----------------------------------------------------------------------------

    def finish(self, ended: str, code: int, error: dict[str, Any] | None = None) -> None:
        """Write the final record and leave the process at once (any thread). Nothing here may raise:
        a rank whose record cannot be written (a full disk) still stops."""
        with self._lock:
            if self._final:
                return
            self.ended = ended
            self.exit_code = code
            self.error = error
            with contextlib.suppress(Exception):
                if ended in ("stalled", "deadline", "parent_gone"):
                    self._look(_now())
                else:
                    self.stack = None
                self.beat.ints[beats.ENDED] = beats.ENDINGS.index(ended)
                self.beat.ints[beats.EXIT_CODE] = code
                self.beat.floats[beats.ENDED_AT] = _now()
            self._write()
            self._final = True
        _leave(code, self)

    def record(self, starts: bool = True) -> dict[str, Any]:
        """The rank's record: every time is seconds since preflight started torchrun. The beat file's copy
        leaves the step times out (``starts=False``): its header holds them, however many there are."""
        import torch

        base = self.launched
        params = list(self.params.values())  # one C-level copy: the main thread may be adding to it
        elements = sum(n for n, _, _ in params)
        size_bytes = sum(n * s for n, s, _ in params)
        stop_at = self.stop_at
        return {
            "rank": self.rank,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "pid": self.pid,
            "script": self.script,
            "warmup": self.warmup,
            "target_steps": stop_at,
            "bootstrap_s": round(self.started - base, 4),
            "steps": self.count,
            "step_starts_s": [round(t - base, 6) for t in list(self.starts)] if starts else [],
            "window_s": None if self.window is None else round(self.window[1] - self.window[0], 6),
            "window_steps": self.count - self.warmup if self.window is not None else 0,
            "ended": self.ended,
            "ended_s": round(_now() - base, 4),
            "exit_code": self.exit_code,
            "error": self.error,
            "stack": self.stack,
            "idle_s": round(_now() - (self.starts[-1] if self.starts else self.started), 3),
            "still_s": None if self._still_since is None else round(_now() - self._still_since, 3),
            "pg_up_s": None if self.pg_up is None else round(self.pg_up - base, 3),
            "backend": self.backend,
            "device": None if self.device is None else str(self.device),
            "param_elements": elements or None,
            "param_bytes": size_bytes or None,
            "param_types": sorted(self.param_types),
            "sharded_params": any(sharded for _, _, sharded in params),
            "deepspeed": self.deepspeed,
            "optimizers": list(self.optimizers),
            "ddp_modules": self.ddp,
            "backward_passes": self.backward,
            "marked_steps": self.marking,
            "stopped": list(self.stopped),
            "memory": _memory(torch, self.device, cuda=threading.current_thread() is threading.main_thread()),
            "notes": list(self.notes),
        }

    def _write(self) -> None:
        """The record into the beat file (never raises: a failure is a note the next write carries)."""
        try:
            if not self.beat.write_record(self.record(starts=False)):
                self.add_note("the rank's record could not be written into its beat file")
        except Exception as exc:  # noqa: BLE001 - the rank must go on and stop at its step whatever happens here
            self.add_note(f"record not written: {type(exc).__name__}: {exc}")

    # -- the watchdog thread ---------------------------------------------------------------

    def watch(self) -> None:
        """Exit when the parent is gone, at the deadline, or on a stall; write the record each second.
        A tick that fails (a full disk, a vanished directory) is a note, never the watchdog's end."""
        last_write = 0.0
        while True:
            time.sleep(TICK_S)
            try:
                last_write = self._tick(last_write)
            except Exception as exc:  # noqa: BLE001 - the watchdog must outlive anything a tick meets
                self.add_note(f"watchdog tick failed: {type(exc).__name__}: {exc}")

    def _tick(self, last_write: float) -> float:
        import torch.distributed as dist

        now = _now()
        self.beat.floats[beats.HEARTBEAT] = now
        if self._parent_gone():
            self.finish("parent_gone", EXIT_PARENT_GONE)
        if self.deadline is not None and now >= self.deadline:
            self.finish("deadline", EXIT_DEADLINE)
        if self.pg_up is None and dist.is_available() and dist.is_initialized():
            self.pg_up = now
            try:
                self.backend = str(dist.get_backend())
            except Exception:  # noqa: BLE001 - only a label
                self.backend = None
        idle = now - (self.starts[-1] if self.starts else self.started)
        if idle >= STACK_AFTER_S:
            self._look(now)
        else:
            self._forget()
        if self.count >= 1 and idle >= self.stall_s:
            self.finish("stalled", EXIT_STALLED)
        if now - last_write >= WRITE_EVERY_S:
            with self._lock:
                if not self._final:
                    self._write()
            return now
        return last_write

    def _look(self, now: float) -> None:
        """Keep the main thread's stack, and since when it has sat in one call (the same frame object
        on the same line): a collective that never returns sits still, while a loop through forward()
        or barrier() makes a new frame per call, however often a look lands inside one."""
        frame = sys._current_frames().get(threading.main_thread().ident or -1)
        if frame is None:
            self._forget()
            return
        if frame is not self._still_frame or frame.f_lineno != self._still_line:
            self._still_frame, self._still_line, self._still_since = frame, frame.f_lineno, now
        self.stack = _stack_of(frame)

    def _forget(self) -> None:
        self.stack = None
        self._still_frame, self._still_since = None, None

    def _parent_gone(self) -> bool:
        if os.getppid() != self.torchrun_pid:
            return True
        if self.parent_pid is None:
            return False
        return _proc_start_time(self.parent_pid) != self.parent_start


def _proc_start_time(pid: int) -> str | None:
    """The process's start time from /proc (None when gone or a zombie), so a reused pid is not taken
    for the parent. Off Linux: whether the pid exists."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "alive"
    return None if fields[0] in ("Z", "X") else fields[19]


def _frame_dict(filename: str, line: int | None, function: str, code: str | None) -> dict[str, Any]:
    return {"file": filename, "line": line or 0, "function": function, "code": (code or "").strip()}


def _stack_of(frame: Any) -> list[dict[str, Any]]:
    """A thread's innermost Python frames (read from another thread)."""
    frames = traceback.extract_stack(frame)[-STACK_FRAMES:]
    return [_frame_dict(f.filename, f.lineno, f.name, f.line) for f in frames]


def _memory(torch: Any, device: Any, cuda: bool) -> dict[str, Any]:
    """Peak RSS of this rank and, when it used CUDA, the allocator's peaks on its device. The
    watchdog thread never asks CUDA (``cuda=False``): the allocator's lock can be held by a main
    thread stuck behind a hung kernel, and the watchdog must stay free to end the rank."""
    import resource

    out: dict[str, Any] = {"rss_peak_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    try:
        if cuda and torch.cuda.is_initialized():
            index = device.index if getattr(device, "type", "") == "cuda" else torch.cuda.current_device()
            out["cuda_device"] = index
            out["cuda_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved(index))
            out["cuda_allocated_peak_bytes"] = int(torch.cuda.max_memory_allocated(index))
    except Exception as exc:  # noqa: BLE001 - a missing figure, never a crash
        out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _leave(code: int, state: StepCounter | None = None) -> None:
    """Flush, stop what this rank started, and exit without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream must not keep the rank alive
            stream.flush()
    with contextlib.suppress(Exception):  # best effort: never keep the rank from leaving
        _forbid_new_processes()
        stopped = _stop_descendants()
        if state is not None and stopped:
            state.stopped = stopped
            state._write()  # what it stopped, in the record too
    _REAL_EXIT(code)


def _forbid_new_processes() -> None:
    """While the rank leaves, nothing in it may start a process: a ``multiprocessing.Pool`` replaces every
    worker that is stopped (its handler thread forks a new one within 0.1 s), and a replacement made after
    the last look would outlive the rank. Every way Python starts one raises instead, and the threads
    that meet that end silently (the rank exits a moment later)."""
    import _posixsubprocess

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError(11, "the rank is leaving: no new process")

    for module, name in ((os, "fork"), (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"),
                         (_posixsubprocess, "fork_exec")):
        if hasattr(module, name):
            setattr(module, name, refuse)
    threading.excepthook = lambda _args: None


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc (Linux); empty elsewhere."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _command(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return " ".join(w.decode(errors="replace") for w in words if w)[:200]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _stop_descendants(grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop every process the rank started (DataLoader workers, a JIT build's ninja and compilers,
    the script's own helpers): ``os._exit`` alone would leave them running as orphans. SIGTERM to
    each, and to any that appear while it waits (a ``multiprocessing.Pool`` replaces a worker that
    exits); then whatever is left is frozen (SIGSTOP, so nothing more is replaced) and killed, with
    no pause in between. Returns ``"pid command"`` of each process it signalled."""
    import multiprocessing

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # DataLoader's handler would raise on their death
    me = os.getpid()
    seen: dict[int, str] = {}
    until = time.monotonic() + grace_s
    while True:
        pids = _descendants(me) or [c.pid for c in multiprocessing.active_children() if c.pid]
        fresh = [pid for pid in pids if pid not in seen]
        for pid in fresh:
            seen[pid] = _command(pid)
        _signal_all(fresh, signal.SIGTERM)
        if not pids or time.monotonic() >= until:
            break
        time.sleep(0.02)
    for _ in range(5):
        pids = _descendants(me)
        if not pids:
            break
        for pid in pids:
            seen.setdefault(pid, _command(pid))
        _signal_all(pids, signal.SIGSTOP)
        _signal_all(pids, signal.SIGKILL)
    return [f"{pid} {command}".strip() for pid, command in seen.items()]


def _error_info(exc: BaseException) -> dict[str, Any]:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines).splitlines()
    frames = [_frame_dict(f.filename, f.lineno, f.name, f.line)
              for f in traceback.extract_tb(exc.__traceback__)][-ERROR_FRAMES:]
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc)[:2000],
            "traceback": "\n".join(text[-TRACEBACK_LINES:]), "time": time.time(), "frames": frames}


def _exit_frames(exc: BaseException) -> list[dict[str, Any]]:
    """Where the script raised SystemExit (its innermost frames)."""
    return [_frame_dict(f.filename, f.lineno, f.name, f.line) for f in traceback.extract_tb(exc.__traceback__)][-4:]


def _float_env(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


def _write_pid(run_dir: Path, rank: int) -> None:
    with contextlib.suppress(OSError):
        fd = rank_log.open_private_append(run_dir / f"rank{rank}.pid")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "started": time.time()}).encode())
        finally:
            os.close(fd)


def _record_os_exit(state: StepCounter) -> Callable[[int], Any]:
    """``os._exit`` for the script: the rank's own call is recorded (its code, and where the script called
    it) before the process goes; a forked child's (multiprocessing) passes straight through."""

    def script_exit(code: int) -> Any:
        if os.getpid() == state.pid and not state._final:
            caller = sys._getframe(1)
            where = [_frame_dict(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name, None)]
            with contextlib.suppress(Exception):
                where = _stack_of(caller)[-4:]
            state.finish("os_exit", int(code), {"type": "os._exit", "message": f"os._exit({code})", "traceback": "",
                                                "time": time.time(), "frames": where})
        _REAL_EXIT(code)

    return script_exit


def _watch_constructions(state: StepCounter) -> None:
    """Count what the script builds and runs that the figures depend on: optimizers, DDP modules (the
    gradient exchange the link estimate models) and backward passes (steps no optimizer hook can see).
    Each is a pass-through wrapper; one that cannot be installed is left out."""
    import torch

    def after_init(cls: Any, seen: Callable[[Any], None]) -> None:
        original = cls.__init__

        @functools.wraps(original)
        def init(obj: Any, *args: Any, **kwargs: Any) -> None:
            original(obj, *args, **kwargs)
            with contextlib.suppress(Exception):
                seen(obj)

        cls.__init__ = init

    with contextlib.suppress(Exception):
        after_init(torch.optim.Optimizer, state.on_optimizer)
    with contextlib.suppress(Exception):
        from torch.nn.parallel import DistributedDataParallel

        after_init(DistributedDataParallel, lambda _: state.on_ddp())
    autograd: Any = torch.autograd
    run_backward = getattr(autograd, "_engine_run_backward", None)  # what backward() and grad() call
    if callable(run_backward):
        @functools.wraps(run_backward)
        def counted(*args: Any, **kwargs: Any) -> Any:
            result = run_backward(*args, **kwargs)
            state.on_backward()
            return result

        autograd._engine_run_backward = counted


def decorate_step_function(source: bytes, filename: str, name: str) -> tuple[ast.Module, int]:
    """The script's syntax tree with the step mark on every function called ``name`` (``Class.method``:
    that class's method); how many it marked. The mark is the outermost decorator, so a compiled
    function is counted once per call from outside the compiled code."""
    tree = ast.parse(source, filename=filename)
    owner, _, function = name.rpartition(".")
    scopes: list[ast.AST] = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                             and node.name == owner] if owner else [tree]
    marked = 0
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
                node.decorator_list.insert(0, ast.Name(id=STEP_DECORATOR, ctx=ast.Load()))
                marked += 1
    ast.fix_missing_locations(tree)
    return tree, marked


def _counting_decorator(state: StepCounter) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def counted(*args: Any, **kwargs: Any) -> Any:
            state.mark()
            return function(*args, **kwargs)

        return counted

    return decorator


def _run_script(script: str, state: StepCounter) -> None:
    """The script as ``__main__``: ``runpy.run_path``, or (with a step function) its code with the step
    mark on that function, run the way runpy runs a file."""
    name = os.environ.get(STEP_FUNCTION_ENV)
    if not name:
        runpy.run_path(script, run_name="__main__")
        return
    tree, _ = decorate_step_function(Path(script).read_bytes(), script, name)
    code = compile(tree, script, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": script, "__builtins__": builtins, "__loader__": None, "__spec__": None,
                            "__package__": None, "__cached__": None, STEP_DECORATOR: _counting_decorator(state)})
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user's own script, as runpy would run it
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def main(argv: list[str] | None = None) -> None:
    """``bootstrap.py SCRIPT [ARGS...]``: run SCRIPT as ``__main__`` with the step hooks in place."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: bootstrap.py SCRIPT [ARGS...]", file=sys.stderr)
        _REAL_EXIT(2)
    script = os.path.abspath(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    run_dir = Path(os.environ.get(RUN_DIR_ENV, "."))
    rank_log.redirect_output(run_dir / f"rank{rank}.log")
    _write_pid(run_dir, rank)
    os.environ[REHEARSAL_ENV] = "1"
    parent = os.environ.get(PARENT_ENV)
    capacity = os.environ.get(CAPACITY_ENV)
    state = StepCounter(run_dir, rank, argv[0], warmup=int(os.environ.get(WARMUP_ENV, "5")),
                        steps=int(os.environ.get(STEPS_ENV, "50")), stall_s=_float_env(STALL_ENV) or 300.0,
                        deadline=_float_env(DEADLINE_ENV), launched=_float_env(LAUNCHED_ENV),
                        parent_pid=int(parent) if parent else None, capacity=int(capacity) if capacity else None)
    print(f"[preflight rehearsal rank {rank}] pid {os.getpid()} running {argv[0]} "
          f"({state.warmup} warm-up + at least {state.target - state.warmup} measured steps)", flush=True)
    setattr(os, "_exit", _record_os_exit(state))  # noqa: B010 - replaced for the script's calls
    marks = types.ModuleType(MARK_MODULE, "Mark one training step for preflight rehearse (present only there).")
    setattr(marks, "step", state.mark)  # noqa: B010 - a module made here
    sys.modules[MARK_MODULE] = marks
    try:
        import torch.distributed  # noqa: F401 - imported here, never first in the watchdog thread
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError as exc:  # torch missing, or older than 2.0 (no global step hook)
        print(f"rehearsal cannot start: {exc}", flush=True)
        state.finish("raised", 1, {"type": "preflight.RehearsalSetup", "message": f"rehearsal cannot start: {exc}",
                                   "traceback": "", "time": time.time(), "frames": []})
    threading.Thread(target=state.watch, name="preflight-rehearsal-watchdog", daemon=True).start()
    _watch_constructions(state)
    if not os.environ.get(STEP_FUNCTION_ENV):
        register_optimizer_step_post_hook(state.post_hook)
    sys.argv = [argv[0], *argv[1:]]
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(script)  # as `python train.py` sets it, not this file's directory
    else:
        sys.path.insert(0, os.path.dirname(script))
    try:
        _run_script(script, state)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        message = f"exit code {code}"
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr, flush=True)  # what the interpreter prints for sys.exit("...")
            message = str(exc.code)[:2000]
        if code:
            state.finish("exit", code, {"type": "SystemExit", "message": message, "traceback": "",
                                        "time": time.time(), "frames": _exit_frames(exc)})
        state.finish("returned", 0)
    except BaseException as exc:  # noqa: BLE001 - any failure of the script is the finding
        traceback.print_exc()
        state.finish("raised", 1, _error_info(exc))
    state.finish("returned", 0)


if __name__ == "__main__":
    main()
