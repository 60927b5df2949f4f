"""Test-only ZeRO worker: the real one (real DeepSpeed) with a fault injected on one rank.

``PREFLIGHT_TEST_FAULT=skip-save:RANK``: that rank never calls the checkpoint save, as a job that
saves under ``if rank == 0:`` goes on without it; DeepSpeed's ``save_checkpoint`` synchronises every
rank inside it, so the others wait there until the launch deadline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from preflight.workers import zero
from preflight.workers.common import WorkerContext


def run(ctx: WorkerContext) -> dict[str, Any]:
    mode, victim = os.environ["PREFLIGHT_TEST_FAULT"].split(":")
    if mode != "skip-save":
        raise ValueError(f"unknown fault {mode!r}")
    if ctx.rank == int(victim):
        def skipped(engine: Any, path: Path) -> None:
            ctx.progress("training on without calling the checkpoint save")
            time.sleep(3600)

        zero.save_checkpoint = skipped
    return zero.run(ctx)
