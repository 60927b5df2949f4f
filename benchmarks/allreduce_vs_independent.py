"""Compare preflight's all-reduce figures with an independent measurement taken in the same run.

Usage: python benchmarks/allreduce_vs_independent.py [--nproc N] [--profile quick|full] [--rounds 3]
       [--stat best|median] [--tolerance 0.10]

- On GPUs: preflight's sweep (``preflight.workers.allreduce`` under the launcher, the sizes the
  bandwidth check uses) against nccl-tests' ``all_reduce_perf`` (on PATH or ``$NCCL_TESTS_BIN``),
  one process driving all GPUs, out-of-place busbw read with preflight's nccl-tests parser.
- On CPU: one torchrun launch on gloo in which, size after size and round after round, the ranks run
  preflight's own measurement (``measure_size``, the function the check's worker calls per size)
  and then a plain loop written here: a barrier, 20 back-to-back ``all_reduce`` calls timed with
  ``time.perf_counter``, rank 0's time, busbw computed inline as ``bytes / t * 2(n-1)/n``. The
  plain loop shares no timing code with preflight; alternating the two inside one process group
  gives both the same host load, which matters on a shared 2-core machine.

Rounds are combined per size by the best busbw (default: the round least disturbed by other load)
or the median. Prints both figures and their ratio per size; exits 1 when the ratio at the largest
common size is off by more than the tolerance.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from preflight.launch.allreduce_sweep import sweep_plan, sweep_run_from_launch  # noqa: E402
from preflight.launch.torchrun import launch  # noqa: E402
from preflight.parse.nccl_tests import parse_nccl_tests  # noqa: E402
from preflight.probe.command import run_command  # noqa: E402
from preflight.workers.common import RUN_DIR_ENV, WorkerContext, worker_main  # noqa: E402

PLAIN_ITERS = 20
PLAIN_WARMUP = 2


def plain_loop_busbw(ctx: WorkerContext, nbytes: int) -> float:
    """The independent CPU measurement: warm up, barrier, time PLAIN_ITERS calls, busbw inline."""
    import torch
    import torch.distributed as dist

    tensor = torch.zeros(nbytes // 4, dtype=torch.float32)
    for _ in range(PLAIN_WARMUP):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(PLAIN_ITERS):
        dist.all_reduce(tensor)
    seconds = (time.perf_counter() - start) / PLAIN_ITERS
    n = ctx.world_size
    return nbytes / seconds / 1e9 * 2 * (n - 1) / n


def paired_run(ctx: WorkerContext) -> dict[str, Any]:
    """Inside torchrun: alternate preflight's measurement and the plain loop, size by size."""
    from preflight.workers.allreduce import measure_size

    sizes = [int(s) for s in ctx.args[0].split(",")]
    rounds, warmup, max_iters, min_iters = (int(v) for v in ctx.args[1:5])
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for _ in range(rounds):
        ours.append({})
        theirs.append({})
        for nbytes in sizes:
            ctx.progress(f"preflight measurement of {nbytes} bytes")
            size, _iters = measure_size(ctx, nbytes, warmup, max_iters, min_iters)
            ours[-1][str(nbytes)] = size.busbw_gbps
            ctx.progress(f"plain loop of {nbytes} bytes")
            theirs[-1][str(nbytes)] = plain_loop_busbw(ctx, nbytes)
    return {"ours": ours, "theirs": theirs}


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


def _gpu_rounds(
    nproc: int, plan: Any, rounds: int, binary: str
) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    ours, theirs = [], []
    for _ in range(rounds):  # alternate the two so both see the same host load
        result = launch("preflight.workers.allreduce", nproc=nproc, deadline_s=plan.wanted_s * 2, args=plan.args(),
                        run_dir=Path(tempfile.mkdtemp(prefix="bench-allreduce-")))
        sweep = sweep_run_from_launch("preflight", result, {}, True)
        if not sweep.ok:
            raise SystemExit(f"preflight's sweep did not complete: {result.describe()}")
        ours.append({s.bytes: s.busbw_gbps for s in sweep.sizes})
        theirs.append(nccl_tests(binary, nproc, sorted(ours[-1])))
    return ours, theirs


def _cpu_rounds(nproc: int, plan: Any, rounds: int) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    args = [",".join(map(str, plan.sizes)), str(rounds), str(plan.warmup), str(plan.iters), "5"]
    result = launch("benchmarks.allreduce_vs_independent", nproc=nproc, deadline_s=plan.wanted_s * rounds * 2,
                    args=args, env_overrides={"PYTHONPATH": str(REPO)},
                    run_dir=Path(tempfile.mkdtemp(prefix="bench-allreduce-")))
    if not result.ok:
        raise SystemExit(f"the paired measurement did not complete: {result.describe()}")
    payload = result.ranks[0].result["result"]
    convert = lambda rounds_: [{int(k): v for k, v in r.items()} for r in rounds_]  # noqa: E731
    return convert(payload["ours"]), convert(payload["theirs"])


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
    started = time.monotonic()
    if gpus > 0:
        binary = os.environ.get("NCCL_TESTS_BIN") or shutil.which("all_reduce_perf")
        if not binary:
            print("GPU node without nccl-tests' all_reduce_perf on PATH (set NCCL_TESTS_BIN): nothing to compare with")
            return 1
        label = f"nccl-tests {binary}"
        ours_rounds, theirs_rounds = _gpu_rounds(nproc, plan, args.rounds, binary)
    else:
        label = f"plain gloo loop ({PLAIN_ITERS} back-to-back calls), alternated with preflight's per size"
        ours_rounds, theirs_rounds = _cpu_rounds(nproc, plan, args.rounds)
    ours, theirs = _combine(ours_rounds, args.stat), _combine(theirs_rounds, args.stat)

    print(f"ranks {nproc}, {'nccl' if gpus else 'gloo'}, profile {args.profile}, {args.rounds} rounds, "
          f"{args.stat} per size, {time.monotonic() - started:.1f} s in all")
    print(f"independent: {label}")
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
    if os.environ.get(RUN_DIR_ENV):  # started by the launcher: this process is a rank
        worker_main(paired_run)
    else:
        sys.exit(main())
