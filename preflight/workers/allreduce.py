"""All-reduce bandwidth sweep on every rank, measured the way nccl-tests measures it.

``python -m preflight.workers.allreduce --sizes 1048576,16777216 --warmup 5 --iters 20 --budget-s 30``

Per size: warm-up all-reduces, a correctness pass (every rank fills ``rank + 1``, the sum must be
``n(n+1)/2`` everywhere: exact in float32 for any realistic rank count), then timed iterations.
The timed iterations run as a few trials, each started after a barrier and bracketed by CUDA
events on GPUs or the wall clock on CPU (gloo is synchronous); a trial's time is the mean of its
back-to-back calls, and the median trial is kept, so a burst of load from another process on the
host does not decide the figure. Each rank's time is then averaged across ranks (nccl-tests'
default ``-a 1``) before computing ``algbw = bytes / time`` and ``busbw = algbw * 2(n-1)/n``.
Sizes that do not fit in free memory, or would overrun the time budget, are skipped and named.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

from preflight.probe.sweep import SizeResult
from preflight.workers.bandwidth import algbw_gbps, allreduce_busbw_gbps
from preflight.workers.common import WorkerContext

ELEMENT_BYTES = 4  # float32
TARGET_SIZE_S = 0.25  # timed iterations per size aim at about this long
MEMORY_SHARE = 0.5  # never use more than half of what is free
TRIALS = 5  # timed iterations are split in trials after a barrier each; the median trial is kept


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The worker's own arguments (after torchrun's)."""
    parser = argparse.ArgumentParser(prog="preflight.workers.allreduce")
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes, ascending")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20, help="most timed iterations per size")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=60.0, help="stop starting new sizes after this")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    return args


def run(ctx: WorkerContext) -> dict[str, Any]:
    """Measure every size that fits; return per-size figures and the sizes skipped (with why)."""
    import torch.distributed as dist

    args = parse_args(ctx.args)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    free = _free_bytes(ctx)
    ctx.progress("first collective: agreeing on the sizes that fit")
    for nbytes in args.sizes:
        elements = max(1, nbytes // ELEMENT_BYTES)
        nbytes = elements * ELEMENT_BYTES
        fits = _agree_all(ctx, nbytes * 2 <= free * MEMORY_SHARE)
        if not fits:
            skipped.append({"bytes": nbytes, "reason": "does not fit in free memory on every rank"})
            continue
        if _agree_any(ctx, time.monotonic() - started > args.budget_s):
            skipped.append({"bytes": nbytes, "reason": f"time budget of {args.budget_s:.0f} s used"})
            continue
        ctx.progress(f"all-reduce of {nbytes} bytes")
        size, iters = measure_size(ctx, nbytes, args.warmup, args.iters, args.min_iters)
        results.append({**size.as_dict(), "iters": iters})
    dist.barrier()
    return {
        "sizes": results,
        "skipped": skipped,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "nccl_version": _nccl_version(ctx),
        "sweep_s": time.monotonic() - started,
    }


def measure_size(
    ctx: WorkerContext, nbytes: int, warmup: int, max_iters: int, min_iters: int
) -> tuple[SizeResult, int]:
    """One message size: correctness pass, warm-up, timed trials; the figures and the iterations used."""
    import torch

    buffer = torch.empty(max(1, nbytes // ELEMENT_BYTES), dtype=torch.float32, device=ctx.device)
    correct = _check_values(ctx, buffer)
    warm_time = _slowest_rank(ctx, _timed(ctx, buffer, max(1, warmup)))  # every rank must agree on iters
    iters = int(min(max_iters, max(min_iters, math.ceil(TARGET_SIZE_S / max(warm_time, 1e-6)))))
    trials = [_timed(ctx, buffer, per_trial) for per_trial in _split(iters, TRIALS)]
    mean = _mean_across_ranks(ctx, statistics.median(trials))
    algbw = algbw_gbps(nbytes, mean)
    del buffer
    if ctx.on_gpu:
        torch.cuda.empty_cache()
    return SizeResult(nbytes, mean, algbw, allreduce_busbw_gbps(algbw, ctx.world_size), correct), iters


def _split(iters: int, trials: int) -> list[int]:
    """``iters`` iterations as up to ``trials`` near-equal trials: 20, 5 -> [4, 4, 4, 4, 4]."""
    count = max(1, min(trials, iters))
    return [iters // count + (1 if i < iters % count else 0) for i in range(count)]


def _free_bytes(ctx: WorkerContext) -> int:
    """Free device memory on GPU; on CPU the available RAM shared by the node's ranks."""
    if ctx.on_gpu:
        import torch

        free, _total = torch.cuda.mem_get_info(ctx.device)
        return int(free)
    return available_memory() // max(1, ctx.world_size)


def available_memory(meminfo: str = "/proc/meminfo") -> int:
    """``MemAvailable`` in bytes (the kernel's estimate of what can be allocated without swapping)."""
    try:
        with open(meminfo) as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _flag(ctx: WorkerContext, value: bool, op: Any) -> bool:
    """Reduce a boolean across ranks (MIN: all, MAX: any)."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([1 if value else 0], dtype=torch.int32, device=ctx.device)
    dist.all_reduce(tensor, op=op)
    return bool(tensor.item())


def _agree_all(ctx: WorkerContext, value: bool) -> bool:
    import torch.distributed as dist

    return _flag(ctx, value, dist.ReduceOp.MIN)


def _agree_any(ctx: WorkerContext, value: bool) -> bool:
    import torch.distributed as dist

    return _flag(ctx, value, dist.ReduceOp.MAX)


def _check_values(ctx: WorkerContext, buffer: Any) -> bool:
    """Every rank contributes ``rank + 1``; all must hold ``n(n+1)/2`` afterwards, on every rank."""
    import torch.distributed as dist

    buffer.fill_(float(ctx.rank + 1))
    dist.all_reduce(buffer)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    local_ok = bool((buffer == expected).all().item())
    return _agree_all(ctx, local_ok)


def _timed(ctx: WorkerContext, buffer: Any, iters: int) -> float:
    """Mean seconds per all-reduce over ``iters`` back-to-back calls, started after a barrier."""
    import torch
    import torch.distributed as dist

    buffer.zero_()  # repeated sums of zeros stay finite: no inf/NaN arithmetic in the timed loop
    dist.barrier()
    if ctx.on_gpu:
        torch.cuda.synchronize(ctx.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buffer)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0 / iters
    began = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buffer)
    return (time.perf_counter() - began) / iters


def _mean_across_ranks(ctx: WorkerContext, seconds: float) -> float:
    """nccl-tests averages the per-rank time across ranks before computing bandwidth."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor)
    return float(tensor.item()) / ctx.world_size


def _slowest_rank(ctx: WorkerContext, seconds: float) -> float:
    """The largest of the ranks' values, identical on every rank."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def _nccl_version(ctx: WorkerContext) -> str | None:
    """The NCCL torch runs with (``2.21.5``), None on CPU."""
    if not ctx.on_gpu:
        return None
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)

