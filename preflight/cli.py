"""The ``preflight`` command: a thin front end over ``pytest.main`` and the sub-commands.

``preflight [options] [-- pytest args]`` runs every check of ``preflight.checks`` with the plugin
and ends with one line: READY, DEGRADED or NOT READY and the reports written. ``preflight NAME ...``
runs the sub-command ``preflight.commands.NAME`` (``topology``, ``nccl-log``, ``size``, ...).
Exit codes: 0 ready or degraded, 1 not ready (or degraded with --strict), 2 could not run.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.metadata
import json
import os
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import preflight
import preflight.commands
from preflight.errors import EXIT_USAGE, UsageError
from preflight.locations import checks_dir
from preflight.options import Option, UsageParser, argparse_type, join_negative_values

JUNIT_NAME = "preflight-junit.xml"


def subcommands() -> dict[str, str]:
    """``nccl-log`` -> ``preflight.commands.nccl_log`` for every module in preflight.commands."""
    return {m.name.replace("_", "-"): f"preflight.commands.{m.name}"
            for m in pkgutil.iter_modules(preflight.commands.__path__)}


def build_parser(convert: bool = True) -> argparse.ArgumentParser:
    """The run's options: every declared option, plus pytest's selection flags. With ``convert``
    off the values stay as the user typed them (that text is what pytest parses again)."""
    from preflight.plugin import all_options

    names = ", ".join(sorted(subcommands()))
    parser = UsageParser(
        prog="preflight",
        description="Is this multi-GPU node ready for a long torchrun job? Runs every check and answers "
        "READY, DEGRADED or NOT READY, writing preflight.json, preflight.html and JUnit XML.",
        epilog=f"Sub-commands (preflight NAME --help): {names}. Arguments after -- go to pytest unchanged. "
        "Exit codes: 0 ready or degraded, 1 not ready (or degraded with --strict), 2 could not run.",
    )
    for option in all_options():
        _add(parser, option, argparse_type if convert else None)
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only run checks matching the expression "
                        "(pytest -k), e.g. -k gpu3 or -k 'not nccl'")
    parser.add_argument("-m", dest="markexpr", metavar="EXPR", help="only run checks matching the marker "
                        "expression (pytest -m), e.g. -m 'not distributed'")
    parser.add_argument("--junitxml", metavar="PATH", help=f"JUnit XML path (default REPORT_DIR/{JUNIT_NAME})")
    parser.add_argument("-q", "--quiet", action="store_true", help="one line per problem, no per-check lines")
    parser.add_argument("-v", "--verbose", action="store_true", help="pytest's own output: one line per check "
                        "by its test id, then pytest's summary")
    parser.add_argument("--version", action="version", version=f"preflight {preflight.__version__}")
    return parser


def _add(
    parser: argparse.ArgumentParser, option: Option, wrap: Callable[[Callable[[str], Any]], Callable[[str], Any]] | None
) -> None:
    flag = f"--{option.name}"
    if option.flag:
        parser.add_argument(flag, dest=option.dest, action="store_true", help=option.help)
        return
    kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help, "metavar": option.metavar,
                                 "choices": option.choices, "default": None,
                                 "action": "append" if option.multiple else "store"}
    if option.type is not None and wrap is not None:
        kwargs["type"] = wrap(option.type)
    parser.add_argument(flag, **kwargs)


def plugin_args() -> list[str]:
    """``-p preflight.plugin`` unless the installed pytest11 entry point already loads it."""
    entry_points = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "preflight.plugin" for ep in entry_points):
        return []
    return ["-p", "preflight.plugin"]


def pytest_argv(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """Translate the parsed options into pytest's command line."""
    from preflight.plugin import all_options

    report_dir = Path(args.report_dir or "reports").resolve()
    where = checks_dir()
    argv = [str(where), "--rootdir", str(where), "-c", os.devnull, "-p", "no:cacheprovider", *plugin_args(),
            *_reporter_args(args), "-rN", "--tb=no", "--no-header",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", f"--junitxml={args.junitxml or report_dir / JUNIT_NAME}"]
    for option in all_options():
        value = getattr(args, option.dest)
        if option.flag:
            if value:
                argv.append(option.pytest_flag)
        elif value is not None:
            values = value if option.multiple else [value]
            argv.extend(f"{option.pytest_flag}={item}" for item in values)
    if not args.report_dir:
        argv.append(f"--preflight-report-dir={report_dir}")
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


def _check_junit_path(path: Path) -> None:
    """pytest writes the JUnit file at the very end: a path that cannot take it is a usage error now, not a
    traceback after every check has run. An existing file is left as it is (the run replaces it)."""
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
        raise UsageError(f"cannot write the JUnit XML to {path}: {exc.strerror or exc}") from None


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


def run(argv: list[str]) -> int:
    """Run the checks and return the exit code."""
    import pytest

    head, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    from preflight.plugin import all_options

    value_options = {f"--{o.name}" for o in all_options() if not o.flag}
    head = join_negative_values(head, value_options)
    build_parser().parse_args(head)  # validates every value: one line and exit 2 on bad input
    args = build_parser(convert=False).parse_args(head)
    report_dir = Path(args.report_dir or "reports").resolve()
    _check_report_dir(report_dir)
    if args.junitxml:
        _check_junit_path(Path(args.junitxml).resolve())
    stale = report_dir / "preflight.json"
    if not args.quiet:  # the first line within a second: pytest's start and the collection take seconds
        print(f"preflight {preflight.__version__}: checking this node{' (a CPU rehearsal)' if args.cpu else ''}",
              flush=True)
    code, errors = _run_pytest(pytest_argv(args, extra))
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(_usage_line(errors))
    sys.stderr.write(errors)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        raise UsageError("no check matches the selection (-k / -m)")
    from preflight.report.collector import LAST_RUN
    from preflight.report.model import headline

    try:
        report = json.loads(stale.read_text())
    except (OSError, ValueError):
        if LAST_RUN.get("verdict") and LAST_RUN.get("write_error"):
            print(f"{LAST_RUN['verdict']}  (no report: {LAST_RUN['write_error']})")
            return int(LAST_RUN["exit_code"])
        raise UsageError(f"the run ended (pytest exit code {int(code)}) without writing {stale}") from None
    if not LAST_RUN.get("shown"):  # the terminal output ends with the verdict already
        print(f"{headline(report)}  reports: {report_dir / 'preflight.json'}, {report_dir / 'preflight.html'}")
    if args.oneline:
        from preflight.report.oneline import format_oneline

        print(format_oneline(report))
    return int(report["run"]["exit_code"])


EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a command SIGPIPE ended (``preflight topology | head``)."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
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
