"""Test-only phase functions: tiny, with a collective, and with faults on demand (``MODE RANK`` args)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from preflight.workers.common import WorkerContext


def collective(ctx: WorkerContext) -> dict[str, Any]:
    """An all-reduce of the rank numbers: every rank must be here for it to end."""
    import torch
    import torch.distributed as dist

    ctx.progress("all-reduce of the rank numbers")
    value = torch.tensor([float(ctx.rank)])
    dist.all_reduce(value)
    mode, victim = (ctx.args + ["none", "-1"])[:2]
    if ctx.rank == int(victim):
        if mode == "crash":
            raise RuntimeError(f"injected crash on rank {ctx.rank}")
        if mode == "hang":
            ctx.progress("sleeping on purpose")
            time.sleep(3600)
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return {"sum": float(value.item()), "rank": ctx.rank}
