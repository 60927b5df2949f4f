"""preflight's own terminal output, used when the ``preflight`` command runs the checks.

pytest's reporter prints installed paths, hides the reasons and ends with its own summary after
ours. When the CLI passes ``--preflight-terminal`` (it does unless ``-v``), this plugin takes its
place: one line per check (status word, the check's title, a short reason, all within the terminal's
width), identical SKIPs as one line with a count, the live line whenever nothing else prints
(:mod:`preflight.report.live`), and one verdict block at the end with every problem and its fix.
``pytest checks/`` and ``preflight -v`` keep pytest's reporter.

Checks run with pytest's output capture on, so this reporter writes to a duplicate of the terminal's
file descriptor taken before any check runs: the live line can be drawn while a check waits.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from preflight.report.live import LiveLine
from preflight.report.model import headline
from preflight.report.selection import selection_flags, selection_note

if TYPE_CHECKING:
    from preflight.launch.torchrun import LaunchStatus

MIN_WIDTH = 40
STATUS_COLUMN = 6  # "ERROR "
REASON_MIN = 36
PROBLEM_ORDER = ("FAIL", "ERROR", "WARN")
_COLOURS = {"PASS": "32", "WARN": "33", "SKIP": "33", "FAIL": "31", "ERROR": "35", "READY": "32", "DEGRADED": "33",
            "NOT READY": "31"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("preflight").addoption(
        "--preflight-terminal", dest="preflight_terminal", action="store_true", default=False,
        help="preflight's own terminal output instead of pytest's (what the preflight command uses)")


@pytest.hookimpl(trylast=True)  # after pytest's reporter and the report collector exist
def pytest_configure(config: pytest.Config) -> None:
    from preflight.plugin import COLLECTOR_KEY

    if not config.getoption("preflight_terminal") or hasattr(config, "workerinput"):
        return
    if COLLECTOR_KEY not in config.stash or config.getoption("dist", "no") not in ("no", None):
        return  # not a preflight run, or xdist's scheduler, which writes through pytest's reporter
    standard = config.pluginmanager.get_plugin("terminalreporter")
    if standard is not None:
        config.pluginmanager.unregister(standard)
    config.pluginmanager.register(PreflightTerminal(config, _terminal_stream()), "preflight-terminal")


def _terminal_stream() -> IO[str]:
    """A stream on the terminal that pytest's capture of a running check does not redirect."""
    try:
        fd = os.dup(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return sys.stdout  # stdout is not a file (an in-process run): nothing is redirected either
    return open(fd, "w", buffering=1, encoding=sys.stdout.encoding or "utf-8", errors="replace")


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` wins; 80 when stdout is not a terminal)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


# -- pure formatting ---------------------------------------------------------------------------------


def fit(text: str, width: int) -> str:
    """One line of at most ``width`` characters, cut with ``...`` (line breaks become spaces)."""
    text = " ".join(text.splitlines()).rstrip()
    return text if len(text) <= width else text[: max(0, width - 3)].rstrip() + "..."


def fit_words(text: str, width: int) -> str:
    """``text`` within ``width``, cut at a word boundary when one is near (titles read better whole-word)."""
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 3)]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:-") + "..."


def check_title(doc: str | None, name: str) -> str:
    """The check's docstring's first line without a trailing aside in parentheses, with the parameter id
    (``[gpu3]``) of a parametrized check."""
    lines = (doc or "").strip().splitlines()
    title = lines[0].strip().rstrip(".") if lines else name.split("[", 1)[0].removeprefix("test_").replace("_", " ")
    if title.endswith(")") and " (" in title:
        title = title[: title.rindex(" (")]
    return f"{title} [{name.split('[', 1)[1]}" if "[" in name else title


def title_column(titles: list[str], width: int) -> int:
    """How wide the title column is: the longest title, leaving the reason at least REASON_MIN columns."""
    longest = max((len(t) for t in titles), default=0)
    return max(12, min(longest, width - STATUS_COLUMN - 2 - REASON_MIN))


def check_line(status: str, title: str, reason: str, *, title_width: int, width: int) -> str:
    """``PASS  GPUs are visible to torch        4 GPUs, CUDA 12.8`` within ``width`` columns."""
    room = max(10, min(title_width, width - STATUS_COLUMN - 12))
    base, bracket, param = title.partition(" [")
    suffix = f"{bracket}{param}" if bracket and len(bracket + param) < room // 2 else ""
    shown = fit_words(base, room - len(suffix)) + suffix if suffix and len(title) > room else fit_words(title, room)
    head = f"{status:<{STATUS_COLUMN - 1}} {shown:<{room}}"
    reason = " ".join(reason.split())
    if not reason:
        return head.rstrip()[:width]
    return fit(f"{head}  {reason}", width)


def skip_lines(groups: dict[str, list[str]], *, title_width: int, width: int) -> list[str]:
    """One line per distinct SKIP reason: the check's title when it is alone, else how many share it."""
    lines = []
    for reason, titles in groups.items():
        if len(titles) == 1:
            lines.append(check_line("SKIP", titles[0], reason, title_width=title_width, width=width))
        else:
            lines.append(fit(f"SKIP  {len(titles)} checks: {' '.join(reason.split())}", width))
    return lines


def _wrapped(text: str, width: int, indent: int, first: str = "") -> list[str]:
    return textwrap.wrap(" ".join(f"{first}{text}".split()), width=width, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent + len(first)), break_on_hyphens=False,
                         break_long_words=True) or []


def _shown_path(path: Path) -> str:
    """A path relative to the working directory when it lies inside it (shorter), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (OSError, ValueError):
        return str(path)


def verdict_block(report: dict[str, Any], *, written: list[Path], width: int, quiet: bool = False) -> list[str]:
    """The end of a run: the problems with their fixes, the counts, what did not run, where the
    reports are, and the verdict (last, once)."""
    lines = ["=" * min(width, 80)]
    problems = sorted((c for c in report.get("checks", []) if c.get("status") in PROBLEM_ORDER),
                      key=lambda c: PROBLEM_ORDER.index(c["status"]))
    for check in problems:
        title = check_title(check.get("title"), str(check.get("name", "")))
        code = check.get("code") or ""
        if quiet:
            summary = " ".join(str(check.get("summary") or "").split())
            lines.append(fit(f"{check['status']:<5} {code} {title}: {summary}", width))
            continue
        lines.append(fit(f"{check['status']:<5} {code}  {title}", width))
        lines += _wrapped(str(check.get("summary") or ""), width, STATUS_COLUMN)
        if check.get("remediation"):
            lines += _wrapped(str(check["remediation"]), width, STATUS_COLUMN, first="fix: ")
    counts = ", ".join(f"{n} {status}" for status, n in report.get("summary", {}).items() if n)
    run = report.get("run", {})
    selection = run.get("selection") or {}
    if selection.get("deselected"):
        counts += f"{', ' if counts else ''}{selection['deselected']} not selected"
    lines.append(fit(f"checks: {counts or 'none finished'}", width))
    not_run = report.get("not_run") or []
    if not_run:
        why = run.get("interruption") or "the run was interrupted"
        lines += _wrapped(f"{len(not_run)} check{'s' if len(not_run) != 1 else ''} ({why})", width, 0,
                          first="not run: ")
    if written:
        shown = [_shown_path(p) for p in written]
        joined = "reports: " + ", ".join(shown)
        lines += [joined] if len(joined) <= width else [f"{'reports:' if i == 0 else '':<9}{p}"
                                                          for i, p in enumerate(shown)]
    flags = selection_flags(report) if selection_note(report) else ""
    verdict = headline(report) + (f" ({flags})" if flags else "")
    lines.append(verdict if len(verdict) <= width else fit(headline(report), width))
    return lines


# -- the reporter ------------------------------------------------------------------------------------


class PreflightTerminal:
    """The pytest plugin object that replaces pytest's terminal reporter for a ``preflight`` run."""

    def __init__(self, config: pytest.Config, stream: IO[str]) -> None:
        self.config = config
        self.out = stream
        self.tty = _isatty(stream)
        self.colour = self.tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        self.width = terminal_width()
        self.quiet = int(config.getoption("verbose", 0) or 0) < 0
        self.titles: dict[str, str] = {}
        self.distributed: set[str] = set()
        self.title_width = 0
        self.skips: dict[str, list[str]] = {}
        self.last: str | None = None
        self._lock = threading.Lock()
        self.live = LiveLine(stream, tty=self.tty, width=self.width, lock=self._lock, launch=self._launch_status)
        self.live.busy("collecting the checks")
        if self.tty or not self.quiet:  # -q into a log: the problems only
            self.live.start()

    # -- writing -----------------------------------------------------------------------------------

    def _paint(self, text: str, word: str, bold: bool = False) -> str:
        code = _COLOURS.get(word)
        if not self.colour or code is None:
            return text
        return f"\x1b[{'1;' if bold else ''}{code}m{text}\x1b[0m"

    def line(self, text: str = "", word: str = "", bold: bool = False) -> None:
        """Print one line, clearing the live line first (it is redrawn on the next tick)."""
        with self._lock:
            self.live.clear()
            if word and text.startswith(word):
                text = self._paint(word, word, bold) + text[len(word):]
            self.out.write(text + "\n")
            self.out.flush()

    # -- hooks -------------------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            function = getattr(item, "function", None)
            self.titles[item.nodeid] = check_title(getattr(function, "__doc__", None), item.name)
            if item.get_closest_marker("distributed") is not None:
                self.distributed.add(item.nodeid)
        self.title_width = title_column(list(self.titles.values()), self.width)
        self.last = session.items[-1].nodeid if session.items else None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            self.line(fit(f"ERROR could not collect {report.nodeid}: {lines[-1] if lines else ''}", self.width),
                      "ERROR")

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.live.busy(self.titles.get(nodeid, nodeid.rsplit("::", 1)[-1]), watch_launch=nodeid in self.distributed)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.live.busy("writing the reports" if nodeid == self.last else "preparing the next check")
        with self._lock:
            self.live.clear()
            self.out.flush()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        props = dict(report.user_properties)
        status = str(props.get("preflight.verdict") or report.outcome.upper())
        summary = str(props.get("preflight.summary") or "")
        title = self.titles.get(report.nodeid, report.nodeid.rsplit("::", 1)[-1])
        if status == "SKIP":
            self.skips.setdefault(summary, []).append(title)
            return
        if self.quiet:
            return
        self.line(check_line(status, title, summary, title_width=self.title_width, width=self.width), status)

    @pytest.hookimpl(trylast=True)  # the collector has written the reports by now
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from preflight.plugin import COLLECTOR_KEY
        from preflight.report.collector import LAST_RUN

        self.live.stop()
        collector = self.config.stash.get(COLLECTOR_KEY, None)
        report = collector.report if collector is not None else None
        if report is None or not (report["run"].get("selection") or {}).get("selected", 1):
            return  # nothing was selected: the command says so in one line
        if not self.quiet:
            for text in skip_lines(self.skips, title_width=self.title_width, width=self.width):
                self.line(text, "SKIP")
        written = list(collector.written) if collector is not None else []
        junit = self.config.getoption("xmlpath", None)
        if junit and collector is not None and collector.write_error is None:
            written.append(Path(junit))
        block = verdict_block(report, written=written, width=self.width, quiet=self.quiet)
        for text in block[:-1]:
            self.line(text, text.split(" ", 1)[0])
        self.line(block[-1], str(report.get("verdict", "")), bold=True)
        LAST_RUN["shown"] = True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.live.stop()
        if self.out is not sys.stdout:
            self.out.close()

    # -- the live line -----------------------------------------------------------------------------

    def _launch_status(self) -> LaunchStatus | None:
        """The rehearsal launch in flight, for the live line while a distributed check waits on it."""
        from preflight.fixtures.rehearsal import REHEARSAL_KEY

        rehearsal = self.config.stash.get(REHEARSAL_KEY, None)
        return rehearsal.status() if rehearsal is not None else None


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
