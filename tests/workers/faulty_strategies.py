"""Test-only FSDP2 worker: the real one with a fault injected on one rank.

The fault comes from ``PREFLIGHT_TEST_FAULT=MODE:RANK`` (the worker's own arguments pass through):
``diverge`` perturbs the victim's gathered parameters, ``skip-save`` makes the victim skip the
checkpoint save as a job that saves under ``if rank == 0:`` does (the others hang inside it),
``corrupt`` alters one tensor on the victim after the load, ``no-numpy`` reports numpy missing
on every rank the way torch does.
"""

from __future__ import annotations

import os
import time
from typing import Any

from preflight.workers import fsdp
from preflight.workers.common import WorkerContext


def run(ctx: WorkerContext) -> dict[str, Any]:
    mode, victim = os.environ["PREFLIGHT_TEST_FAULT"].split(":")
    if mode == "no-numpy":
        fsdp.numpy_problem = lambda: ("torch cannot use numpy (Numpy is not available): torch.distributed."
                                      "checkpoint exchanges its plans with object collectives, which need numpy")
    if ctx.rank != int(victim):
        return fsdp.run(ctx)
    if mode == "diverge":
        gather = fsdp.gathered_parameters

        def perturbed(model: Any) -> list[tuple[str, Any]]:
            named = gather(model)
            return [(name, tensor + 1e-3 if index == 0 else tensor) for index, (name, tensor) in enumerate(named)]

        fsdp.gathered_parameters = perturbed
    elif mode == "skip-save":
        def skipped(state: dict[str, Any], path: Any) -> None:
            ctx.progress("training on without calling the checkpoint save")
            time.sleep(3600)

        fsdp.save_checkpoint = skipped
    elif mode == "corrupt":
        load = fsdp.load_checkpoint

        def corrupted(state: dict[str, Any], path: Any) -> None:
            load(state, path)
            weight = state["model"]["head.weight"]
            (weight.to_local() if hasattr(weight, "to_local") else weight).add_(1.0)

        fsdp.load_checkpoint = corrupted
    elif mode != "no-numpy":
        raise ValueError(f"unknown fault {mode!r}")
    return fsdp.run(ctx)

