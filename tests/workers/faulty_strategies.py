"""Test-only FSDP2 worker: the real one with a fault injected on one rank.

The fault is ``MODE:RANK``, from the phase's own ``--fault MODE:RANK`` argument (so one launch can run
several faulty phases, each its own fault) or else ``PREFLIGHT_TEST_FAULT`` (the rehearsal's phase,
swapped by ``tests.fakes.faulty_strategies``); the other arguments pass through to the real worker.
``diverge`` perturbs the victim's gathered parameters, ``skip-save`` makes the victim skip the
checkpoint save as a job that saves under ``if rank == 0:`` does (the others hang inside it),
``corrupt`` alters one tensor on the victim after the load, ``no-numpy`` reports numpy missing
on every rank the way torch does. What a fault replaces in the worker is put back when the phase
ends, so a later phase of the same launch runs the real code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from typing import Any

from preflight.workers import fsdp
from preflight.workers.common import WorkerContext

FAULT_ARG = "--fault"


def _fault(args: list[str]) -> tuple[str, list[str]]:
    """``(MODE:RANK, the remaining arguments)``."""
    if FAULT_ARG in args:
        at = args.index(FAULT_ARG)
        return args[at + 1], args[:at] + args[at + 2:]
    return os.environ["PREFLIGHT_TEST_FAULT"], args


def _replacements(mode: str, ctx: WorkerContext, victim: bool) -> dict[str, Any]:
    """The worker's functions this fault replaces on this rank, by name."""
    if mode == "no-numpy":
        return {"numpy_problem": lambda: ("torch cannot use numpy (Numpy is not available): torch.distributed."
                                          "checkpoint exchanges its plans with object collectives, which need numpy")}
    if mode not in ("diverge", "skip-save", "corrupt"):
        raise ValueError(f"unknown fault {mode!r}")
    if not victim:
        return {}
    if mode == "diverge":
        gather = fsdp.gathered_parameters

        def perturbed(model: Any) -> list[tuple[str, Any]]:
            named = gather(model)
            return [(name, tensor + 1e-3 if index == 0 else tensor) for index, (name, tensor) in enumerate(named)]

        return {"gathered_parameters": perturbed}
    if mode == "skip-save":
        def skipped(state: dict[str, Any], path: Any) -> None:
            ctx.progress("training on without calling the checkpoint save")
            time.sleep(3600)

        return {"save_checkpoint": skipped}
    load = fsdp.load_checkpoint

    def corrupted(state: dict[str, Any], path: Any) -> None:
        load(state, path)
        weight = state["model"]["head.weight"]
        (weight.to_local() if hasattr(weight, "to_local") else weight).add_(1.0)

    return {"load_checkpoint": corrupted}


@contextlib.contextmanager
def _replaced(replacements: dict[str, Any]) -> Iterator[None]:
    """The worker's functions replaced while the phase runs, the real ones back afterwards."""
    saved = {name: getattr(fsdp, name) for name in replacements}
    for name, value in replacements.items():
        setattr(fsdp, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(fsdp, name, value)


def run(ctx: WorkerContext) -> dict[str, Any]:
    fault, args = _fault(ctx.args)
    mode, victim = fault.split(":")
    with _replaced(_replacements(mode, ctx, ctx.rank == int(victim))):
        return fsdp.run(dataclasses.replace(ctx, args=args))
