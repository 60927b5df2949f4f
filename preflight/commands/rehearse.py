"""``preflight rehearse [options] -- train.py [its arguments]``: the user's own training script,
a few steps on 1 rank, on 2, and on every GPU, and what the extra GPUs buy.

Each size is one ``torchrun --standalone --nproc-per-node=K`` launch of the script with its own
arguments, in the current directory, under a hard deadline (``--timeout`` per size). The ranks
run ``preflight/rehearse/bootstrap.py``, which counts optimizer steps and stops every rank at the
same one. The run is a pytest session of preflight's plugin (``preflight.rehearse.checks``: one
check per size and a scaling check), so the verdict, the exit codes and the JSON, HTML and JUnit
reports are those of any preflight run; the table is printed at the end and kept in the report's
``rehearsal`` section. Exit codes: 0 ready or degraded (1 with --strict), 1 not ready, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from preflight.cli import JUNIT_NAME, _check_report_dir, _run_pytest, _usage_line, plugin_args
from preflight.errors import UsageError
from preflight.judge.strategies import STRATEGIES
from preflight.options import UsageParser, argparse_type, join_negative_values, positive_float, positive_int
from preflight.parse.quantity import parse_param_count
from preflight.rehearse import checks as rehearse_checks
from preflight.rehearse.plan import (
    CPU_RANKS,
    DEFAULT_STALL_S,
    DEFAULT_STEPS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WARMUP,
    RehearsalPlan,
    busbw_from_report,
    check_script,
    check_sizes,
    default_sizes,
    launcher_sizes,
    parse_sizes,
    script_and_args,
    split_command,
)

_VALUE_OPTIONS = ("--nproc", "--steps", "--warmup", "--timeout", "--stall-timeout", "--model-params", "--grad-bytes",
                  "--price-per-hour")
SWEEP_ALLOWANCE_S = 120.0  # the all-reduce sweep for the prediction
PER_LAUNCH_SLACK_S = 25.0  # kill grace and torchrun's exit on top of each size's deadline


def non_negative_int(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"expected a number >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The options of ``preflight rehearse`` (everything after ``--`` is the script's)."""
    parser = UsageParser(
        prog="preflight rehearse",
        usage="preflight rehearse [options] -- train.py [its arguments]",
        description="Run your own training script for a few steps on 1 rank, on 2 and on every GPU under torchrun, "
        "and say what scaling you will get: READY, DEGRADED (scaling well short of linear) or NOT READY.",
        epilog="The command after -- may also be your torchrun line (torchrun --nproc-per-node=8 train.py ...). "
        "Exit codes: 0 ready or degraded, 1 not ready (or degraded with --strict), 2 bad input.",
    )
    parser.add_argument("--nproc", type=argparse_type(parse_sizes), metavar="K[,K]",
                        help="rank counts to run (default: 1, 2 when there are more than 2 GPUs, and all visible GPUs; "
                        f"without GPUs 1 and {CPU_RANKS} CPU ranks on gloo)")
    parser.add_argument("--steps", type=argparse_type(positive_int), default=DEFAULT_STEPS, metavar="N",
                        help=f"measured steps per size, after the warm-up (default {DEFAULT_STEPS})")
    parser.add_argument("--warmup", type=argparse_type(non_negative_int), default=DEFAULT_WARMUP, metavar="N",
                        help=f"steps before measuring: compile, allocator and cuDNN warm-up (default {DEFAULT_WARMUP})")
    parser.add_argument("--timeout", type=argparse_type(positive_float), default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"hard deadline for each size, start to last step (default {DEFAULT_TIMEOUT_S:.0f})")
    parser.add_argument("--stall-timeout", type=argparse_type(positive_float), default=DEFAULT_STALL_S,
                        metavar="SECONDS", help="a rank with no step for this long after its first one is hung "
                        f"(default {DEFAULT_STALL_S:.0f}; raise it when a checkpoint save takes longer)")
    parser.add_argument("--model-params", type=argparse_type(parse_param_count), metavar="N",
                        help="parameters of the real model (7B, 350M) for the communication estimate (default: read "
                        "from the optimizer on rank 0)")
    parser.add_argument("--grad-bytes", type=argparse_type(positive_float), metavar="B",
                        help="bytes per gradient element on the wire (default: the optimizer's parameter dtype; 2 "
                        "for bf16/fp16 gradients)")
    parser.add_argument("--strategy", choices=STRATEGIES, help="the job's strategy for the communication estimate "
                        "(default: fsdp for DTensor parameters, zero2 under DeepSpeed, else ddp)")
    parser.add_argument("--price-per-hour", type=argparse_type(positive_float), metavar="USD",
                        help="what the node costs per hour: dollars per 1,000 steps at each size")
    parser.add_argument("--from-report", type=Path, metavar="FILE",
                        help="take the all-reduce busbw from this preflight.json instead of measuring it")
    parser.add_argument("--no-sweep", action="store_true", help="do not run the all-reduce sweep for the estimate")
    parser.add_argument("--keep-going", action="store_true",
                        help="run the larger sizes even after a smaller one failed")
    parser.add_argument("--report-dir", type=Path, default=Path("reports"), metavar="DIR",
                        help="where preflight.json, preflight.html, JUnit XML and the rank logs go (default ./reports)")
    parser.add_argument("--junitxml", metavar="PATH", help=f"JUnit XML path (default REPORT_DIR/{JUNIT_NAME})")
    parser.add_argument("--strict", action="store_true", help="DEGRADED makes the exit code 1")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per check as it runs")
    return parser


def node_capacity() -> tuple[int, int]:
    """GPUs the job's torch sees (what --nproc-per-node=gpu would start) and the cores this process may use."""
    from preflight.node.torch import read_job_torch
    from preflight.node.transports import Transports

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return read_job_torch(Transports()).gpus, cores


def make_plan(argv: list[str], cwd: Path,
              node: Callable[[], tuple[int, int]] = node_capacity) -> tuple[RehearsalPlan, argparse.Namespace]:
    """Validate everything the user gave, before anything runs (the cheap checks before torch loads)."""
    head, tail = split_command(argv)
    args = build_parser().parse_args(join_negative_values(head, _VALUE_OPTIONS))
    script_text, script_args, launcher_nproc = script_and_args(tail)  # torch loads only for a torchrun line
    script = check_script(script_text, cwd)
    gpus, cores = node()
    capacity = launcher_sizes(launcher_nproc, gpus, cores) or gpus or min(CPU_RANKS, cores)
    sizes = args.nproc or default_sizes(capacity)
    check_sizes(sizes, gpus, cores)
    busbw, source = busbw_from_report(args.from_report) if args.from_report else (None, None)
    plan = RehearsalPlan(
        script=script, script_text=script_text, args=tuple(script_args), cwd=cwd, sizes=tuple(sizes),
        warmup=args.warmup, steps=args.steps, timeout_s=args.timeout, stall_s=args.stall_timeout, on_gpu=gpus > 0,
        model_params=args.model_params, grad_bytes=args.grad_bytes, strategy=args.strategy,
        price_per_hour=args.price_per_hour, busbw_gbps=busbw, busbw_source=source, sweep=not args.no_sweep,
        keep_going=args.keep_going, launch_command=tuple(tail) if launcher_nproc is not None else ())
    return plan, args


def pytest_argv(plan: RehearsalPlan, args: argparse.Namespace, report_dir: Path) -> list[str]:
    """The session: the rehearsal checks under preflight's plugin, the overall deadline from the plan."""
    where = Path(rehearse_checks.__file__).resolve().parent
    overall = len(plan.sizes) * (plan.timeout_s + PER_LAUNCH_SLACK_S) + SWEEP_ALLOWANCE_S
    argv = [str(where), "--rootdir", str(where), "-c", os.devnull, "-p", "no:cacheprovider", *plugin_args(),
            "-v" if args.verbose else "-q", "-rN", "--tb=no", "--no-header",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", f"--junitxml={args.junitxml or report_dir / JUNIT_NAME}",
            f"--preflight-report-dir={report_dir}", f"--preflight-timeout={overall:.0f}"]
    return argv + (["--preflight-strict"] if args.strict else [])


def main(argv: list[str]) -> int:
    """Rehearse, print the table and the verdict; return the exit code."""
    import pytest

    from preflight.rehearse.session import RehearsalSession

    head = argv[: argv.index("--")] if "--" in argv else argv
    if "-h" in head or "--help" in head:
        build_parser().print_help()
        return 0
    cwd = Path.cwd()
    plan, args = make_plan(argv, cwd)
    report_dir = args.report_dir.resolve()
    _check_report_dir(report_dir)
    report_json = report_dir / "preflight.json"
    report_json.unlink(missing_ok=True)
    session = RehearsalSession(plan, report_dir)
    code, errors = _run_pytest(pytest_argv(plan, args, report_dir), plugins=[session])
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(_usage_line(errors))
    sys.stderr.write(errors)
    try:
        report = json.loads(report_json.read_text())
    except (OSError, ValueError):
        raise UsageError(f"the rehearsal ended (pytest exit code {int(code)}) without writing {report_json}") from None
    print(f"{report['verdict']}  reports: {report_json}, {report_dir / 'preflight.html'}")
    return int(report["run"]["exit_code"])
