"""nccl-tests' bandwidth definitions (``doc/PERFORMANCE.md``), shared by the sweep worker and the judges.

Standard library only: the worker computes them inside the ranks.
"""

from __future__ import annotations

GB = 1e9


def algbw_gbps(nbytes: int, time_s: float) -> float:
    """nccl-tests algorithm bandwidth: bytes per rank / time per operation, in GB/s (10^9)."""
    if time_s <= 0:
        raise ValueError(f"time must be > 0 s, got {time_s!r}")
    return nbytes / time_s / GB


def allreduce_busbw_gbps(algbw: float, ranks: int) -> float:
    """nccl-tests all-reduce bus bandwidth: ``algbw * 2(n-1)/n`` (0 for a single rank)."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks!r}")
    return algbw * 2 * (ranks - 1) / ranks
