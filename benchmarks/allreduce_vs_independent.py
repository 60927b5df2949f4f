"""Compare preflight's all-reduce figures with an independent measurement taken in the same run.

Usage: python benchmarks/allreduce_vs_independent.py [--nproc N] [--profile quick|full] [--rounds 3]
       [--stat best|median] [--tolerance 0.10]

1. preflight's sweep: the real worker (``preflight.workers.allreduce``) under the real launcher, with
   the sizes the bandwidth check uses for this profile and device.
2. An independent measurement of the same sizes:
   - on GPUs, nccl-tests' ``all_reduce_perf`` when it is on PATH (or ``$NCCL_TESTS_BIN``), one process
     driving all GPUs, its out-of-place busbw read with preflight's nccl-tests parser;
   - otherwise (CPU), a plain loop written here: ``torch.multiprocessing`` ranks on gloo, a barrier,
     N back-to-back ``all_reduce`` calls timed with ``time.perf_counter``, rank 0's time, and
     busbw computed inline as ``bytes / t * 2(n-1)/n``. It shares no code with the worker.
Both run ``--rounds`` times, alternating, and per size the best round (default; the one least
disturbed when the host is shared) or the median round is compared. Prints busbw of both and the
ratio per size; exits 1 when the ratio at the largest common size is off by more than the tolerance.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from preflight.fixtures.nccl import sweep_plan, sweep_run_from_launch  # noqa: E402
from preflight.launch.torchrun import launch  # noqa: E402
from preflight.parse.nccl_tests import parse_nccl_tests  # noqa: E402
from preflight.probe.command import run_command  # noqa: E402

PLAIN_ITERS = 20
PLAIN_WARMUP = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _plain_rank(rank: int, world: int, port: int, sizes: list[int], out: str) -> None:
    """One rank of the plain CPU loop; rank 0 writes ``size seconds`` lines."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    lines = []
    for nbytes in sizes:
        tensor = torch.zeros(nbytes // 4, dtype=torch.float32)
        for _ in range(PLAIN_WARMUP):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(PLAIN_ITERS):
            dist.all_reduce(tensor)
        elapsed = (time.perf_counter() - start) / PLAIN_ITERS
        lines.append(f"{nbytes} {elapsed}")
    dist.barrier()
    if rank == 0:
        Path(out).write_text("\n".join(lines))
    dist.destroy_process_group()


def plain_cpu_loop(world: int, sizes: list[int]) -> dict[int, float]:
    """busbw (GB/s) per size from the plain loop."""
    import torch.multiprocessing as mp

    out = tempfile.mktemp(prefix="plain-allreduce-")
    mp.spawn(_plain_rank, args=(world, _free_port(), sizes, out), nprocs=world, join=True)
    busbw = {}
    for line in Path(out).read_text().splitlines():
        nbytes, seconds = line.split()
        busbw[int(nbytes)] = int(nbytes) / float(seconds) / 1e9 * 2 * (world - 1) / world
    os.unlink(out)
    return busbw


def nccl_tests(binary: str, gpus: int, sizes: list[int]) -> dict[int, float]:
    """Out-of-place busbw per size from all_reduce_perf."""
    argv = [binary, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2", "-g", str(gpus), "-w", "5", "-n", "20"]
    result = run_command(argv, timeout_s=300)
    if not result.ok:
        raise SystemExit(f"all_reduce_perf failed: {result.describe_failure()}")
    return {row.size_bytes: row.out_of_place.busbw_gbps for row in parse_nccl_tests(result.stdout).rows}


def _combine(rounds: list[dict[int, float]], stat: str) -> dict[int, float]:
    """Per size, the best (highest busbw) or the median over the rounds that measured it."""
    sizes = set().union(*rounds) if rounds else set()
    pick = max if stat == "best" else statistics.median
    return {n: pick([r[n] for r in rounds if n in r]) for n in sizes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--profile", choices=("quick", "full"), default="full")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of both measurements")
    parser.add_argument("--stat", choices=("best", "median"), default="best",
                        help="combine rounds by the best busbw (least disturbed by other load) or the median")
    args = parser.parse_args()

    import torch

    gpus = torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0
    nproc = args.nproc or gpus or 2
    plan = sweep_plan(gpus > 0, args.profile == "quick")
    binary = os.environ.get("NCCL_TESTS_BIN") or shutil.which("all_reduce_perf")
    if gpus > 0 and not binary:
        print("GPU node without nccl-tests' all_reduce_perf on PATH (set NCCL_TESTS_BIN): nothing to compare with")
        return 1
    label = f"nccl-tests {binary}" if gpus > 0 else f"plain gloo loop ({PLAIN_ITERS} iterations, torch.multiprocessing)"
    ours_rounds: list[dict[int, float]] = []
    theirs_rounds: list[dict[int, float]] = []
    preflight_s = other_s = 0.0
    backend = "?"
    for _ in range(args.rounds):  # alternate the two so both see the same host load
        started = time.monotonic()
        result = launch("preflight.workers.allreduce", nproc=nproc, deadline_s=plan.wanted_s * 2, args=plan.args(),
                        run_dir=Path(tempfile.mkdtemp(prefix="bench-allreduce-")))
        preflight_s += time.monotonic() - started
        sweep = sweep_run_from_launch("preflight", result, {}, gpus > 0)
        if not sweep.ok:
            print(f"preflight's sweep did not complete: {result.describe()}")
            return 1
        backend = sweep.backend
        ours_rounds.append({s.bytes: s.busbw_gbps for s in sweep.sizes})
        started = time.monotonic()
        sizes = sorted(ours_rounds[-1])
        theirs_rounds.append(nccl_tests(binary, nproc, sizes) if gpus > 0 and binary else plain_cpu_loop(nproc, sizes))
        other_s += time.monotonic() - started
    ours = _combine(ours_rounds, args.stat)
    theirs = _combine(theirs_rounds, args.stat)

    print(f"ranks {nproc}, backend {backend}, profile {args.profile}, {args.rounds} alternating rounds, {args.stat} per size shown")
    print(f"preflight sweep: {preflight_s / args.rounds:.1f} s per launch (torchrun + torch import + sweep)")
    print(f"independent: {label}, {other_s / args.rounds:.1f} s per round")
    print(f"{'size (B)':>12} {'preflight busbw':>16} {'independent':>12} {'ratio':>7}")
    common = sorted(set(ours) & set(theirs))
    for nbytes in common:
        print(f"{nbytes:>12} {ours[nbytes]:>16.3f} {theirs[nbytes]:>12.3f} {ours[nbytes] / theirs[nbytes]:>7.3f}")
    if not common:
        print("no common size")
        return 1
    ratio = ours[common[-1]] / theirs[common[-1]]
    verdict = "within" if abs(ratio - 1) <= args.tolerance else "OUTSIDE"
    print(f"largest size {common[-1]} B: ratio {ratio:.3f}, {verdict} {args.tolerance:.0%}")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
