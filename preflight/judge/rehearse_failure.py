"""Name what went wrong in one rehearsal launch: a crash (which rank first, its error, an OOM called
an OOM, a script that needs CUDA rehearsed without a GPU), a hang (which rank, after which step, where
it waits; a rank frozen in native code), no optimizer step, steps no hook can count, a rank that never
stepped, a script that ended early. Pure: reads :class:`preflight.rehearse.facts.SizeRun` only.

Every figure in a summary is one that was observed: the seconds a launch ran (not the deadline it
had), the step a rank reached (its beat file, written at each step), the rank that failed first.

Which rank is to blame in a hang is read from the stacks the ranks recorded while idle: a rank
waiting inside ``torch.distributed``, ``torch.nn.parallel`` or DeepSpeed's communication code (or
in ``backward``, where DDP's gradient all-reduce waits) waits for a peer; a rank idle anywhere
else (the script's own code, data loading, a sleep, I/O) is the one the others wait for. This is
a heuristic from Python frames, and the summary says "waits" and "stopped in", never more.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import Path

from preflight.launch.logs import KEEP_BYTES
from preflight.launch.outcome import PEER_FAILURE, signal_words
from preflight.outcome import Verdict, error, fail, warn
from preflight.rehearse.facts import Frame, RankRun, SizeRun

NODE_CHECKS = "preflight -k 'nccl or p2p or ddp'"
_OOM = re.compile(r"out of memory|OutOfMemory|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED|"
                  r"std::bad_alloc|Cannot allocate memory", re.IGNORECASE)
_NEEDS_CUDA = re.compile(r"not compiled with CUDA|No CUDA GPUs are available|Found no NVIDIA driver|"
                         r"no attribute '_cuda|\bNCCL\b|\bCUDA\b|cuda:\d", re.IGNORECASE)
_CUDA_FILES = ("/torch/cuda/", "/torch/backends/cuda", "/torch/backends/cudnn", "/torch/_C/_cuda")
_WAITING_FILES = ("/torch/distributed/", "/torch/nn/parallel/", "/deepspeed/comm/",
                  "/deepspeed/runtime/zero/", "/torch/_C/_distributed")
_BACKWARD_FILES = ("/torch/autograd/", "/torch/_tensor.py")
_BUILD_FILES = ("/torch/utils/cpp_extension.py", "/deepspeed/ops/op_builder/", "/torch/_inductor/", "/triton/")
_LIBRARY_MARKS = ("site-packages", "dist-packages", "<frozen", "/lib/python3", "preflight/rehearse/bootstrap.py")
TRACEBACK_LINES = 25
MOVING_S = 1.0  # a rank whose last look found it in a call younger than this was still running
LAST_WORDS = 300

OOM_FIX = ("It ran out of memory. Lower the per-GPU (micro) batch, turn on activation checkpointing, train in bf16, "
           "or shard the model state (FSDP, ZeRO-2/3); `preflight size --model-params N --gpus K --gpu-memory M` "
           "shows what fits before activations.")
CRASH_FIX = ("The first failing rank's traceback is in the evidence and its whole log under the report directory; "
             "the other ranks stopped because it did. Fix that error and rehearse again.")
HANG_FIX = ("The rank named first is where the job stops; the others wait for it. Usual causes: a collective only "
            "some ranks call (a barrier, all_reduce or DeepSpeed save_checkpoint under `if rank == 0`), ranks with "
            "different numbers of batches (uneven data without DistributedSampler, drop_last), or a rank blocked in "
            "I/O. Give init_process_group a `timeout=` so a real job fails instead of hanging for its default 10 min.")
FROZEN_FIX = ("A rank whose Python watchdog cannot run is held by native code that keeps the GIL (a C extension or "
              "a ctypes.PyDLL call that does not release it, a huge pickle.load) or was stopped (SIGSTOP, swapping). "
              "Find the call with `py-spy dump --native --pid PID` on the rank while it hangs, or run the step "
              "under faulthandler.dump_traceback_later.")
FIRST_COLLECTIVE_FIX = ("The ranks joined the process group but could not complete a collective: the link between "
                        f"them is the suspect, not the script. Run `{NODE_CHECKS}` to test NCCL, peer-to-peer and a "
                        "DDP step on this node; NCCL_DEBUG=INFO in the job's environment shows each pair's transport.")
NO_STEP_FIX = ("No torch.optim optimizer stepped. Usual causes: slow data loading or preprocessing before the first "
               "batch (raise --timeout), a loop that never calls optimizer.step(), a script that does not train "
               "(evaluation only), or an optimizer that is not a torch.optim.Optimizer.")
ENDED_ITSELF_FIX = ("The script ended by itself before its first optimizer step; its last lines (in the summary and "
                    "its log) say why. Fix what they name, or rehearse where the script trains (a GPU node for a "
                    "script that needs one), or with the arguments that make it train.")
UNCOUNTED_FIX = ("Mark the steps: `preflight rehearse --step-function NAME -- train.py` counts each call of the "
                 "script's function NAME (a method: Class.NAME) as one step, or call `step()` from the module "
                 "`preflight_rehearsal` once per iteration (it exists only under `preflight rehearse`: import it "
                 "inside `try: ... except ImportError`).")
NEEDS_GPU_FIX = ("Rehearse this script on the GPU node it is meant for. To rehearse it on CPU ranks instead, make "
                 "its device and backend follow what is there: `device = 'cuda' if torch.cuda.is_available() else "
                 "'cpu'`, backend 'nccl' only with CUDA, else 'gloo'.")
IDLE_FIX = ("Every rank of a torchrun job should train: the named rank ended (or waited) without an optimizer step "
            "while the others trained, so its GPU is paid for and unused. Look for a rank condition that skips the "
            "training loop (`if rank != 0: return`), or an empty data shard for that rank.")
ENDED_FIX = ("The script stopped training before the rehearsal's steps (its own max-steps or a short epoch). Give "
             "it a longer run for the rehearsal (it can read PREFLIGHT_REHEARSAL=1), or ask for fewer with "
             "--warmup/--steps.")
BUILD_FIX = ("A JIT build was still running at the deadline: the first run of DeepSpeed's ops or torch.compile "
             "builds its kernels, which takes minutes. Rehearse once with a longer --timeout (the build is cached in "
             "TORCH_EXTENSIONS_DIR or the inductor cache, so the job and later runs start fast), or install prebuilt "
             "DeepSpeed ops (DS_BUILD_OPS=1 pip install deepspeed).")
SLOW_FIX = "Raise --timeout (seconds per size) or ask for fewer --steps."
NOT_STARTED_FIX = ("torchrun could not start the ranks with the job's interpreter: its own output (in the summary and "
                   "torchrun.log) says why, often a package missing from the job's environment. Install it there, or "
                   "point rehearse at the interpreter the job uses (--python, or that interpreter in the command).")


def is_oom(rank: RankRun) -> bool:
    """An allocation failure: CUDA's OutOfMemoryError, the CPU allocator's, MemoryError."""
    text = f"{rank.error_type or ''} {rank.error_message or ''}"
    return bool(_OOM.search(text)) or (rank.error_type or "").endswith("MemoryError")


def is_peer_failure(rank: RankRun) -> bool:
    """An error that only says a peer went away (gloo/NCCL after another rank died)."""
    return bool(PEER_FAILURE.search(f"{rank.error_type or ''} {rank.error_message or ''}"))


def clean_end(rank: RankRun) -> bool:
    """The rank left by itself without an error: its steps done, the script returned (or exited 0), or
    the rehearsal ended it for steps it cannot count."""
    return rank.ended in ("steps_done", "returned", "uncountable") or (rank.ended == "os_exit" and
                                                                        rank.exit_code == 0)


def waiting_place(stack: Sequence[Frame]) -> str | None:
    """``"build"`` inside a JIT build (a C++/CUDA extension, torch.compile), else ``"collective"``
    or ``"backward"`` when the stack waits where peers are awaited, else None."""
    files = [frame.file.replace("\\", "/") for frame in stack]
    if any(mark in file for file in files for mark in _BUILD_FILES):
        return "build"
    if any(mark in file for file in files for mark in _WAITING_FILES):
        return "collective"
    if any(mark in file for file in files for mark in _BACKWARD_FILES):
        return "backward"
    return None


def _is_library(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return any(mark in path for mark in _LIBRARY_MARKS)


def user_frame(stack: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code (not a library, not the bootstrap)."""
    return next((frame for frame in reversed(stack) if not _is_library(frame)), None)


def _innermost_call(stack: Sequence[Frame]) -> str:
    """Where a waiting rank is: ``DistributedDataParallel.__init__ in distributed.py:835``."""
    for frame in reversed(stack):
        path = frame.file.replace("\\", "/")
        if any(mark in path for mark in _WAITING_FILES + _BACKWARD_FILES):
            continue
        return frame.where()
    return stack[-1].where() if stack else "an unknown place"


def _where(rank: RankRun) -> str:
    """Where an idle rank was, in words."""
    if not rank.stack:
        return "at an unknown place (no stack was recorded)"
    place = waiting_place(rank.stack)
    mine = user_frame(rank.stack)
    at = f" at {mine.where()}" if mine else ""
    if place == "build":
        return f"is JIT-compiling (a C++/CUDA extension or torch.compile){at}"
    if place in ("collective", "backward") and _moving(rank):
        return f"was still running{at}, not stuck in any one call"
    if place == "collective":
        return f"waits in a collective{at}"
    if place == "backward":
        return f"waits in backward{at} (where DDP's gradient all-reduce waits for its peers)"
    return f"stopped in {mine.where() if mine else _innermost_call(rank.stack)}"


def _moving(rank: RankRun) -> bool:
    return rank.still_s is not None and rank.still_s < MOVING_S


def _stuck_in_collective(run: SizeRun, rank: RankRun) -> bool:
    """In a collective after the group came up, in the same call for a good part of the deadline: one
    look inside DDP's forward of a loop that never steps is not a hung link."""
    return (rank.pg_up_s is not None and waiting_place(rank.stack) == "collective" and rank.still_s is not None
            and rank.still_s >= min(run.stall_s, run.deadline_s / 4))


def _size(nproc: int) -> str:
    """``1 rank``, ``8 ranks``."""
    return f"{nproc} rank{'s' if nproc != 1 else ''}"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _signal_text(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    return signal_words(-code)


def _tail(text: str, lines: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_words(rank: RankRun) -> str:
    """``its last output: "Unable to locate sufficient 2 gpus..."`` (empty when it printed nothing)."""
    lines = [line.strip() for line in rank.last_lines if not line.strip().startswith(("Traceback", "File \""))]
    if not lines:
        return ""
    text = " / ".join(lines)
    text = text if len(text) <= LAST_WORDS else "..." + text[-LAST_WORDS:]
    return f"; its last output: \"{text}\""


def _called_at(rank: RankRun) -> str:
    """`` at train.py:40`` where the script raised SystemExit or called os._exit."""
    frame = user_frame(rank.error_frames)
    return f" at {frame.where()}" if frame else ""


def _first_failure(run: SizeRun) -> RankRun | None:
    """The rank that failed first: an error of its own (earliest), else a rank killed by a signal."""
    own = [r for r in run.ranks if _own_failure(r) and not is_peer_failure(r)]
    if own:
        return min(own, key=lambda r: (r.error_time if r.error_time is not None else float("inf"), r.rank))
    signalled = [r for r in run.ranks if r.ended in ("killed", "missing") and r.launcher_state == "crashed"]
    if any(r.ended in ("stalled", "deadline") for r in run.ranks):  # torchrun's SIGTERM after that rank left
        signalled = [r for r in signalled if r.exit_code != -signal.SIGTERM]
    if signalled:
        named = [r for r in signalled if r.rank == run.root_cause]
        return named[0] if named else min(signalled, key=lambda r: r.rank)
    peers = [r for r in run.ranks if _own_failure(r)]
    return min(peers, key=lambda r: (r.error_time or float("inf"), r.rank)) if peers else None


def _own_failure(rank: RankRun) -> bool:
    """The rank ended with an error of the script's: it raised, exited non-zero, or called os._exit(non-zero)."""
    return rank.ended in ("raised", "exit") or (rank.ended == "os_exit" and rank.exit_code != 0)


def needs_gpu(run: SizeRun, rank: RankRun) -> tuple[str, str] | None:
    """On a rehearsal without a GPU: (what the script calls, where) when its failure is CUDA's or NCCL's."""
    if run.on_gpu:
        return None
    in_cuda = next((f for f in rank.error_frames if any(m in f.file.replace("\\", "/") for m in _CUDA_FILES)), None)
    text = f"{rank.error_type or ''}: {rank.error_message or ''}"
    if in_cuda is None and not _NEEDS_CUDA.search(text):
        return None
    frames = list(rank.error_frames)
    mine = user_frame(frames)
    if mine is None:
        return ("CUDA", "")
    after = frames[frames.index(mine) + 1:]
    called = next((f for f in after if _is_library(f)), None)
    what = _dotted(called) if called is not None else "CUDA"
    if "nccl" in text.lower() and what.startswith("torch.distributed"):
        what = f"{what} with the NCCL backend"
    return what, mine.where()


def _dotted(frame: Frame) -> str:
    """``torch.cuda.set_device`` from ``.../site-packages/torch/cuda/__init__.py`` and ``set_device``."""
    path = frame.file.replace("\\", "/")
    for root in ("site-packages/", "dist-packages/"):
        if root in path:
            module = path.split(root, 1)[1].removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            parts = module.split(".")
            if len(parts) > 2 and parts[0] == "torch":
                module = ".".join(parts[:2])  # torch.cuda, torch.distributed: where the user called in
            return f"{module}.{frame.function}" if frame.function != "<module>" else module
    return frame.function


def _evidence(run: SizeRun, first: RankRun) -> dict[str, str]:
    evidence = {f"rank {first.rank} traceback (tail)": _tail(first.traceback)} if first.traceback else {}
    if first.log_tail:
        evidence[f"rank {first.rank} log tail"] = _tail(first.log_tail)
    for other in run.ranks:
        if other.rank != first.rank and not clean_end(other) and other.log_tail:
            evidence[f"rank {other.rank} log tail ({other.ended})"] = _tail(other.log_tail, 8)
    return evidence


def _crash(run: SizeRun, first: RankRun) -> Verdict:
    oom = is_oom(first)
    how = _signal_text(first.exit_code) if first.ended in ("killed", "missing") else None
    words = ""
    if first.ended in ("exit", "os_exit"):
        way = "called os._exit" if first.ended == "os_exit" else "exited"
        how = f"{way}({first.exit_code}){_called_at(first)}" if first.ended == "os_exit" else \
            f"exited with code {first.exit_code}{_called_at(first)}"
        words = _last_words(first)
    elif how is None:
        detail = f"{(first.error_type or 'error').rsplit('.', 1)[-1]}: {first.error_message}" if first.error_message \
            else (first.launcher_error or f"exit code {first.exit_code}")
        how = f"{'ran out of memory' if oom else 'crashed'} ({detail.strip()[:300]})"
    after = f"after step {first.steps}" if first.steps else "before its first optimizer step"
    others = [r.rank for r in run.ranks if r.rank != first.rank and not clean_end(r)]
    tail = f"; {_ranks(others)} stopped after it" if others else ""
    summary = f"{_size(run.nproc)}: rank {first.rank} {how} {after}{words}{tail}"
    details = {"failure": "oom" if oom else "crash", "first_failing_rank": first.rank, "step": first.steps,
               "exit_code": first.exit_code, "error_type": first.error_type}
    code = "REHEARSAL_OOM" if oom or "OOM killer" in how else "REHEARSAL_CRASHED"
    return fail(code, summary, OOM_FIX if code == "REHEARSAL_OOM" else CRASH_FIX, evidence=_evidence(run, first),
                details=details)


def _needs_gpu(run: SizeRun, first: RankRun, found: tuple[str, str]) -> Verdict:
    what, where = found
    error_text = f"{(first.error_type or 'error').rsplit('.', 1)[-1]}: {first.error_message or ''}".strip()[:200]
    at = f" at {where}" if where else ""
    summary = (f"{_size(run.nproc)}: this script calls {what}{at}, and torch sees no GPU here: rehearse it on a GPU "
               f"node (rank {first.rank}: {error_text})")
    return fail("REHEARSAL_NEEDS_GPU", summary, NEEDS_GPU_FIX, evidence=_evidence(run, first),
                details={"failure": "needs_gpu", "first_failing_rank": first.rank, "calls": what, "at": where})


def _stack_text(rank: RankRun) -> str:
    return "\n".join(f"{f.file}:{f.line} in {f.function}" + (f"\n    {f.code}" if f.code else "") for f in rank.stack)


def _frozen_text(rank: RankRun) -> str:
    proc = f" ({rank.frozen_state})" if rank.frozen_state else ""
    return (f"rank {rank.rank}'s Python watchdog was silent for {rank.frozen_s or 0:.0f} s while the process lived"
            f"{proc}: native code held the GIL (or the process was stopped)")


def _hang(run: SizeRun, idle: list[RankRun]) -> Verdict:
    least = min(r.steps for r in idle)
    behind = [r for r in idle if r.steps == least]
    frozen = [r for r in behind if r.frozen_s is not None]
    culprits = frozen or [r for r in behind if waiting_place(r.stack) is None and r.stack] or behind
    left = [r for r in run.ranks if clean_end(r) and r.steps <= least]
    parts = []
    if left:
        parts.append(f"{_ranks([r.rank for r in left])} left the script after step {left[0].steps} while the others "
                     "still waited for it")
    for rank in sorted(idle, key=lambda r: (r not in culprits, r.rank)):
        if rank.frozen_s is not None:
            parts.append(_frozen_text(rank))
            continue
        idle_for = f" for {rank.idle_s:.0f} s" if rank.idle_s is not None else ""
        parts.append(f"rank {rank.rank} {_where(rank)}{idle_for}")
    for rank in run.ranks:  # ranks that lost the hung one when it was ended: its echo, not a cause
        if rank not in idle and _own_failure(rank) and is_peer_failure(rank):
            parts.append(f"rank {rank.rank} lost its peer ({(rank.error_message or '').strip()[:80]})")
    after = f"after step {least}" if least else "before the first optimizer step"
    summary = f"{_size(run.nproc)} hung {after}: " + "; ".join(parts)
    evidence = {f"rank {r.rank} stack while idle": _stack_text(r) for r in idle if r.stack}
    details = {"failure": "frozen" if frozen else "hang", "step": least, "ranks_behind": [r.rank for r in culprits],
               "steps_reached": {str(r.rank): r.steps for r in run.ranks}}
    return fail("REHEARSAL_HUNG", summary, FROZEN_FIX if frozen else HANG_FIX, evidence=evidence, details=details)


def _no_step(run: SizeRun) -> Verdict:
    """No step by the deadline. Every rank waiting in a collective after the process group came up
    is the link's fault; a rank busy anywhere else (data, its own code) is the one the others wait for."""
    waiting = [r for r in run.ranks if _stuck_in_collective(run, r)]
    evidence = {f"rank {r.rank} stack at the deadline": _stack_text(r) for r in run.ranks if r.stack}
    ran = _seconds(run.elapsed_s)
    if waiting and len(waiting) == len(run.ranks):
        rank = waiting[0]
        up = f"{rank.pg_up_s:.0f} s after the launch" if rank.pg_up_s is not None else ""
        summary = (f"{_size(run.nproc)}: the process group came up {up} but no step came in {ran}; "
                   f"{_ranks([r.rank for r in waiting])} {'waits' if len(waiting) == 1 else 'wait'} in a collective "
                   f"(rank {rank.rank} at {_innermost_call(rank.stack)})")
        return fail("REHEARSAL_FIRST_COLLECTIVE_HUNG", summary, FIRST_COLLECTIVE_FIX, evidence=evidence,
                    details={"failure": "first_collective", "ranks": [r.rank for r in waiting]})
    places = "; ".join(_frozen_text(r) if r.frozen_s is not None else f"rank {r.rank} {_where(r)}"
                       for r in run.ranks if r.stack or r.frozen_s is not None)
    backward = max((r.backward_passes for r in run.ranks), default=0)
    seen = f"; {backward} backward passes ran" if backward else ""
    summary = f"{_size(run.nproc)}: no optimizer step in {ran}{seen}" + (f" ({places})" if places else "")
    building = any(waiting_place(r.stack) == "build" for r in run.ranks)
    return fail("REHEARSAL_NO_STEP", summary, BUILD_FIX if building else NO_STEP_FIX, evidence=evidence,
                details={"failure": "jit_build" if building else "no_step", "elapsed_s": round(run.elapsed_s, 1)})


def _uncounted(run: SizeRun) -> Verdict:
    rank = max(run.ranks, key=lambda r: r.backward_passes)
    span = f" in {_seconds(rank.backward_span_s)}" if rank.backward_span_s else ""
    made = (f"it made {', '.join(rank.optimizers)} but never stepped it" if rank.optimizers
            else "it uses no torch.optim optimizer (it updates its parameters itself)")
    summary = (f"{_size(run.nproc)}: steps cannot be counted: the script ran {rank.backward_passes} backward passes"
               f"{span} and {made}; mark its steps to rehearse it")
    return error(summary, code="REHEARSAL_STEPS_UNCOUNTED", remediation=UNCOUNTED_FIX,
                 details={"failure": "uncountable", "backward_passes": rank.backward_passes})


def _not_started(run: SizeRun) -> Verdict:
    lines = [line.strip() for line in run.launcher_tail.splitlines() if line.strip()]
    said = [line for line in lines if "Error" in line or "error" in line or "No module" in line] or lines
    words = f": {said[-1][:LAST_WORDS]}" if said else ""
    return fail("REHEARSAL_CRASHED", f"{_size(run.nproc)}: torchrun started no rank in {_seconds(run.elapsed_s)}"
                f"{words}", NOT_STARTED_FIX, evidence={"torchrun output tail": run.launcher_tail} if run.launcher_tail
                else {}, details={"failure": "not_started"})


def _launcher_killed(run: SizeRun) -> Verdict:
    killed = run.launcher_signal or 0
    reached = max((r.steps for r in run.ranks), default=0)
    after = f"after step {reached}" if reached else "before the first optimizer step"
    summary = f"{_size(run.nproc)}: torchrun was {signal_words(killed)}, {after}; every rank ended with it"
    code = "REHEARSAL_OOM" if killed == signal.SIGKILL else "REHEARSAL_CRASHED"
    return fail(code, summary, OOM_FIX if code == "REHEARSAL_OOM" else CRASH_FIX,
                evidence={"torchrun output tail": run.launcher_tail} if run.launcher_tail else {},
                details={"failure": "launcher_killed", "signal": killed, "step": reached})


def _idle_ranks(run: SizeRun, idle: list[RankRun]) -> Verdict:
    busy = [r for r in run.ranks if r.steps > 0]
    ways = []
    for rank in idle:
        when = f" {_seconds(rank.ended_s)} after the launch" if rank.ended_s is not None else ""
        how = {"returned": "returned", "os_exit": "left (os._exit(0))", "uncountable": "ended"}.get(rank.ended,
                                                                                                   rank.ended)
        ways.append(f"rank {rank.rank} {how}{when} without an optimizer step{_last_words(rank)}")
    most = max(r.steps for r in busy)
    summary = (f"{_size(run.nproc)}: {'; '.join(ways)}, while {_ranks([r.rank for r in busy])} ran {most} steps: "
               f"{'that rank does' if len(idle) == 1 else 'those ranks do'} no training, and this size is left out of "
               "the scaling")
    return warn("REHEARSAL_RANK_IDLE", summary, IDLE_FIX,
                details={"failure": "idle_ranks", "idle_ranks": [r.rank for r in idle],
                         "steps_reached": {str(r.rank): r.steps for r in run.ranks}})


def name_failure(run: SizeRun) -> Verdict | None:
    """The named failure of a launch, or None when every rank ran its steps (or the script ended
    after some: :func:`ended_early` says so)."""
    if run.launcher_signal is not None:
        return _launcher_killed(run)
    if any(r.ended == "parent_gone" for r in run.ranks):
        return error(f"{_size(run.nproc)}: the rehearsal was interrupted (preflight or torchrun went away)",
                     code="REHEARSAL_INTERRUPTED")
    if all(r.ended == "missing" for r in run.ranks) and not run.timed_out:
        return _not_started(run)
    first = _first_failure(run)
    idle = [r for r in run.ranks if r.ended == "stalled" or r.frozen_s is not None or
            (r.ended in ("deadline", "killed", "missing") and r.steps > 0 and _idle_past_stall(run, r))]
    if any(r.ended == "stalled" for r in run.ranks):
        idle += _ended_with_the_stall(run, idle)
    if first is not None and not (idle and _own_failure(first) and is_peer_failure(first)):
        found = None if is_oom(first) else needs_gpu(run, first)
        if found is not None:
            return _needs_gpu(run, first, found)
        return _crash(run, first)  # a rank that only lost its peer while another stalled is the hang's echo
    if idle:
        return _hang(run, idle)
    if all(r.steps == 0 for r in run.ranks):
        if any(r.ended == "uncountable" for r in run.ranks) or (
                all(clean_end(r) for r in run.ranks) and any(r.backward_passes and not r.optimizers
                                                             for r in run.ranks)):
            return _uncounted(run)
        if all(clean_end(r) for r in run.ranks):
            rank = run.ranks[0]
            when = f" {_seconds(rank.ended_s)} after the launch" if rank.ended_s is not None else ""
            return fail("REHEARSAL_NO_STEP", f"{_size(run.nproc)}: the script ended by itself{when} without a "
                        f"single optimizer step{_last_words(rank)}", ENDED_ITSELF_FIX,
                        details={"failure": "no_step", "ended": rank.ended})
        return _no_step(run)
    never = [r for r in run.ranks if r.steps == 0 and clean_end(r)]
    if never:
        return _idle_ranks(run, never)
    if any(r.ended in ("deadline", "killed", "missing") for r in run.ranks):
        reached = min(r.steps for r in run.ranks)
        return warn("REHEARSAL_DEADLINE", f"{_size(run.nproc)}: {reached} of {run.target} steps in the "
                    f"{_seconds(run.elapsed_s)} the launch ran; the figures rest on those", SLOW_FIX,
                    details={"failure": "deadline", "steps_reached": reached})
    return None


def _ended_with_the_stall(run: SizeRun, idle: list[RankRun]) -> list[RankRun]:
    """Ranks torchrun ended when a peer's watchdog called the stall, no further on than that peer:
    they sat as long, though their last record (written once a second) can read a little under the
    limit. Two ranks that stop together (one sleeps, one waits for it) race to call it."""
    most = max(r.steps for r in run.ranks if r.ended == "stalled")
    return [r for r in run.ranks if r not in idle and r.ended in ("killed", "missing") and 0 < r.steps <= most]


def _idle_past_stall(run: SizeRun, rank: RankRun) -> bool:
    """A rank cut off at the deadline counts as hung when it had made no step for the stall limit."""
    return rank.idle_s is not None and rank.idle_s >= min(run.stall_s, run.deadline_s / 2)


def ended_early(run: SizeRun) -> Verdict | None:
    """WARN when the script returned before the rehearsal's steps on every rank."""
    if all(r.ended == "steps_done" for r in run.ranks):
        return None
    if not all(clean_end(r) for r in run.ranks):
        return None
    reached = min(r.steps for r in run.ranks)
    if reached >= run.target:
        return None  # it ran the plan's steps and ended by itself while the window was growing: not early
    measured = max(0, reached - run.warmup - 1)
    basis = (f"the figures rest on the {measured} step intervals after the warm-up" if measured
             else "too few steps after the warm-up for a steady step time: only the first step is measured")
    how = next((f" (rank {r.rank} called os._exit(0){_called_at(r)})" for r in run.ranks if r.ended == "os_exit"), "")
    return warn("REHEARSAL_ENDED_EARLY", f"{_size(run.nproc)}: the script ended after {reached} of {run.target} "
                f"steps{how}; {basis}", ENDED_FIX, details={"failure": "ended_early", "steps_reached": reached})


def run_notes(run: SizeRun) -> list[str]:
    """What the rehearsal had to do or could not do beside the verdict: processes it stopped that the
    script left running, files the script removed, logs it cut, writes that failed."""
    notes = []
    left = run.left_behind()
    if left:
        kinds: dict[str, int] = {}
        for process in left:
            kinds[process.what] = kinds.get(process.what, 0) + 1
        shown = ", ".join(f"{n} x {what}" if n > 1 else what for what, n in kinds.items())
        stubborn = sum(1 for process in left if process.needed_kill)
        killed = f"; {stubborn} ignored SIGTERM and were killed" if stubborn else ""
        notes.append(f"stopped {len(left)} process{'es' if len(left) != 1 else ''} the script left running "
                     f"({shown}{killed}): in a real job they would outlive it")
    if run.files_removed:
        notes.append(f"the script removed the rehearsal's files ({Path(run.run_dir).name}) while it ran; what the "
                     "ranks wrote was read through preflight's own handles and written back")
    cut = [(rank, size) for rank, size in enumerate(run.log_bytes) if size > KEEP_BYTES]
    if cut:
        notes.append("long logs kept as their first and last lines: " + ", ".join(
            f"rank {rank} printed {size / 1e6:,.0f} MB" for rank, size in cut))
    for rank in run.ranks:
        notes += [f"rank {rank.rank}: {note}" for note in rank.notes if "could not" in note or "failed" in note]
    return notes + list(run.notes)
