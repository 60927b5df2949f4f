"""What a rehearsal costs: the bootstrap's hook per optimizer step, and the wall time it adds.

Usage: python benchmarks/rehearse_overhead.py [--steps 20000] [--rounds 5] [--nproc 1,2]
       [--warmup 5] [--measured 50] [--launch-rounds 3]

1. Per step, in this process: a trivial optimizer step (SGD on one parameter whose gradient is
   set) and a small real step (forward, backward and step of a Linear), each timed in rounds
   alternately without and with the bootstrap's post hook registered (the hook as it runs in a
   rank: coalescing by parameter group, the nested-step check, the first step's parameter count).
   Timed in this thread's CPU time, so other processes' load on a shared host does not count.
   Prints the medians and the difference per step.
2. Wall time, per rank count: ``preflight rehearse --nproc K --warmup W --steps S --no-sweep --
   trivial_train.py`` (the bootstrap stops it, at the step the window's spread asked for) against a
   bare ``torchrun --standalone --nproc-per-node=K trivial_train.py --steps N`` with N the steps the
   rehearsal ran (the script stops itself), alternating, medians of ``--launch-rounds``. The
   difference is what rehearsal adds beyond the script's own run: the pytest session and its reports,
   the bootstrap, the stop. The rehearsal's own report gives the split (time to the first step, the
   measured steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

from preflight.rehearse import bootstrap  # noqa: E402

TRIVIAL = REPO / "tests" / "data" / "rehearse" / "trivial_train.py"


def _per_step(step: Callable[[], object], steps: int) -> float:
    """CPU seconds of this thread per call: other processes' load on a shared host does not count."""
    began = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - began) / steps


def hook_cost(steps: int, rounds: int) -> None:
    """Median seconds per step with no hook, with an empty hook and with the bootstrap's hook (the
    rounds interleaved so a burst of load from elsewhere hits all three alike)."""
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.ones(1)
    trivial = torch.optim.SGD([param], lr=0.0)
    model = torch.nn.Linear(64, 64)
    real_opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.ones(8, 64)

    def real() -> None:
        real_opt.zero_grad()
        model(x).sum().backward()
        real_opt.step()

    def empty(optimizer: object, args: object, kwargs: object) -> None:
        return None

    with tempfile.TemporaryDirectory() as tmp:
        state = bootstrap.StepCounter(Path(tmp), rank=0, script="bench", warmup=0, steps=10**12, stall_s=1e9,
                                      deadline=None, launched=None, parent_pid=None, capacity=steps + 2)
        cases = (("trivial SGD.step", trivial.step, steps), ("Linear fwd+bwd+step", real, steps // 10))
        for name, step, count in cases:
            timings: dict[str, list[float]] = {"none": [], "empty": [], "rehearsal": []}
            for _ in range(rounds):
                timings["none"].append(_per_step(step, count))
                for label, hook in (("empty", empty), ("rehearsal", state.post_hook)):
                    handle = register_optimizer_step_post_hook(hook)
                    timings[label].append(_per_step(step, count))
                    handle.remove()
            none, blank, ours = (statistics.median(timings[k]) for k in ("none", "empty", "rehearsal"))
            print(f"{name:20} no hook {none * 1e6:8.2f} us  empty hook {blank * 1e6:8.2f} us  rehearsal hook "
                  f"{ours * 1e6:8.2f} us  -> the hook's body adds {(ours - blank) * 1e6:5.2f} us per step "
                  f"({(ours - none) / none:+.1%} of this step)")


def _timed(argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    began = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - began
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-2000:]}"
                         f"{result.stderr[-2000:]}")
    return elapsed


def wall_time(sizes: list[int], warmup: int, measured: int, rounds: int) -> None:
    """Bare torchrun against preflight rehearse on the same script and step count."""
    for nproc in sizes:
        bare, rehearsed, firsts, windows, runs = [], [], [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp)
            for _ in range(rounds):
                rehearsed.append(_timed([sys.executable, "-m", "preflight", "rehearse", "--nproc", str(nproc),
                                         "--warmup", str(warmup), "--steps", str(measured), "--no-sweep",
                                         "--report-dir", str(cwd / "reports"), "--", str(TRIVIAL)], cwd))
                report = json.loads((cwd / "reports" / "preflight.json").read_text())
                size = report["rehearsal"]["sizes"][0]
                bare.append(_timed([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                    f"--nproc-per-node={nproc}", str(TRIVIAL), "--steps",
                                    str(max(size["steps_reached"]) + 1)], cwd))
                firsts.append(size["first_step_s"])
                windows.append(size["measured_steps"] / size["steps_per_s"])
                runs.append(report["run"]["duration_s"])
        b, r = statistics.median(bare), statistics.median(rehearsed)
        print(f"{nproc} rank{'s' if nproc > 1 else ' '}: bare torchrun {b:6.2f} s   preflight rehearse {r:6.2f} s   "
              f"adds {r - b:5.2f} s ({r / b:.2f}x)   [rehearsal: first step {statistics.median(firsts):.2f} s after "
              f"launch, the window {statistics.median(windows) * 1000:.1f} ms, pytest session "
              f"{statistics.median(runs):.2f} s]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nproc", default="1,2")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--measured", type=int, default=50)
    parser.add_argument("--launch-rounds", type=int, default=3)
    args = parser.parse_args()
    print("Per optimizer step (medians of rounds, this process):")
    hook_cost(args.steps, args.rounds)
    if args.launch_rounds:
        print("Wall time (medians of rounds):")
        wall_time([int(k) for k in args.nproc.split(",") if k], args.warmup, args.measured, args.launch_rounds)


if __name__ == "__main__":
    main()
