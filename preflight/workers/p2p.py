"""Peer-to-peer copies between every pair of GPUs, with the data verified.

``torch.cuda.can_device_access_peer`` only reports capability: nodes where it says yes and P2P then
hangs or corrupts data (ACS, IOMMU, broken bridges) are a known failure. So for every ordered pair
this worker copies a known pattern from one GPU to the other, checks every element on arrival and
times the copies. It runs in rank 0 of the rehearsal launch (never in the pytest process) while the
other ranks wait; before each pair it marks its progress, so if a copy hangs the phase's budget
names the pair.

Arguments: ``--mib N`` (buffer size, default 64) and ``--iterations K`` (timed copies, default 5).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from preflight.workers.common import WorkerContext

DEFAULT_MIB = 64
DEFAULT_ITERATIONS = 5
_MULTIPLIER = 2654435761  # Knuth's multiplicative hash: neighbouring elements differ in many bits

Copy = Callable[[Any, Any], Any]


def pattern(numel: int, seed: int, device: Any) -> Any:
    """A deterministic int32 pattern, different for every (element, seed), built on ``device``."""
    import torch

    index = torch.arange(numel, dtype=torch.int64, device=device)
    return ((index * _MULTIPLIER + seed * 7919) % 2147483647).to(torch.int32)


def _plain_copy(destination: Any, source: Any) -> Any:
    return destination.copy_(source, non_blocking=False)


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_pair(source: Any, destination: Any, numel: int, iterations: int, seed: int,
                 copy: Copy = _plain_copy) -> dict[str, Any]:
    """Copy a pattern ``iterations`` times from ``source`` to ``destination``; verify and time it.

    The first copy is checked on its own (a wrong first copy is not hidden by later ones), the last
    one after the timed loop. Returns elements that differ, the first differing index and GB/s.
    """
    import torch

    data = pattern(numel, seed, source)
    expected = pattern(numel, seed, destination)
    target = torch.full((numel,), -1, dtype=torch.int32, device=destination)
    copy(target, data)
    _synchronize(destination)
    mismatches = int((target != expected).sum())
    first_bad = int((target != expected).nonzero()[0].item()) if mismatches else None
    if mismatches == 0:
        target.fill_(-1)
        _synchronize(destination)
        _synchronize(source)
        start = time.perf_counter()
        for _ in range(iterations):
            copy(target, data)
        _synchronize(destination)
        _synchronize(source)
        elapsed = time.perf_counter() - start
        mismatches = int((target != expected).sum())
        first_bad = int((target != expected).nonzero()[0].item()) if mismatches else None
    else:
        elapsed = 0.0
    nbytes = numel * 4
    gbps = nbytes * iterations / elapsed / 1e9 if elapsed > 0 and mismatches == 0 else None
    return {"bytes": nbytes, "iterations": iterations, "mismatches": mismatches, "first_bad_index": first_bad,
            "gbps": gbps}


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="preflight.workers.p2p")
    parser.add_argument("--mib", type=int, default=DEFAULT_MIB)
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    return parser.parse_args(argv)


def _device_facts(index: int) -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(index)
    try:
        # torch's binding has the pci_* fields, its _C stub does not; a torch without them raises AttributeError.
        domain, bus_no = props.pci_domain_id, props.pci_bus_id  # type: ignore[attr-defined]  # absent from the stub
        device = props.pci_device_id  # type: ignore[attr-defined]  # absent from torch's stub
        bus = f"{domain:08x}:{bus_no:02x}:{device:02x}.0".upper()
    except AttributeError:
        bus = None
    return {"index": index, "name": props.name, "pci_bus_id": bus}


def run(ctx: WorkerContext) -> dict[str, Any]:
    """Rank 0 copies between every ordered pair of visible GPUs (peer access flag, verified copy,
    bandwidth) while the other ranks wait at a barrier: the copies must not compete with other traffic."""
    import torch.distributed as dist

    if not ctx.on_gpu:
        return {"skipped": "the worker has no CUDA device (CPU backend)"}
    if ctx.rank != 0:
        ctx.progress("waiting for rank 0's peer-to-peer copies (barrier)")
        dist.barrier()
        return {"waited_for_rank0": True}
    result = copy_every_pair(ctx)
    ctx.progress("barrier after the peer-to-peer copies")
    dist.barrier()
    return result


def copy_every_pair(ctx: WorkerContext) -> dict[str, Any]:
    """Every ordered pair of visible GPUs: peer access flag, verified copy, bandwidth."""
    import torch
    args = _arguments(ctx.args)
    count = torch.cuda.device_count()
    devices = [_device_facts(i) for i in range(count)]
    if count < 2:
        return {"skipped": f"{count} CUDA device(s) visible: no pair to test", "devices": devices}
    numel = max(1, args.mib * 1024 * 1024 // 4)
    pairs: list[dict[str, Any]] = []
    for a in range(count):
        for b in range(count):
            if a == b:
                continue
            ctx.progress(f"copy cuda{a}->cuda{b}")
            peer = bool(torch.cuda.can_device_access_peer(a, b))
            entry: dict[str, Any] = {"src": a, "dst": b, "can_access_peer": peer}
            try:
                entry.update(measure_pair(torch.device("cuda", a), torch.device("cuda", b), numel, args.iterations,
                                          seed=a * count + b))
                entry["error"] = None
            except Exception as exc:  # noqa: BLE001 - a failed copy is this pair's result, not the worker's end
                message = f"{type(exc).__name__}: {exc}".splitlines()[0]
                entry.update({"error": message, "mismatches": None, "gbps": None})
            pairs.append(entry)
            torch.cuda.empty_cache()
    return {"devices": devices, "pairs": pairs, "mib": args.mib}

