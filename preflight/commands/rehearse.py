"""``preflight rehearse [options] -- train.py [its arguments]``: the user's own training script,
a few steps on 1 rank, on 2, and on every GPU, and what the extra GPUs buy.

Each size is one ``torchrun --standalone --nproc-per-node=K`` launch of the script with its own
arguments, in the current directory and in the job's interpreter (the one its command names, or
``--python``), under a hard deadline (``--timeout`` per size). The ranks run
``preflight/rehearse/bootstrap.py``, which counts optimizer steps and stops every rank at the same
one. The run is a pytest session of preflight's plugin (``preflight.rehearse.checks``: one check
per size and a scaling check) with preflight's own reporter, so the live line, the verdict block,
the exit codes and the JSON, HTML and JUnit reports are those of any preflight run; the table is
printed before the verdict and kept in the report's ``rehearsal`` section. The reports go to
``reports/rehearse/`` unless ``--report-dir`` says otherwise, so a node report beside them is never
replaced. Exit codes: 0 ready or degraded (1 with --strict), 1 not ready, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from preflight.cli import JUNIT_NAME, _check_junit_path, _check_report_dir, _run_pytest, _usage_line, plugin_args
from preflight.errors import UsageError
from preflight.judge.strategies import STRATEGIES
from preflight.options import (
    UsageParser,
    argparse_type,
    join_negative_values,
    positive_float,
    positive_int,
    python_interpreter,
    seconds,
)
from preflight.parse.quantity import parse_param_count
from preflight.probe.job_torch import JobTorch
from preflight.report.redact import redact_text
from preflight.rehearse import checks as rehearse_checks
from preflight.settings import Settings
from preflight.rehearse.plan import (
    CPU_RANKS,
    DEFAULT_MEASURE_FOR_S,
    DEFAULT_STALL_S,
    DEFAULT_STEPS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WARMUP,
    LAUNCHERS,
    TORCH_RUN_MODULE,
    RehearsalPlan,
    busbw_from_report,
    check_script,
    check_sizes,
    default_sizes,
    job_command,
    launcher_sizes,
    parse_sizes,
    split_command,
)

_VALUE_OPTIONS = ("--nproc", "--steps", "--warmup", "--timeout", "--stall-timeout", "--model-params", "--grad-bytes",
                  "--price-per-hour", "--python", "--step-function", "--measure-for")
DEFAULT_REPORT_DIR = Path("reports") / "rehearse"  # beside a node report in ./reports, never over it
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
                        help=f"measured steps per size at least, after the warm-up (default {DEFAULT_STEPS}); the "
                        "window also lasts 3 s at least, and grows while its step rate's spread is unknown")
    parser.add_argument("--measure-for", type=argparse_type(positive_float), default=DEFAULT_MEASURE_FOR_S,
                        metavar="SECONDS", help="the longest a size's measured window may grow to learn its spread "
                        f"(default {DEFAULT_MEASURE_FOR_S:.0f}; a noisy machine uses all of it)")
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
    parser.add_argument("--python", type=argparse_type(python_interpreter), metavar="PATH",
                        help="the job's interpreter, for a command that names none (a bare train.py); default: the "
                        "one the command names (python train.py, /venv/bin/python -m torch.distributed.run, the "
                        "interpreter in torchrun's first line), else preflight's own")
    parser.add_argument("--step-function", metavar="NAME",
                        help="for a script that updates its parameters itself (no torch.optim optimizer): the "
                        "script's function (Class.method for a method) called once per training step; each call "
                        "counts as one step. A script can also call step() from the module preflight_rehearsal, "
                        "which exists only under rehearse")
    parser.add_argument("--report-dir", type=Path, default=DEFAULT_REPORT_DIR, metavar="DIR",
                        help="where preflight.json, preflight.html, JUnit XML and the rank logs go (default "
                        f"./{DEFAULT_REPORT_DIR}, so a node report in ./reports stays)")
    parser.add_argument("--junitxml", metavar="PATH", help=f"JUnit XML path (default REPORT_DIR/{JUNIT_NAME})")
    parser.add_argument("--strict", action="store_true", help="DEGRADED makes the exit code 1")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per check as it runs")
    return parser


def usable_cores() -> int:
    """The cores this process may use (CPU ranks share them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class Capacity(NamedTuple):
    """What the plan needs of the node: the GPUs the job's torch sees, the cores this process may use, and the
    job's torch answer itself (the run then reuses it instead of asking the interpreter again)."""

    gpus: int
    cores: int
    torch: JobTorch | None = None


def node_capacity(python: str) -> Capacity:
    """GPUs the job's torch sees in the job's interpreter (what --nproc-per-node=gpu would start) and the cores
    this process may use. An interpreter that does not answer as Python does is bad input; one without torch is
    the job's own failure, which the launch shows."""
    from preflight.node.torch import read_job_torch
    from preflight.node.transports import Transports

    torch = read_job_torch(Transports(python=python))
    if torch.problem and not torch.problem.startswith("import torch failed"):
        raise UsageError(f"the job's interpreter {python} did not answer preflight's torch probe: {torch.problem}")
    return Capacity(torch.gpus, usable_cores(), torch)


def check_step_function(script: Path, name: str) -> None:
    """``--step-function NAME`` names a function (or ``Class.method``) the script defines."""
    from preflight.rehearse.bootstrap import decorate_step_function

    if not name.replace(".", "").replace("_", "").isalnum() or name.count(".") > 1:
        raise UsageError(f"--step-function takes a function name or Class.method, got {name!r}")
    try:
        _, found = decorate_step_function(script.read_bytes(), str(script), name)
    except (OSError, SyntaxError, ValueError) as exc:
        raise UsageError(f"--step-function: cannot read {script.name}: {exc}") from None
    if not found:
        raise UsageError(f"--step-function {name}: {script.name} defines no function of that name")


def make_plan(argv: list[str], cwd: Path, node: Callable[[str], Capacity] = node_capacity,
              announce: Callable[[str], None] | None = None) -> tuple[RehearsalPlan, argparse.Namespace]:
    """Validate everything the user gave, before anything runs (the cheap checks before torch loads;
    ``announce`` hears what is asked of the job's interpreter before it is asked)."""
    head, tail = split_command(argv)
    args = build_parser().parse_args(join_negative_values(head, _VALUE_OPTIONS))
    if announce is not None and (Path(tail[0]).name in LAUNCHERS or TORCH_RUN_MODULE[1] in tail[1:3]):
        announce("preflight rehearse: reading the torchrun line with torch's own parser...")  # torch loads now
    command = job_command(tail)
    if command.python and args.python and os.path.realpath(command.python) != os.path.realpath(args.python):
        raise UsageError(f"the command runs {command.python} but --python says {args.python}: give one of them")
    python = command.python or args.python or sys.executable
    script = check_script(command.script, cwd)
    if args.step_function:
        check_step_function(script, args.step_function)
    if args.junitxml:
        _check_junit_path(Path(args.junitxml).resolve())
    if announce is not None:
        announce(f"preflight rehearse: asking {python} how many GPUs the job's torch sees...")
    gpus, cores, torch = node(python)
    capacity = launcher_sizes(command.nproc_per_node, gpus, cores) or gpus or min(CPU_RANKS, cores)
    sizes = args.nproc or default_sizes(capacity)
    check_sizes(sizes, gpus, cores)
    busbw, source = busbw_from_report(args.from_report) if args.from_report else (None, None)
    plan = RehearsalPlan(
        script=script, script_text=command.script, args=command.args, cwd=cwd, sizes=tuple(sizes),
        warmup=args.warmup, steps=args.steps, timeout_s=args.timeout, stall_s=args.stall_timeout, on_gpu=gpus > 0,
        model_params=args.model_params, grad_bytes=args.grad_bytes, strategy=args.strategy,
        price_per_hour=args.price_per_hour, busbw_gbps=busbw, busbw_source=source, sweep=not args.no_sweep,
        keep_going=args.keep_going, launch_command=tuple(tail) if command.nproc_per_node is not None else (),
        python=python, cpu_cores=cores, step_function=args.step_function, measure_for_s=args.measure_for,
        job_torch=torch)
    return plan, args


def pytest_argv(args: argparse.Namespace, report_dir: Path) -> list[str]:
    """The session: the rehearsal checks under preflight's plugin (the settings travel as a value)."""
    where = Path(rehearse_checks.__file__).resolve().parent
    return [str(where), "--rootdir", str(where), "-c", os.devnull, "-p", "no:cacheprovider", *plugin_args(),
            *(["-v"] if args.verbose else ["--preflight-terminal"]), "-rN", "--tb=no", "--no-header",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", f"--junitxml={args.junitxml or report_dir / JUNIT_NAME}"]


def run_settings(plan: RehearsalPlan, args: argparse.Namespace, report_dir: Path) -> Settings:
    """The plugin's settings for the session: the overall deadline from the plan, the job's interpreter
    (the report's torch facts are its), --strict."""
    overall = len(plan.sizes) * (plan.timeout_s + PER_LAUNCH_SLACK_S) + SWEEP_ALLOWANCE_S
    try:
        timeout = seconds(f"{overall:.0f}")
    except ValueError as exc:
        raise UsageError(f"the rehearsal's overall deadline: {exc}") from None
    return Settings.from_options({"report_dir": str(report_dir), "timeout": timeout, "python": plan.python,
                                  "strict": args.strict})


def plan_line(plan: RehearsalPlan) -> str:
    """``rehearse train.py --lr 1 on 1 and 2 CPU ranks (gloo) with /venv/bin/python: ...``."""
    import shlex

    sizes = " and ".join(map(str, plan.sizes)) if len(plan.sizes) < 3 else \
        ", ".join(map(str, plan.sizes[:-1])) + f" and {plan.sizes[-1]}"
    where = "GPU ranks" if plan.on_gpu else "CPU ranks (gloo: torch sees no GPU)"
    marked = f"; each call of {plan.step_function} is a step" if plan.step_function else ""
    command = redact_text(shlex.join([plan.script_text, *plan.args]))  # a --hf_token in the script's arguments
    return (f"rehearse {command} on {sizes} {where} with {plan.python}: "
            f"{plan.warmup} warm-up + at least {plan.steps} measured steps per size{marked}")


def main(argv: list[str]) -> int:
    """Rehearse, print the table and the verdict; return the exit code."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    if "-h" in head or "--help" in head:
        build_parser().print_help()
        return 0
    cwd = Path.cwd()
    plan, args = make_plan(argv, cwd, announce=lambda text: print(text, flush=True))
    report_dir = args.report_dir.resolve()
    _check_report_dir(report_dir)
    print(plan_line(plan), flush=True)
    import pytest

    from preflight.plugin import PreflightRun
    from preflight.rehearse.session import RehearsalSession

    report_json = report_dir / "preflight.json"
    report_json.unlink(missing_ok=True)
    session = RehearsalSession(plan, report_dir)
    run = PreflightRun(run_settings(plan, args, report_dir), job_torch=plan.job_torch)
    code, errors = _run_pytest(pytest_argv(args, report_dir), plugins=[session, run])
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(_usage_line(errors))
    sys.stderr.write(errors)
    result = run.result()
    if result is None or not result.reported:
        raise UsageError(f"the rehearsal ended (pytest exit code {int(code)}) without writing {report_json}")
    if not result.shown:  # preflight's reporter ends with the verdict already
        print(f"{result.verdict}  reports: {result.json_path}, {result.html_path}")
    return result.exit_code
