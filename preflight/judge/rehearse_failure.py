"""Name what went wrong in one rehearsal launch: a crash (which rank first, its error, an OOM called
an OOM), a hang (which rank, after which step, where it waits), no optimizer step, a script that
ended early. Pure: reads :class:`preflight.rehearse.facts.SizeRun` only.

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

from preflight.launch.outcome import PEER_FAILURE
from preflight.outcome import Verdict, error, fail, warn
from preflight.rehearse.facts import FINISHED, Frame, RankRun, SizeRun

NODE_CHECKS = "preflight -k 'nccl or p2p or ddp'"
_OOM = re.compile(r"out of memory|OutOfMemory|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED|"
                  r"std::bad_alloc|Cannot allocate memory", re.IGNORECASE)
_WAITING_FILES = ("/torch/distributed/", "/torch/nn/parallel/", "/deepspeed/comm/",
                  "/deepspeed/runtime/zero/", "/torch/_C/_distributed")
_BACKWARD_FILES = ("/torch/autograd/", "/torch/_tensor.py")
_BUILD_FILES = ("/torch/utils/cpp_extension.py", "/deepspeed/ops/op_builder/", "/torch/_inductor/", "/triton/")
_LIBRARY_MARKS = ("site-packages", "dist-packages", "<frozen", "/lib/python3", "preflight/rehearse/bootstrap.py")
TRACEBACK_LINES = 25
MOVING_S = 1.0  # a rank whose last look found it in a call younger than this was still running

OOM_FIX = ("It ran out of memory. Lower the per-GPU (micro) batch, turn on activation checkpointing, train in bf16, "
           "or shard the model state (FSDP, ZeRO-2/3); `preflight size --model-params N --gpus K --gpu-memory M` "
           "shows what fits before activations.")
CRASH_FIX = ("The first failing rank's traceback is in the evidence and its whole log under the report directory; "
             "the other ranks stopped because it did. Fix that error and rehearse again.")
HANG_FIX = ("The rank named first is where the job stops; the others wait for it. Usual causes: a collective only "
            "some ranks call (a barrier, all_reduce or DeepSpeed save_checkpoint under `if rank == 0`), ranks with "
            "different numbers of batches (uneven data without DistributedSampler, drop_last), or a rank blocked in "
            "I/O. Give init_process_group a `timeout=` so a real job fails instead of hanging for its default 10 min.")
FIRST_COLLECTIVE_FIX = ("The ranks joined the process group but could not complete a collective: the link between "
                        f"them is the suspect, not the script. Run `{NODE_CHECKS}` to test NCCL, peer-to-peer and a "
                        "DDP step on this node; NCCL_DEBUG=INFO in the job's environment shows each pair's transport.")
NO_STEP_FIX = ("No torch.optim optimizer stepped. Usual causes: slow data loading or preprocessing before the first "
               "batch (raise --timeout), a loop that never calls optimizer.step(), a script that does not train "
               "(evaluation only), or an optimizer that is not a torch.optim.Optimizer.")
ENDED_FIX = ("The script stopped training before the rehearsal's steps (its own max-steps or a short epoch). Give "
             "it a longer run for the rehearsal (it can read PREFLIGHT_REHEARSAL=1), or ask for fewer with "
             "--warmup/--steps.")
BUILD_FIX = ("A JIT build was still running at the deadline: the first run of DeepSpeed's ops or torch.compile "
             "builds its kernels, which takes minutes. Rehearse once with a longer --timeout (the build is cached in "
             "TORCH_EXTENSIONS_DIR or the inductor cache, so the job and later runs start fast), or install prebuilt "
             "DeepSpeed ops (DS_BUILD_OPS=1 pip install deepspeed).")
SLOW_FIX = "Raise --timeout (seconds per size) or ask for fewer --steps."


def is_oom(rank: RankRun) -> bool:
    """An allocation failure: CUDA's OutOfMemoryError, the CPU allocator's, MemoryError."""
    text = f"{rank.error_type or ''} {rank.error_message or ''}"
    return bool(_OOM.search(text)) or (rank.error_type or "").endswith("MemoryError")


def is_peer_failure(rank: RankRun) -> bool:
    """An error that only says a peer went away (gloo/NCCL after another rank died)."""
    return bool(PEER_FAILURE.search(f"{rank.error_type or ''} {rank.error_message or ''}"))


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


def user_frame(stack: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code (not a library, not the bootstrap)."""
    for frame in reversed(stack):
        path = frame.file.replace("\\", "/")
        if not any(mark in path for mark in _LIBRARY_MARKS):
            return frame
    return None


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


def _signal_text(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    if name == "SIGKILL":
        return "killed by SIGKILL (on Linux most often the kernel's OOM killer: check `dmesg | grep -i oom`)"
    if name == "SIGSEGV":
        return "killed by SIGSEGV (a segmentation fault in native code)"
    return f"killed by {name}"


def _tail(text: str, lines: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _first_failure(run: SizeRun) -> RankRun | None:
    """The rank that failed first: an error of its own (earliest), else a rank killed by a signal."""
    own = [r for r in run.ranks if r.ended in ("raised", "exit") and not is_peer_failure(r)]
    if own:
        return min(own, key=lambda r: (r.error_time if r.error_time is not None else float("inf"), r.rank))
    signalled = [r for r in run.ranks if r.ended in ("killed", "missing") and r.launcher_state == "crashed"]
    if any(r.ended in ("stalled", "deadline") for r in run.ranks):  # torchrun's SIGTERM after that rank left
        signalled = [r for r in signalled if r.exit_code != -signal.SIGTERM]
    if signalled:
        named = [r for r in signalled if r.rank == run.root_cause]
        return named[0] if named else min(signalled, key=lambda r: r.rank)
    peers = [r for r in run.ranks if r.ended in ("raised", "exit")]
    return min(peers, key=lambda r: (r.error_time or float("inf"), r.rank)) if peers else None


def _crash(run: SizeRun, first: RankRun) -> Verdict:
    oom = is_oom(first)
    how = _signal_text(first.exit_code) if first.ended in ("killed", "missing") else None
    if how is None:
        detail = f"{(first.error_type or 'error').rsplit('.', 1)[-1]}: {first.error_message}" if first.error_message \
            else (first.launcher_error or f"exit code {first.exit_code}")
        how = f"{'ran out of memory' if oom else 'crashed'} ({detail.strip()[:300]})"
    after = f"after step {first.steps}" if first.steps else "before its first optimizer step"
    others = [r.rank for r in run.ranks if r.rank != first.rank and r.ended not in FINISHED]
    tail = f"; {_ranks(others)} stopped after it" if others else ""
    summary = f"{_size(run.nproc)}: rank {first.rank} {how} {after}{tail}"
    evidence = {f"rank {first.rank} traceback (tail)": _tail(first.traceback)} if first.traceback else {}
    if first.log_tail:
        evidence[f"rank {first.rank} log tail"] = _tail(first.log_tail)
    for other in run.ranks:
        if other.rank != first.rank and other.ended not in FINISHED and other.log_tail:
            evidence[f"rank {other.rank} log tail ({other.ended})"] = _tail(other.log_tail, 8)
    details = {"failure": "oom" if oom else "crash", "first_failing_rank": first.rank, "step": first.steps,
               "exit_code": first.exit_code, "error_type": first.error_type}
    code = "REHEARSAL_OOM" if oom or "OOM killer" in how else "REHEARSAL_CRASHED"
    return fail(code, summary, OOM_FIX if code == "REHEARSAL_OOM" else CRASH_FIX, evidence=evidence, details=details)


def _stack_text(rank: RankRun) -> str:
    return "\n".join(f"{f.file}:{f.line} in {f.function}" + (f"\n    {f.code}" if f.code else "") for f in rank.stack)


def _hang(run: SizeRun, idle: list[RankRun]) -> Verdict:
    least = min(r.steps for r in idle)
    behind = [r for r in idle if r.steps == least]
    culprits = [r for r in behind if waiting_place(r.stack) is None and r.stack] or behind
    left = [r for r in run.ranks if r.ended in FINISHED and r.steps <= least]
    parts = []
    if left:
        parts.append(f"{_ranks([r.rank for r in left])} left the script after step {left[0].steps} while the others "
                     "still waited for it")
    for rank in sorted(idle, key=lambda r: (r not in culprits, r.rank)):
        idle_for = f" for {rank.idle_s:.0f} s" if rank.idle_s is not None else ""
        parts.append(f"rank {rank.rank} {_where(rank)}{idle_for}")
    for rank in run.ranks:  # ranks that lost the hung one when it was ended: its echo, not a cause
        if rank not in idle and rank.ended in ("raised", "exit") and is_peer_failure(rank):
            parts.append(f"rank {rank.rank} lost its peer ({(rank.error_message or '').strip()[:80]})")
    after = f"after step {least}" if least else "before the first optimizer step"
    summary = f"{_size(run.nproc)} hung {after}: " + "; ".join(parts)
    evidence = {f"rank {r.rank} stack while idle": _stack_text(r) for r in idle if r.stack}
    details = {"failure": "hang", "step": least, "ranks_behind": [r.rank for r in culprits],
               "steps_reached": {str(r.rank): r.steps for r in run.ranks}}
    return fail("REHEARSAL_HUNG", summary, HANG_FIX, evidence=evidence, details=details)


def _no_step(run: SizeRun) -> Verdict:
    """No step by the deadline. Every rank waiting in a collective after the process group came up
    is the link's fault; a rank busy anywhere else (data, its own code) is the one the others wait for."""
    waiting = [r for r in run.ranks if _stuck_in_collective(run, r)]
    evidence = {f"rank {r.rank} stack at the deadline": _stack_text(r) for r in run.ranks if r.stack}
    if waiting and len(waiting) == len(run.ranks):
        rank = waiting[0]
        up = f"{rank.pg_up_s:.0f} s after the launch" if rank.pg_up_s is not None else ""
        summary = (f"{_size(run.nproc)}: the process group came up {up} but no step came in {run.deadline_s:.0f} s; "
                   f"{_ranks([r.rank for r in waiting])} {'waits' if len(waiting) == 1 else 'wait'} in a collective "
                   f"(rank {rank.rank} at {_innermost_call(rank.stack)})")
        return fail("REHEARSAL_FIRST_COLLECTIVE_HUNG", summary, FIRST_COLLECTIVE_FIX, evidence=evidence,
                    details={"failure": "first_collective", "ranks": [r.rank for r in waiting]})
    places = "; ".join(f"rank {r.rank} {_where(r)}" for r in run.ranks if r.stack)
    summary = f"{_size(run.nproc)}: no optimizer step in {run.deadline_s:.0f} s" + (f" ({places})" if places else "")
    building = any(waiting_place(r.stack) == "build" for r in run.ranks)
    return fail("REHEARSAL_NO_STEP", summary, BUILD_FIX if building else NO_STEP_FIX, evidence=evidence,
                details={"failure": "jit_build" if building else "no_step"})


def name_failure(run: SizeRun) -> Verdict | None:
    """The named failure of a launch, or None when every rank ran its steps (or the script ended
    after some: :func:`ended_early` says so)."""
    if any(r.ended == "parent_gone" for r in run.ranks):
        return error(f"{_size(run.nproc)}: the rehearsal was interrupted (preflight or torchrun went away)",
                     code="REHEARSAL_INTERRUPTED")
    first = _first_failure(run)
    idle = [r for r in run.ranks if r.ended == "stalled" or (r.ended in ("deadline", "killed", "missing")
                                                            and r.steps > 0 and _idle_past_stall(run, r))]
    if any(r.ended == "stalled" for r in run.ranks):
        idle += _ended_with_the_stall(run, idle)
    if first is not None and not (idle and first.ended in ("raised", "exit") and is_peer_failure(first)):
        return _crash(run, first)  # a rank that only lost its peer while another stalled is the hang's echo
    if idle:
        return _hang(run, idle)
    if all(r.steps == 0 for r in run.ranks):
        if all(r.ended in FINISHED for r in run.ranks):
            return fail("REHEARSAL_NO_STEP", f"{_size(run.nproc)}: the script ended without a single optimizer step",
                        NO_STEP_FIX, details={"failure": "no_step"})
        return _no_step(run)
    if any(r.ended in ("deadline", "killed", "missing") for r in run.ranks):
        reached = min(r.steps for r in run.ranks)
        return warn("REHEARSAL_DEADLINE", f"{_size(run.nproc)}: {reached} of {run.target} steps in the "
                    f"{run.deadline_s:.0f} s deadline; the figures rest on those", SLOW_FIX,
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
    if not all(r.ended in FINISHED for r in run.ranks):
        return None
    reached = min(r.steps for r in run.ranks)
    measured = max(0, reached - run.warmup - 1)
    basis = (f"the figures rest on the {measured} step intervals after the warm-up" if measured
             else "too few steps after the warm-up for a steady step time: only the first step is measured")
    return warn("REHEARSAL_ENDED_EARLY", f"{_size(run.nproc)}: the script ended after {reached} of {run.target} steps; "
                f"{basis}", ENDED_FIX, details={"failure": "ended_early", "steps_reached": reached})
