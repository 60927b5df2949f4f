"""The torchrun entry point of a rehearsal: runs the user's script unchanged and counts its steps.

``torchrun --standalone --nproc-per-node=K .../bootstrap.py train.py --its --own --args``

Each rank sends its output to ``rank<N>.log``, registers a global optimizer-step hook
(``torch.optim.optimizer.register_optimizer_step_post_hook``, public since torch 2.0; it fires
for every ``torch.optim.Optimizer``, so for DDP, FSDP2 and the optimizers DeepSpeed wraps),
sets ``PREFLIGHT_REHEARSAL=1`` and runs the script as ``__main__`` with ``runpy.run_path``
(``sys.argv`` and ``sys.path[0]`` as ``python train.py`` would set them).
It imports nothing but torch and the standard library: preflight may live in another environment
than the job, and this file runs with the job's interpreter as a plain script.

**What a step is.** One training iteration, whatever number of ``Optimizer.step`` calls it makes.
A call that touches a parameter group already stepped in the current iteration begins the next
one; calls on other groups join the current one. So DeepSpeed's ZeRO optimizers (which call the
inner optimizer once per parameter group or sub-group) and a script with two optimizers (a GAN)
count one step per iteration. A step nested in another (a subclass calling ``super().step()``) is
counted once: only the outermost ``Optimizer.step`` wrapper counts (looked for in the few frames
above the hook, where an outer step would be, so the check costs the same at any stack depth).

**How every rank stops at the same step, and why that is safe.** After ``warmup + steps`` steps,
each rank stops at the hook call that begins step ``warmup + steps + 1``: it synchronises its
CUDA device, writes its record and leaves with ``os._exit(0)``. A data-parallel job (DDP, FSDP,
ZeRO) is SPMD: every rank issues the same collectives in the same order, and the hook calls fall
at the same points of that order on every rank (every rank runs the same iterations; with
gloo a rank cannot even pass a collective its peers have not joined). Stopping every rank at the
same hook call therefore cuts the job where each rank has issued exactly the same collectives:
the gradient all-reduce (DDP), reduce-scatter and norm all-reduce (ZeRO, FSDP's clipping) of that
iteration were issued by all ranks before the optimizer ran, and the parameter all-gathers that
come after it (ZeRO-1/2 after the step, FSDP in the next forward) are issued by none. No rank is
left alone in a collective, and the CUDA synchronise completes because every kernel in flight has
all its peers enqueued too. ``os._exit`` skips what would come next in the script (a final
checkpoint save, itself a collective in DeepSpeed and DCP, ``destroy_process_group``) and the
interpreter's teardown, where a wedged NCCL or CUDA destructor could hold the rank.

**Never outlive preflight.** A watchdog thread exits the rank (after writing its record) when
torchrun or preflight is gone, when the rank's own deadline passes, or when no step came for the
stall limit after the first one. While the main thread makes no progress it records the main
thread's Python stack, so a hang is reported with where each rank waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REHEARSAL_ENV = "PREFLIGHT_REHEARSAL"
RUN_DIR_ENV = "PREFLIGHT_RUN_DIR"  # the launcher's (preflight.workers.common.RUN_DIR_ENV)
WARMUP_ENV = "PREFLIGHT_REHEARSAL_WARMUP"
STEPS_ENV = "PREFLIGHT_REHEARSAL_STEPS"
STALL_ENV = "PREFLIGHT_REHEARSAL_STALL_S"
DEADLINE_ENV = "PREFLIGHT_REHEARSAL_DEADLINE"  # time.monotonic() value (CLOCK_MONOTONIC is system-wide)
LAUNCHED_ENV = "PREFLIGHT_REHEARSAL_LAUNCHED"  # time.monotonic() when preflight started torchrun
PARENT_ENV = "PREFLIGHT_REHEARSAL_PARENT_PID"  # preflight's own pid

RECORD_SUFFIX = ".rehearsal.json"
EXIT_STALLED = 86
EXIT_DEADLINE = 87
EXIT_PARENT_GONE = 88

TICK_S = 0.25
WRITE_EVERY_S = 1.0
STACK_AFTER_S = 2.0  # idle this long: keep the main thread's stack in the record
STACK_FRAMES = 14
TRACEBACK_LINES = 40
NESTED_FRAMES = 8


def _now() -> float:
    return time.monotonic()


class StepCounter:
    """One rank's state: steps seen, what it measured, how it ended; written as JSON."""

    def __init__(self, run_dir: Path, rank: int, script: str, warmup: int, steps: int, stall_s: float,
                 deadline: float | None, launched: float | None, parent_pid: int | None) -> None:
        self.run_dir = run_dir
        self.rank = rank
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
        self.deepspeed = False
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._final = False
        self._wrapper_code: Any = None

    # -- the hooks (main thread, once per Optimizer.step) ----------------------------------

    def post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Count the step; stop the rank at the step after the last one measured."""
        try:
            if self._nested():
                return
            now = _now()
            groups = [id(group["params"][0]) for group in optimizer.param_groups if group["params"]]
            if self.count == 0 or not self.current.isdisjoint(groups):
                if self.count >= self.target:
                    self._stop(optimizer)
                if self.count == self.warmup:
                    self._synchronize(optimizer)
                    now = _now()
                    self.window_start = now
                self.count += 1
                self.starts.append(now)
                self.current = set(groups)
            else:
                self.current.update(groups)
            if self.count == 1:
                self._note_params(optimizer)
        except Exception as exc:  # noqa: BLE001 - the rehearsal must never break the user's step
            if len(self.notes) < 5:
                self.notes.append(f"step hook failed: {type(exc).__name__}: {exc}")

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
        for group in optimizer.param_groups:
            for param in group["params"]:
                device = param.device
                break
        if device is not None and getattr(device, "type", "") == "cuda":
            cuda.synchronize(device)

    def _stop(self, optimizer: Any) -> None:
        self._synchronize(optimizer)
        end = _now()
        if self.window_start is not None:
            self.window = (self.window_start, end)
        self.finish("steps_done", 0)

    # -- ending ----------------------------------------------------------------------------

    def finish(self, ended: str, code: int, error: dict[str, Any] | None = None) -> None:
        """Write the final record and leave the process at once (any thread)."""
        with self._lock:
            if self._final:
                return
            self.ended = ended
            self.exit_code = code
            self.error = error
            if ended in ("stalled", "deadline", "parent_gone"):
                self._look(_now())
            else:
                self.stack = None
            self._write(final=True)
            self._final = True
        if code == 0:
            _write_json(self.run_dir / f"rank{self.rank}.json",
                        {"rank": self.rank, "result": {"rehearsal": self.ended, "steps": self.count}})
        _leave(code)

    def record(self) -> dict[str, Any]:
        """The rank's record: every time is seconds since preflight started torchrun."""
        import torch

        base = self.launched
        params = list(self.params.values())  # one C-level copy: the main thread may be adding to it
        elements = sum(n for n, _, _ in params)
        size_bytes = sum(n * s for n, s, _ in params)
        return {
            "rank": self.rank,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "pid": os.getpid(),
            "script": self.script,
            "warmup": self.warmup,
            "target_steps": self.target,
            "bootstrap_s": round(self.started - base, 4),
            "steps": self.count,
            "step_starts_s": [round(t - base, 6) for t in list(self.starts)],
            "window_s": None if self.window is None else round(self.window[1] - self.window[0], 6),
            "window_steps": self.target - self.warmup if self.window is not None else 0,
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
            "sharded_params": any(sharded for _, _, sharded in params),
            "deepspeed": self.deepspeed,
            "memory": _memory(torch, self.device, cuda=threading.current_thread() is threading.main_thread()),
            "notes": list(self.notes),
        }

    def _write(self, final: bool = False) -> None:
        if self._final:
            return
        data = self.record()
        _write_json(self.run_dir / f"rank{self.rank}{RECORD_SUFFIX}", data, tag="final" if final else "tick")
        phase = f"step {self.count + 1}" if self.count else "before the first optimizer step"
        last = self.starts[-1] if self.starts else self.started
        progress = {"phase": phase, "seq": self.count, "time": time.time() - (_now() - last)}
        _write_json(self.run_dir / f"rank{self.rank}.progress", progress, tag="final" if final else "tick")

    # -- the watchdog thread ---------------------------------------------------------------

    def watch(self) -> None:
        """Exit when the parent is gone, at the deadline, or on a stall; write the record each second."""
        import torch.distributed as dist

        last_write = 0.0
        while True:
            time.sleep(TICK_S)
            now = _now()
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
                    self._write()
                last_write = now

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


def _stack_of(frame: Any) -> list[dict[str, Any]]:
    """A thread's innermost Python frames (read from another thread)."""
    frames = traceback.extract_stack(frame)[-STACK_FRAMES:]
    return [{"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
            for f in frames]


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


def _write_json(path: Path, data: dict[str, Any], tag: str = "w") -> None:
    tmp = path.with_name(f"{path.name}.{tag}.tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def _leave(code: int) -> None:
    """Flush, stop what this rank started, and exit without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream must not keep the rank alive
            stream.flush()
    with contextlib.suppress(Exception):  # best effort: never keep the rank from leaving
        _stop_descendants()
    os._exit(code)


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


def _stop_descendants(grace_s: float = 1.0) -> None:
    """SIGTERM every process the rank started (DataLoader workers, a JIT build's ninja and
    compilers, the script's own helpers), SIGKILL what is left after ``grace_s``: ``os._exit``
    alone would leave them running as orphans, outside the launcher's reach."""
    import multiprocessing

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # DataLoader's handler would raise on their death
    pids = _descendants(os.getpid()) or [c.pid for c in multiprocessing.active_children() if c.pid]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        until = time.monotonic() + grace_s
        while pids and time.monotonic() < until:
            time.sleep(0.02)
            pids = [pid for pid in pids if _proc_start_time(pid) is not None]
        if not pids:
            return


def _error_info(exc: BaseException) -> dict[str, Any]:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines).splitlines()
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc)[:2000],
            "traceback": "\n".join(text[-TRACEBACK_LINES:]), "time": time.time()}


def _redirect_output(log_path: Path) -> None:
    """fds 1 and 2 to the rank's log, so C-level output (NCCL, gloo) lands there too."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _float_env(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


def main(argv: list[str] | None = None) -> None:
    """``bootstrap.py SCRIPT [ARGS...]``: run SCRIPT as ``__main__`` with the step hooks in place."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: bootstrap.py SCRIPT [ARGS...]", file=sys.stderr)
        os._exit(2)
    script = os.path.abspath(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    run_dir = Path(os.environ.get(RUN_DIR_ENV, "."))
    _redirect_output(run_dir / f"rank{rank}.log")
    (run_dir / f"rank{rank}.pid").write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
    os.environ[REHEARSAL_ENV] = "1"
    parent = os.environ.get(PARENT_ENV)
    state = StepCounter(run_dir, rank, argv[0], warmup=int(os.environ.get(WARMUP_ENV, "5")),
                      steps=int(os.environ.get(STEPS_ENV, "50")), stall_s=_float_env(STALL_ENV) or 300.0,
                      deadline=_float_env(DEADLINE_ENV), launched=_float_env(LAUNCHED_ENV),
                      parent_pid=int(parent) if parent else None)
    print(f"[preflight rehearsal rank {rank}] pid {os.getpid()} running {argv[0]} "
          f"({state.warmup} warm-up + {state.target - state.warmup} measured steps)", flush=True)
    try:
        import torch.distributed  # noqa: F401 - imported here, never first in the watchdog thread
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError as exc:  # torch missing, or older than 2.0 (no global step hook)
        _write_json(run_dir / f"rank{rank}.error.json", {"rank": rank, "error": f"rehearsal cannot start: {exc}",
                                                         "traceback": "", "time": time.time()})
        state.finish("raised", 1, {"type": "preflight.RehearsalSetup", "message": f"rehearsal cannot start: {exc}",
                                   "traceback": "", "time": time.time()})
    threading.Thread(target=state.watch, name="preflight-rehearsal-watchdog", daemon=True).start()
    register_optimizer_step_post_hook(state.post_hook)
    sys.argv = [argv[0], *argv[1:]]
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(script)  # as `python train.py` sets it, not this file's directory
    else:
        sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            state.finish("exit", code, {"type": "SystemExit", "message": f"exit code {code}", "traceback": "",
                                        "time": time.time()})
        state.finish("returned", 0)
    except BaseException as exc:  # noqa: BLE001 - any failure of the script is the finding
        traceback.print_exc()
        info = _error_info(exc)
        _write_json(run_dir / f"rank{rank}.error.json", {"rank": rank, "error": f"{type(exc).__name__}: {exc}",
                                                         "traceback": info["traceback"], "time": info["time"]})
        state.finish("raised", 1, info)
    state.finish("returned", 0)


if __name__ == "__main__":
    main()
