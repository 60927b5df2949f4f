"""Test-only worker: stands in for the P2P copy worker and hangs (or crashes) in the middle of a pair.

``python -m tests.workers.p2p_stuck hang|crash``: marks progress on ``copy cuda1->cuda2`` as the real
worker does before each pair, then sleeps for an hour or raises."""

from __future__ import annotations

import time
from typing import Any

from preflight.workers.common import WorkerContext


def run(ctx: WorkerContext) -> dict[str, Any]:
    ctx.progress("copy cuda0->cuda1")
    ctx.progress("copy cuda1->cuda2")
    if ctx.args and ctx.args[0] == "crash":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    time.sleep(3600)
    return {}

