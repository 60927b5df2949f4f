"""preflight's time to a verdict as a multiple of one bare torchrun launch, measured in the same run.

    python benchmarks/launch_ratio.py [--runs 3] [--nproc N] [--baseline CHECKOUT] [-- extra preflight options]

Each round runs, one after the other: a bare launch (``benchmarks/bare_launch.py``: start, join the
group, one all-reduce, leave), the same with one DDP step (``bare-ddp``: what any DDP job pays before its
first step, DDP's constructor importing ``torch._dynamo``), ``preflight --profile quick`` and
``preflight --profile full``, so a noisy machine slows them all alike. Prints every run, the medians
(wall and CPU seconds of the whole process tree) and the ratios. Targets on a 2-core CPU machine
(issue 27): quick <= 1.2x, full <= 2.0x.
With DeepSpeed installed the full profile also rehearses ZeRO-1/2/3, so each round also runs the full
profile as it is without it (``--strategy ddp,fsdp``), reported as ``full-no-zero``.
On a GPU node it runs as is (the bare launch then uses NCCL on every GPU).

``--baseline CHECKOUT`` (a directory holding another version's ``preflight/`` package, e.g. from
``git archive <commit> | tar -x -C DIR``) also runs both profiles of that version in every round, so
a change is measured before and after on the same noisy machine (rows ``quick@base``, ``full@base``).

Every run prints its wall and CPU seconds (user+sys of the whole process tree, from
``RUSAGE_CHILDREN``), and the end both ratios and the load average: on a machine others share the
CPU ratio moves far less than the wall one. On 2 cores the launch is CPU-bound, so the wall ratio
cannot go much below the CPU ratio. Where the CPU goes (2 ranks, torch 2.13 CPU, DeepSpeed 0.19.8,
the op cache warm; per process from ``/proc``, per phase from py-spy):

- bare (7-8 CPU-s): torchrun's agent imports torch (2.3-3 CPU-s), each rank imports torch (2.4).
- quick (+2.7): the preflight process (1.8 CPU-s, 1.1 of it before the launch can start: imports,
  pytest's start-up and collection), the NVML child (0.1), and in each rank DDP's constructor, which
  imports ``torch._dynamo`` (``get_optimize_ddp_mode``), and the short sweep (+0.9 per rank).
- full (+14): per rank about 6 more: ``torch._dynamo``, ``torch._inductor`` (every ZeRO engine imports
  DeepSpeed's Muon optimizer, which ``@compiler.compile``s at import), DeepSpeed itself, FSDP2's
  steps and DCP round trip, three ZeRO engines. No torch probe and no op-build child run: rank 0
  answers the job's torch, and the op cache answers when the ops are built (also while another
  preflight holds the folder: the build waits for it instead of starting a child).

An editable install under ``PYTHONDONTWRITEBYTECODE=1`` (this machine) compiles preflight's ~120
modules in every run (about 0.2 CPU-s before the launch); a wheel install has them compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds of the children, exit code, last stdout line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return wall, cpu, proc.returncode, last


def bare(nproc: int | None, *script_args: str) -> tuple[float, float, int, str]:
    ranks = f"--nproc-per-node={nproc}" if nproc else "--nproc-per-node=gpu"
    if nproc is None and not has_gpu():
        ranks = "--nproc-per-node=2"
    return _timed([sys.executable, "-m", "torch.distributed.run", "--standalone", ranks, str(HERE / "bare_launch.py"),
                   *script_args])


def has_gpu() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() not in ("", "0")


def preflight(profile: str, extra: list[str], checkout: Path | None = None) -> tuple[float, float, int, str]:
    out = tempfile.mkdtemp(prefix=f"preflight-ratio-{profile}-")
    env = None if checkout is None else {"PYTHONPATH": str(checkout)}
    wall, cpu, code, last = _timed([sys.executable, "-m", "preflight", "--report-dir", out, "--profile", profile,
                                    *extra], env)
    verdict = json.loads((Path(out) / "preflight.json").read_text())["verdict"] if code in (0, 1) else last
    return wall, cpu, code, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to measure in the same rounds")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.nproc:
        extra = ["--nproc", str(args.nproc), *extra]
    if not has_gpu():
        extra = ["--cpu", *extra]  # no GPU here: the CPU rehearsal the bare launch is compared with
    rows: dict[str, list[tuple[float, float, int, str]]] = {"bare": [], "bare-ddp": [], "quick": [], "full": []}
    no_zero = has_deepspeed() and "--strategy" not in extra
    if no_zero:
        rows["full-no-zero"] = []
    if args.baseline is not None:
        rows["quick@base"], rows["full@base"] = [], []
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs",
          flush=True)
    for round_ in range(args.runs):
        rows["bare"].append(bare(args.nproc))
        rows["bare-ddp"].append(bare(args.nproc, "--ddp"))
        rows["quick"].append(preflight("quick", extra))
        rows["full"].append(preflight("full", extra))
        if no_zero:  # the full profile as it is without DeepSpeed installed: DDP, P2P, sweeps, FSDP2
            rows["full-no-zero"].append(preflight("full", [*extra, "--strategy", "ddp,fsdp"]))
        if args.baseline is not None:
            rows["quick@base"].append(preflight("quick", extra, args.baseline))
            rows["full@base"].append(preflight("full", extra, args.baseline))
        print(f"round {round_ + 1}: " + "  ".join(f"{k} {v[-1][0]:.2f} s / {v[-1][1]:.2f} CPU-s ({v[-1][3]})"
                                                 for k, v in rows.items()), flush=True)
    medians = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
    print(f"{'command':12s} {'wall (median)':>14s} {'CPU (median)':>13s}")
    for name, (wall, cpu) in medians.items():
        print(f"{name:12s} {wall:12.2f} s {cpu:11.2f} s")
    for label, column in (("wall", 0), ("CPU ", 1)):
        base = medians["bare"][column]
        print(f"{label}: " + "   ".join(f"{name} / bare = {medians[name][column] / base:.2f}x"
                                       for name in rows if name != "bare"))
    ddp_cpu = medians["bare-ddp"][1]
    print(f"CPU : quick / bare-ddp = {medians['quick'][1] / ddp_cpu:.2f}x   full / bare-ddp = "
          f"{medians['full'][1] / ddp_cpu:.2f}x (preflight's own cost beside a launch that takes a DDP step)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


def has_deepspeed() -> bool:
    """Whether this interpreter has DeepSpeed (then the full profile also rehearses ZeRO-1/2/3)."""
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


if __name__ == "__main__":
    main()
