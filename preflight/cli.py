"""The ``preflight`` command: a thin front end over ``pytest.main`` and the sub-commands.

``preflight [options] [-- pytest args]`` runs every check of ``preflight.checks`` with the plugin
and ends with one line: READY, DEGRADED or NOT READY and the reports written. ``preflight NAME ...``
runs the sub-command ``preflight.commands.NAME`` (``topology``, ``nccl-log``, ``size``, ...).
Exit codes: 0 ready or degraded, 1 not ready (or degraded with --strict), 2 could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import importlib
import importlib.metadata
import os
import pkgutil
import sys
import textwrap
from pathlib import Path

import preflight
import preflight.commands
from preflight.errors import EXIT_USAGE, UsageError
from preflight.inputs import shown
from preflight.locations import checks_dir, unwritable
from preflight.options import UsageParser, argparse_kwargs, join_negative_values
from preflight.parse.quantity import QuantityError
from preflight.settings import OPTIONS, Settings

JUNIT_NAME = "preflight-junit.xml"

HELP_GROUPS = ("run", "the job's plan", "reports", "fleet", "advanced")
"""The sections of ``preflight --help``, in order, after the sub-commands."""
OPTION_GROUPS = {
    "run": ("profile", "cpu", "nproc", "python", "expect-gpus", "strategy", "with", "slow", "strict", "timeout"),
    "the job's plan": ("model-params", "bytes-per-param", "largest-layer-params", "headroom", "checkpoint-dir",
                       "trainable-params", "lora-rank", "hidden-size", "num-layers", "lora-matrices", "base-bits",
                       "ds-config", "launch", "script"),
    "reports": ("report-dir",),
    "fleet": ("prometheus", "oneline"),
}
"""Where each declared option is listed in ``--help``; an option named nowhere here is under "advanced"."""
COMMAND_SUMMARIES = {
    "rehearse": "run your own training script a few steps on 1, 2 and all GPUs: step time and scaling",
    "size": "plan a model's memory per GPU for each strategy before renting a node",
    "topology": "explain an nvidia-smi topo -m capture, or this node's",
    "nccl-log": "explain a saved NCCL_DEBUG log",
    "explain": "what a verdict code means, why it matters and the fix (--list: every code)",
    "report": "re-render a saved preflight.json as HTML, or print its one-line status",
    "merge": "one fleet report from many nodes' preflight.json",
}
"""One line per sub-command for ``--help``, in the order shown; others follow with their docstring's summary."""


def subcommands() -> dict[str, str]:
    """``nccl-log`` -> ``preflight.commands.nccl_log`` for every module in preflight.commands."""
    return {m.name.replace("_", "-"): f"preflight.commands.{m.name}"
            for m in pkgutil.iter_modules(preflight.commands.__path__)}


def build_parser() -> argparse.ArgumentParser:
    """The run's options: every option of :data:`preflight.settings.OPTIONS`, plus pytest's selection flags."""
    commands = subcommands()
    parser = UsageParser(
        prog="preflight",
        usage="preflight [OPTIONS] [-- PYTEST ARGS]\n       preflight COMMAND [ARGS]   (preflight COMMAND --help)",
        description=textwrap.fill("Is this multi-GPU node ready for a long torchrun job? Runs every check and "
                                  "answers READY, DEGRADED or NOT READY, writing preflight.json, preflight.html "
                                  "and JUnit XML.", width=78) + "\n\n" + command_help(commands),
        epilog="Arguments after -- go to pytest unchanged. Exit codes: 0 ready or degraded, 1 not ready (or "
        "degraded with --strict), 2 could not run.",
        formatter_class=_Formatter,
        suggest=commands,
    )
    groups = {name: parser.add_argument_group(name) for name in HELP_GROUPS}
    order = [name for names in OPTION_GROUPS.values() for name in names]
    placed = {option: group for group, options in OPTION_GROUPS.items() for option in options}
    run = groups["run"]
    for option in sorted(OPTIONS, key=lambda o: order.index(o.name) if o.name in placed else len(order)):
        groups[placed.get(option.name, "advanced")].add_argument(f"--{option.name}", **argparse_kwargs(option))
    run.add_argument("-k", dest="keyword", metavar="EXPR", help="only run checks matching the expression "
                     "(pytest -k), e.g. -k gpu3 or -k 'not nccl'")
    run.add_argument("-m", dest="markexpr", metavar="EXPR", help="only run checks matching the marker "
                     "expression (pytest -m), e.g. -m 'not distributed'")
    run.add_argument("-q", "--quiet", action="store_true", help="one line per problem, no per-check lines")
    run.add_argument("-v", "--verbose", action="store_true", help="pytest's own output: one line per check "
                     "by its test id, then pytest's summary")
    groups["reports"].add_argument("--junitxml", metavar="PATH",
                                   help=f"JUnit XML path (default REPORT_DIR/{JUNIT_NAME})")
    groups["advanced"].add_argument("--version", action="version", version=f"preflight {preflight.__version__}")
    return parser


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The description's command list as written; option help wrapped as usual."""


def command_help(commands: dict[str, str]) -> str:
    """The sub-commands, one line each, in the order of :data:`COMMAND_SUMMARIES`."""
    names = [name for name in COMMAND_SUMMARIES if name in commands] + sorted(set(commands) - set(COMMAND_SUMMARIES))
    width = max(len(name) for name in names)
    lines = [f"  {name:<{width}}  {COMMAND_SUMMARIES.get(name) or _docstring_summary(commands[name])}"
             for name in names]
    return "commands:\n" + "\n".join(lines)


def _docstring_summary(module: str) -> str:
    """A sub-command's summary from its module docstring (read, not imported): the text after the usage."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    try:
        source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
        doc = ast.get_docstring(ast.parse(source)) or ""
    except (OSError, SyntaxError, ValueError):
        return ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return first.split("``: ", 1)[-1].split(". ", 1)[0].rstrip(".")


def plugin_args() -> list[str]:
    """``-p preflight.plugin`` unless the installed pytest11 entry point already loads it."""
    entry_points = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "preflight.plugin" for ep in entry_points):
        return []
    return ["-p", "preflight.plugin"]


def settings_from(args: argparse.Namespace) -> Settings:
    """The run's settings from the parsed command line (the one parse); a LoRA combination that says
    nothing is a usage error."""
    try:
        return Settings.from_options(vars(args))
    except QuantityError as exc:
        raise UsageError(str(exc)) from None


def pytest_argv(args: argparse.Namespace, settings: Settings, extra: list[str]) -> list[str]:
    """pytest's command line: the shipped checks, the reporter, the JUnit file and the selection. The
    options themselves travel as the :class:`~preflight.settings.Settings`, never as text."""
    where = checks_dir()
    argv = [str(where), "--rootdir", str(where), "-c", os.devnull, "-p", "no:cacheprovider", *plugin_args(),
            *_reporter_args(args), "-rN", "--tb=no", "--no-header", "-W", "ignore::pytest.PytestAssertRewriteWarning",
            f"--junitxml={args.junitxml or settings.report_dir / JUNIT_NAME}"]
    if args.keyword:
        argv += ["-k", args.keyword]
    if args.markexpr:
        argv += ["-m", args.markexpr]
    return argv + extra


def _reporter_args(args: argparse.Namespace) -> list[str]:
    """pytest's reporter for ``-v``; preflight's own terminal output otherwise (``-q``: problems only)."""
    if args.verbose:
        return ["-v"]
    return ["--preflight-terminal", *(["-q"] if args.quiet else [])]


def _check_report_dir(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new report directory is the user's alone
        probe = path / ".preflight-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write reports to {path}: {exc.strerror or exc}") from None


def _check_scratch_locations() -> None:
    """The folders preflight writes besides the report directory: the op cache falls back to a private folder
    by itself (``extensions_root``); one the user named that cannot be written is one line now, not a crash
    half way through the run."""
    from preflight.launch.torchrun import inherited_environment
    from preflight.probe.deepspeed_ops import EXTENSIONS_DIR_ENV, extensions_root

    # UnusableLocation when neither the cache nor the private fallback can be used
    root = extensions_root(inherited_environment())
    why = unwritable(root)
    if why is not None:
        raise UsageError(f"{EXTENSIONS_DIR_ENV}={shown(str(root))} cannot hold preflight's op builds ({why}): point "
                         "it at a writable directory, or unset it to use ~/.cache/preflight")


def _check_cpu_ranks(settings: Settings) -> None:
    """``--cpu --nproc N`` starts N gloo ranks, each a Python process importing torch: more than the cores
    this process may use is refused in one line (``--cpu --nproc 100000`` would fork until memory ran out)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if settings.cpu and settings.nproc and settings.nproc > cores:
        raise UsageError(f"--cpu --nproc {settings.nproc}: this node has {cores} CPU core{'s' if cores != 1 else ''} "
                         "for gloo ranks (one per core at most)")


def _check_junit_path(path: Path, what: str = "the JUnit XML") -> None:
    """pytest writes the JUnit file (and preflight the Prometheus textfile) at the very end: a path that cannot
    take it is a usage error now, not a line after every check has run. An existing file is left as it is
    (the run replaces it)."""
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        existing = next(p for p in path.parents if p.exists())
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is not a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write {what} to {shown(str(path))}: {exc.strerror or exc}") from None


def _run_pytest(argv: list[str], plugins: list[object] | None = None) -> tuple[int, str]:
    """Run pytest with its Python-level stderr held back: a usage error from options passed after
    ``--`` is several lines of pytest usage, and the user gets one line instead. ``plugins`` are
    plugin objects for the session (``preflight rehearse`` passes its own)."""
    import io

    import pytest

    held = io.StringIO()
    real = sys.stderr
    sys.stderr = held
    try:
        code = pytest.main(argv, plugins=plugins)
    finally:
        sys.stderr = real
    return int(code), held.getvalue()


def _usage_line(errors: str) -> str:
    """The telling line of pytest's usage error (``error: unrecognized arguments: ...``)."""
    lines = [line.strip() for line in errors.splitlines() if line.strip()]
    for line in lines:
        if ": error: " in line:
            return line.split(": error: ", 1)[1]
    for line in lines:
        if line.startswith("ERROR: ") and not line.startswith("ERROR: usage"):
            return line.removeprefix("ERROR: ")
    return lines[0] if lines else "pytest refused the arguments"


def _refuse_preflight_options_for_pytest(extra: list[str]) -> None:
    """The command hands pytest its settings already parsed, so a ``--preflight-*`` option after ``--`` would be
    silently ignored: refuse it, naming the command's own spelling."""
    for arg in extra:
        if arg.startswith("--preflight-"):
            name = arg.split("=", 1)[0][len("--preflight-"):]
            raise UsageError(f"{arg.split('=', 1)[0]} after -- is not read (preflight passes its own settings to "
                             f"pytest): give --{name} before --")


def run(argv: list[str]) -> int:
    """Run the checks and return the exit code."""
    import pytest

    head, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    _refuse_preflight_options_for_pytest(extra)
    head = join_negative_values(head, {f"--{o.name}" for o in OPTIONS if not o.flag})
    args = build_parser().parse_args(head)  # validates every value: one line and exit 2 on bad input
    settings = settings_from(args)
    _check_cpu_ranks(settings)
    _check_report_dir(settings.report_dir)
    if args.junitxml:
        _check_junit_path(Path(args.junitxml).resolve())
    if settings.prometheus is not None:
        _check_junit_path(settings.prometheus, "the Prometheus textfile")
    _check_scratch_locations()
    if not args.quiet:  # the first line within a second: pytest's start and the collection take seconds
        print(f"preflight {preflight.__version__}: checking this node{' (a CPU rehearsal)' if settings.cpu else ''}",
              flush=True)
    from preflight.plugin import PreflightRun

    run = PreflightRun(settings)
    code, errors = _run_pytest(pytest_argv(args, settings, extra), plugins=[run])
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(_usage_line(errors))
    sys.stderr.write(errors)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        raise UsageError("no check matches the selection (-k / -m)")
    result = run.result()
    if result is None or not result.reported:
        if result is not None and result.write_error:
            print(f"{result.verdict}  (no report: {result.write_error})")
            return result.exit_code
        raise UsageError(f"the run ended (pytest exit code {int(code)}) without writing "
                         f"{settings.report_dir / 'preflight.json'}")
    if not result.shown:  # the terminal output ends with the verdict already
        print(f"{result.headline}  reports: {result.json_path}, {result.html_path}")
    if settings.oneline:
        print(result.oneline)
    return result.exit_code


EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a command SIGPIPE ended (``preflight topology | head``)."""


def _standard_streams() -> None:
    """Standard input, output and error usable whatever the caller left: a closed one (``preflight >&-``, a
    daemon without a terminal) is pointed at /dev/null *before* anything opens a file, which would otherwise
    get its descriptor (and stdout's text with it) and leave Python's ``sys.stdout`` None half way through
    the run; text that cannot be encoded (a non-UTF-8 path in argv) is written escaped, never a traceback."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            stream = open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                          closefd=False)  # the process's own stream, never closed
            setattr(sys, name, stream)
            if getattr(sys, f"__{name}__") is None:  # pytest's faulthandler reads sys.__stderr__
                setattr(sys, f"__{name}__", stream)
        elif hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors="backslashreplace")
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115 - for the run


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    _standard_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        commands = subcommands()
        if argv and argv[0] in commands:
            module = importlib.import_module(commands[argv[0]])
            code = int(module.main(argv[1:]))
        else:
            code = run(argv)
        sys.stdout.flush()  # inside the try: a reader that left shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_left()
    except UsageError as exc:
        print(f"preflight: error: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever it quotes
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("preflight: interrupted", file=sys.stderr)
        return 1


def _reader_left() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a command SIGPIPE ends does.
    stdout now points at /dev/null so that Python's flush at exit does not report the pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE
