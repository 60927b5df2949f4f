"""A tiny DDP training step on every rank.

Each rank builds the same small model, wraps it in DDP, runs forward, backward and an optimizer
step on data of its own (different per rank, so the gradient all-reduce matters), and reports a
checksum of its parameters. DDP keeps replicas identical, so the checksums must match bit for bit.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from preflight.workers.common import WorkerContext
from preflight.workers.digest import parameters_digest

IN_FEATURES = 256
HIDDEN = 512
BATCH = 32


def _build_model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, 1))


def parameter_digest(model: Any) -> tuple[str, float]:
    """sha256 of every parameter's bytes (bit-exact agreement) and their float64 sum (for people)."""
    return parameters_digest(model.parameters())


def run(ctx: WorkerContext) -> dict[str, Any]:
    """One DDP step; returns timings, loss, memory and the parameter checksum."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx.progress("building the DDP model (broadcast from rank 0)")
    model = _build_model().to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.local_rank] if ctx.on_gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1000 + ctx.rank)
    inputs = torch.randn(BATCH, IN_FEATURES, generator=generator).to(ctx.device)
    targets = torch.randn(BATCH, 1, generator=generator).to(ctx.device)

    ctx.progress("barrier before the step")
    dist.barrier()
    ctx.progress("forward, backward (gradient all-reduce) and optimizer step")
    start = time.perf_counter()
    loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
    loss.backward()
    optimizer.step()
    if ctx.on_gpu:
        torch.cuda.synchronize(ctx.device)
    step_s = time.perf_counter() - start

    digest, total = parameter_digest(model)
    return {
        "loss": float(loss.detach()),
        "step_time_s": step_s,
        "param_sha256": digest,
        "param_sum": total,
        "peak_memory_bytes": _peak_memory(ctx),
    }


def _peak_memory(ctx: WorkerContext) -> int:
    """GPU: the allocator's peak; CPU: the process's peak resident set size (``ru_maxrss``, KiB on Linux)."""
    if ctx.on_gpu:
        import torch

        return int(torch.cuda.max_memory_allocated(ctx.device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

