"""Test-only all-reduce worker whose fault depends on NCCL_P2P_DISABLE, like a host with broken P2P.

``PREFLIGHT_TEST_P2P`` picks the behaviour: ``hang`` (rank 1 hangs when P2P is enabled), ``crash``
(rank 1 raises when P2P is enabled), ``slow`` (every all-reduce is slowed when P2P is enabled),
``slow-off`` (slowed when P2P is disabled), ``wrong`` (reduced values are off when P2P is
enabled), ``crash-always`` (rank 1 raises in every run). Runs on gloo; never shipped."""

from __future__ import annotations

import os
import time
from typing import Any

from preflight.probe.sweep import env_flag_set
from preflight.workers import allreduce
from preflight.workers.common import WorkerContext

DELAY_S = 0.004


def _slow_all_reduce(original: Any) -> Any:
    def slowed(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(DELAY_S)
        return original(tensor, *args, **kwargs)

    return slowed


def _wrong_all_reduce(original: Any, rank: int) -> Any:
    def wrong(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(tensor, *args, **kwargs)
        if tensor.numel() > 16 and rank == 1:
            tensor[0] += 1.0
        return out

    return wrong


def run(ctx: WorkerContext) -> dict[str, Any]:
    import torch.distributed as dist

    mode = os.environ.get("PREFLIGHT_TEST_P2P", "")
    p2p_enabled = not env_flag_set(os.environ.get("NCCL_P2P_DISABLE"))
    if mode == "crash-always" and ctx.rank == 1:
        raise RuntimeError("injected failure in every run")
    if p2p_enabled and ctx.rank == 1 and mode == "hang":
        ctx.progress("all-reduce over (fake) peer-to-peer")
        time.sleep(3600)
    if p2p_enabled and ctx.rank == 1 and mode == "crash":
        raise RuntimeError("injected P2P failure: Cuda failure 'peer access is not supported between these two devices'")
    if (mode == "slow" and p2p_enabled) or (mode == "slow-off" and not p2p_enabled):
        dist.all_reduce = _slow_all_reduce(dist.all_reduce)
    if mode == "wrong" and p2p_enabled:
        dist.all_reduce = _wrong_all_reduce(dist.all_reduce, ctx.rank)
    return allreduce.run(ctx)

