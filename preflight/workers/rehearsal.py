"""The one program every torchrun rank of a preflight launch runs: join once, then run phases in order.

``python -m preflight.workers.rehearsal PLAN.json``. The plan lists phases (``name``, ``entry`` as
``module:function``, ``args``, ``gated``). Each phase function takes a :class:`WorkerContext` (its
``args`` set to the phase's) and returns a JSON-able dict. One process group serves every phase, so
torch's import, the rendezvous and (on GPUs) CUDA and NCCL set-up are paid once per launch.

Per phase the rank writes ``rank<N>.<phase>.json`` (the dict, with the rank's device and timing) or,
when the phase raises, ``rank<N>.<phase>.error.json`` and exits 1 at once: its peers may be blocked in
a collective of that phase, so carrying on could only hang; the launcher then names the phase and the
rank and relaunches the phases that did not run. A gated phase (a measurement) first waits for the
launcher's gate file, so preflight's own probe checks never share the CPUs with it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from preflight.workers.common import (
    JOINING,
    LEAVING,
    RUN_DIR_ENV,
    STARTUP,
    Progress,
    WorkerContext,
    error_name,
    join_process_group,
    leave_process_group,
    redirect_output,
    result_name,
    write_json_atomic,
)
from preflight.workers.lifeline import die_with_parent, start_watchdog

GATE_POLL_S = 0.02
TORCH_ANSWER = "torch.json"
"""Where rank 0 answers the job's-torch question for preflight (``plan["answer_torch"]``)."""
WAITING = "waiting for preflight's probe checks to finish (measurements never share the CPUs)"
PhaseFunction = Callable[[WorkerContext], dict[str, Any]]


def load_entry(entry: str) -> PhaseFunction:
    """``package.module:function`` -> the function."""
    module_name, _, function = entry.partition(":")
    module = importlib.import_module(module_name)
    found = getattr(module, function or "run")
    if not callable(found):
        raise TypeError(f"{entry} is not callable")
    return found  # type: ignore[no-any-return]  # the plan names phase functions by contract


def wait_for_gate(gate: Path, progress: Progress) -> None:
    """Block until ``gate`` exists (the launcher creates it when the probe checks are done)."""
    if gate.exists():
        return
    progress.mark(WAITING, waiting=True)
    while not gate.exists():
        time.sleep(GATE_POLL_S)


def answer_torch(run_dir: Path) -> None:
    """Rank 0 answers what preflight's torch probe would ask (:func:`preflight.probe.torch_child.facts`):
    it imports the job's torch in the job's interpreter anyway, so preflight needs no probe of its own.
    A question that fails for another reason than torch's import says so (preflight then asks its probe)."""
    import warnings

    try:
        from preflight.probe import torch_child

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy": a fact, not noise
            facts = torch_child.facts()
    except Exception as exc:  # noqa: BLE001 - preflight falls back to its probe, whatever went wrong
        facts = {"unanswered": f"{type(exc).__name__}: {exc}"}
    write_json_atomic(run_dir / TORCH_ANSWER, facts)


def run_phase(ctx: WorkerContext, progress: Progress, phase: dict[str, Any], gate: Path | None) -> None:
    """Run one phase and write its result; on an exception write the error and leave the process."""
    name = str(phase["name"])
    progress.enter(name, f"{name}: starting")
    try:
        if phase.get("gated") and gate is not None:
            wait_for_gate(gate, progress)
            progress.enter(name, f"{name}: starting")
        function = load_entry(str(phase["entry"]))
        gc.freeze()  # what earlier phases imported (torch._dynamo, _inductor: 10^6 objects) is never garbage:
        # DeepSpeed's gc.collect() calls (ZeRO-3's defragment, twice per engine) then scan only this phase's
        ctx.args = [str(a) for a in phase.get("args", [])]
        ctx.notes = []
        started = time.monotonic()
        result = function(ctx)
        payload = {"rank": ctx.rank, "world_size": ctx.world_size, "local_rank": ctx.local_rank,
                   "backend": ctx.backend, "device": ctx.device_identity(), "phase": name,
                   "duration_s": time.monotonic() - started, "notes": ctx.notes, "result": result}
        write_json_atomic(ctx.run_dir / result_name(ctx.rank, name), payload)
        progress.done(name)
        print(f"[preflight rank {ctx.rank}] phase {name} finished in {payload['duration_s']:.2f} s", flush=True)
    except BaseException as exc:  # noqa: BLE001 - any failure of a phase must be recorded
        fail(ctx.run_dir, ctx.rank, name, exc)


def fail(run_dir: Path, rank: int, phase: str, exc: BaseException) -> NoReturn:
    """Record why ``phase`` failed on this rank and exit 1 without interpreter teardown."""
    traceback.print_exc()
    write_json_atomic(run_dir / error_name(rank, phase),
                      {"rank": rank, "phase": phase, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(), "time": time.time()})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def main(argv: list[str]) -> None:
    """Entry point of a rank."""
    die_with_parent()
    start_watchdog()
    rank = int(os.environ.get("RANK", "0"))
    plan = json.loads(Path(argv[0]).read_text())
    run_dir = Path(os.environ.get(RUN_DIR_ENV, "."))
    redirect_output(run_dir / f"rank{rank}.log")
    write_json_atomic(run_dir / f"rank{rank}.pid", {"pid": os.getpid(), "started": time.time()})
    print(f"[preflight rank {rank}] pid {os.getpid()} starting phases "
          f"{', '.join(p['name'] for p in plan['phases'])}", flush=True)
    progress = Progress(run_dir, rank)
    progress.enter(STARTUP, JOINING)
    if rank == 0 and plan.get("answer_torch"):
        answer_torch(run_dir)
    gate = Path(plan["gate"]) if plan.get("gate") else None
    try:
        ctx = join_process_group(rank, run_dir)
    except BaseException as exc:  # noqa: BLE001 - a rank that cannot join names why
        fail(run_dir, rank, "startup", exc)
    ctx.progress_marks = progress
    for phase in plan["phases"]:
        run_phase(ctx, progress, phase, gate)
    progress.enter(LEAVING, "leaving the process group")
    try:
        leave_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip interpreter teardown: a wedged CUDA/NCCL atexit must not hold the rank


if __name__ == "__main__":
    main(sys.argv[1:])
