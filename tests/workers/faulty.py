"""Test-only phase: the real DDP step with one rank made to crash, hang or die by a signal.

The entry ``tests.workers.faulty:run`` takes ``MODE RANK`` as its phase arguments, or else reads
``PREFLIGHT_TEST_FAULT=MODE:RANK`` (set by end-to-end tests); MODE is crash, hang, sigkill or
kill-torchrun (the rank sends torchrun SIGKILL, as the kernel's OOM killer would when torchrun is
the process it picks)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from preflight.workers import ddp
from preflight.workers.common import WorkerContext


def run(ctx: WorkerContext) -> dict[str, Any]:
    mode, which = (ctx.args[0], ctx.args[1]) if len(ctx.args) >= 2 else os.environ["PREFLIGHT_TEST_FAULT"].split(":")
    victim = int(which)
    if ctx.rank == victim:
        if mode == "crash":
            raise RuntimeError(f"injected crash on rank {ctx.rank}")
        if mode == "hang":
            time.sleep(3600)
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "kill-torchrun":
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(3600)
    return ddp.run(ctx)

