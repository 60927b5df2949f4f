"""preflight's own terminal output, used when the ``preflight`` command runs the checks.

pytest's reporter prints installed paths, hides the reasons and ends with its own summary after
ours. When the CLI passes ``--preflight-terminal`` (it does unless ``-v``), this plugin takes its
place: one entry per check (status word, the check's title, its reason, all within the terminal's
width: two columns that wrap on a wide terminal, the reason under the title on a narrow one, never cut
before the reason's first clause), the results of a per-GPU check folded by identical reason
(``PASS  Does the GPU answer NVML? [gpu0-1,3-7]``), identical SKIPs as one line with a count, the live
line whenever nothing else prints (:mod:`preflight.report.live`), and one verdict block at the end with
every problem and its fix, worst first. ``pytest checks/`` and ``preflight -v`` keep pytest's reporter.
Another session (``preflight rehearse``) takes the same reporter with :func:`install`.

Checks run with pytest's output capture on, so this reporter writes to a duplicate of the terminal's
file descriptor taken before any check runs: the live line can be drawn while a check waits.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

from preflight.report.document import Report
from preflight.report.live import LiveLine

if TYPE_CHECKING:
    from preflight.launch.torchrun import LaunchStatus

MIN_WIDTH = 40
STATUS_COLUMN = 6  # "ERROR "
GAP = 2  # between the title column and the reason column
WIDE = 100  # from this width on, titles and reasons stand in two columns
REASON_LINES = 2  # a check's reason gets up to this many lines (more when its first clause needs them)
LIVE_STATUS_KEY = pytest.StashKey[Callable[[], "LaunchStatus | None"]]()
"""A session whose launches are not the rehearsal fixture's (``preflight rehearse``) puts here what the live
line reads while a distributed check runs."""
SUMMARY_LINES_KEY = pytest.StashKey[Callable[[], list[str]]]()
"""Lines a session prints before the verdict block (``preflight rehearse``: its table)."""
_COLOURS = {"PASS": "32", "WARN": "33", "SKIP": "33", "FAIL": "31", "ERROR": "35", "READY": "32", "DEGRADED": "33",
            "NOT READY": "31"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("preflight").addoption(
        "--preflight-terminal", dest="preflight_terminal", action="store_true", default=False,
        help="preflight's own terminal output instead of pytest's (what the preflight command uses)")


@pytest.hookimpl(trylast=True)  # after pytest's reporter and the report collector exist
def pytest_configure(config: pytest.Config) -> None:
    from preflight.stash import COLLECTOR_KEY

    if not config.getoption("preflight_terminal") or hasattr(config, "workerinput"):
        return
    if COLLECTOR_KEY not in config.stash or config.getoption("dist", "no") not in ("no", None):
        return  # not a preflight run, or xdist's scheduler, which writes through pytest's reporter
    install(config)


def install(config: pytest.Config, stream: IO[str] | None = None) -> PreflightTerminal:
    """Put preflight's reporter in place of pytest's for this session (from a trylast ``pytest_configure``,
    once the report collector exists): what ``--preflight-terminal`` does, for a session of its own such as
    ``preflight rehearse``. Returns the registered reporter."""
    standard = config.pluginmanager.get_plugin("terminalreporter")
    if standard is not None:
        config.pluginmanager.unregister(standard)
    reporter = PreflightTerminal(config, stream or _terminal_stream())
    config.pluginmanager.register(reporter, "preflight-terminal")
    return reporter


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


def check_title(doc: str | None, name: str) -> str:
    """The check's docstring's first line (its question) without a trailing aside in parentheses, with the
    parameter id (``[gpu3]``) of a parametrized check."""
    lines = (doc or "").strip().splitlines()
    title = lines[0].strip().rstrip(".") if lines else name.split("[", 1)[0].removeprefix("test_").replace("_", " ")
    if title.endswith(")") and " (" in title:
        title = title[: title.rindex(" (")]
    return f"{title} [{name.split('[', 1)[1]}" if "[" in name else title


_BOUNDARY = re.compile(r"(?:[;:,]|\.(?=\s+[A-Z(`'\"]))\s+|\s+[-\u2013\u2014]\s+")
LONG_ASIDE = 40  # an aside in parentheses this long is a clause of its own


def clauses(text: str) -> list[str]:
    """``text`` cut into its clauses: after ``;``, ``:``, ``,``, a sentence's full stop or a dash, and
    before a long aside in parentheses (40 characters or more), never inside parentheses or brackets.
    Each clause keeps the punctuation that ends it."""
    text = " ".join(text.split())
    out: list[str] = []
    depth, start = 0, 0
    index = 0
    while index < len(text):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0:
            match = _BOUNDARY.match(text, index)
            if match and match.end() < len(text):
                out.append(text[start:match.end()].rstrip())
                start = index = match.end()
                continue
            if text.startswith(" (", index) and index > start and _aside_length(text, index + 1) >= LONG_ASIDE:
                out.append(text[start:index])
                start = index = index + 1
                continue
        index += 1
    if start < len(text):
        out.append(text[start:])
    return out


def _aside_length(text: str, start: int) -> int:
    """How long the parenthesised aside opening at ``start`` is (to its closing parenthesis or the end)."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index - start + 1
    return len(text) - start


def _trim_clause(text: str) -> str:
    return text.rstrip(" ;:,-\u2013\u2014")


def reason_lines(reason: str, width: int, lines: int = REASON_LINES) -> list[str]:
    """The reason within ``lines`` lines of ``width``: as many whole clauses as fit, ending `` ...`` when
    some are left out, and never less than the first clause (wrapped over more lines when it is longer)."""
    parts = clauses(reason)
    if not parts:
        return []
    whole = " ".join(parts)
    wrapped = _wrap(whole, width)
    if len(wrapped) <= lines:
        return wrapped
    shown = _trim_clause(parts[0])
    for count in range(2, len(parts) + 1):
        candidate = _trim_clause(" ".join(parts[:count]))
        if len(_wrap(candidate + " ...", width)) > lines:
            break
        shown = candidate
    return _wrap(shown + " ...", width)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=max(10, width), break_on_hyphens=False, break_long_words=True) or [""]


_GPU_PARAM = re.compile(r"^gpu(\d+)$")


def gpu_param(name: str) -> int | None:
    """The GPU of a per-GPU check's name (``test_gpu_ecc[gpu3]`` -> 3), else None."""
    _, bracket, param = name.partition("[")
    match = _GPU_PARAM.match(param.rstrip("]")) if bracket else None
    return int(match.group(1)) if match else None


def gpu_reason(reason: str, index: int) -> str:
    """A per-GPU reason without the GPU's own name for itself (the line says ``[gpu3]``): ``GPU 3 (NVIDIA
    H100 80GB HBM3, 00000000:3A:00.0): 2 uncorrectable ECC error(s)`` -> ``2 uncorrectable ECC error(s)``."""
    pattern = rf"^GPU ?{index}\b(?: \((?:[^()]|\([^()]*\))*\))?(?::\s+|\s+)"
    return re.sub(pattern, "", " ".join(reason.split()), count=1) or reason


def gpu_list(indices: list[int]) -> str:
    """``[0, 1, 3, 4, 5, 6, 7]`` -> ``gpu0-1,3-7``."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return "gpu" + ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a check's line puts its title and its reason at one terminal width.

    Wide terminals (``WIDE`` columns and more) get two columns, the title's and the reason's, each
    wrapping within its own; narrower ones put the reason under the title (unless both fit on one line)."""

    width: int
    title_width: int  # 0: the reason goes under the title

    @property
    def reason_width(self) -> int:
        return self.width - STATUS_COLUMN - GAP - self.title_width if self.title_width else self.width - STATUS_COLUMN


def layout(titles: list[str], width: int) -> Layout:
    """The layout for these titles: at ``WIDE`` columns and more a title column as wide as the longest title,
    at most half the width; below it the reason under the title."""
    if width < WIDE:
        return Layout(width, 0)
    longest = max((len(t) for t in titles), default=0)
    return Layout(width, max(20, min(longest, (width - STATUS_COLUMN) // 2)))


def check_lines(status: str, title: str, reason: str, shape: Layout) -> list[str]:
    """A check as lines within the width: ``PASS  Is /dev/shm large enough ...?  23.5 GiB with ...``."""
    reason = " ".join(reason.split())
    head = f"{status:<{STATUS_COLUMN - 1}} "
    pad = " " * STATUS_COLUMN
    if not shape.title_width:
        one = f"{head}{title}  {reason}" if reason else f"{head}{title}"
        if len(one) <= shape.width:
            return [one]
        lines = [f"{head if i == 0 else pad}{text}" for i, text in enumerate(_wrap(title, shape.width - STATUS_COLUMN))]
        return lines + [pad + text for text in reason_lines(reason, shape.reason_width)] if reason else lines
    left = _wrap(title, shape.title_width)
    right = reason_lines(reason, shape.reason_width, lines=max(len(left), REASON_LINES)) if reason else []
    rows = []
    for row in range(max(len(left), len(right))):
        cell = left[row] if row < len(left) else ""
        text = f"{head if row == 0 else pad}{cell:<{shape.title_width}}"
        rows.append((f"{text}{' ' * GAP}{right[row]}" if row < len(right) else text).rstrip())
    return rows


def skip_lines(groups: dict[str, list[str]], shape: Layout) -> list[str]:
    """One entry per distinct SKIP reason: the check's title when it is alone, else how many share it."""
    lines = []
    for reason, titles in groups.items():
        if len(titles) == 1:
            lines += check_lines("SKIP", titles[0], reason, shape)
        else:
            text = reason_lines(f"{len(titles)} checks: {reason}", shape.width - STATUS_COLUMN)
            lines += [("SKIP  " if i == 0 else " " * STATUS_COLUMN) + part for i, part in enumerate(text)]
    return lines


@dataclass(slots=True)
class GpuFold:
    """The results of one per-GPU check, held until its last GPU has reported, then shown with identical
    results folded into one line: ``PASS  Does the GPU answer NVML? [gpu0-1,3-7]  answers every query``."""

    title: str
    results: list[tuple[int, str, str]] = field(default_factory=list)  # (GPU, status, reason without the GPU)

    def add(self, index: int, status: str, reason: str) -> None:
        self.results.append((index, status, gpu_reason(reason, index)))

    def lines(self, shape: Layout) -> list[tuple[str, str]]:
        """(status, line) pairs, one group of identical results at a time, by their first GPU."""
        groups: dict[tuple[str, str], list[int]] = {}
        for index, status, reason in self.results:
            groups.setdefault((status, reason), []).append(index)
        out = []
        for (status, reason), indices in sorted(groups.items(), key=lambda item: min(item[1])):
            out += [(status, line) for line in check_lines(status, f"{self.title} [{gpu_list(indices)}]", reason,
                                                          shape)]
        return out


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


def verdict_block(report: Report, *, written: list[Path], width: int, quiet: bool = False) -> list[str]:
    """The end of a run: the problems with their fixes (in the one order of problems: hardware, then what
    stops the job, then what slows it), the counts, what did not run, where the reports are, and the
    verdict (last, once)."""
    lines = ["=" * min(width, 80)]
    for check in report.problems:
        title = check_title(check.title, check.name)
        code, status, summary = check.verdict.code or "", check.status.value, check.verdict.summary
        if quiet:
            lines.append(fit(f"{status:<5} {code} {title}: {' '.join(summary.split())}", width))
            continue
        lines += _heading(status, code, title, width)
        lines += _wrapped(summary, width, STATUS_COLUMN)
        if check.verdict.remediation:
            lines += _wrapped(check.verdict.remediation, width, STATUS_COLUMN, first="fix: ")
    run, error = report.run, report.run.error
    if error is not None:  # the run verdict ERROR: why preflight could not judge the node
        lines.append(fit(f"ERROR {error.code}  preflight could not judge the node", width))
        lines += _wrapped(error.summary, width, STATUS_COLUMN)
        lines += _wrapped(error.remediation, width, STATUS_COLUMN, first="fix: ")
    counts = ", ".join(f"{n} {status}" for status, n in report.summary.items() if n)
    deselected = run.selection.deselected if run.selection is not None else 0
    if deselected:
        counts += f"{', ' if counts else ''}{deselected} not selected"
    lines.append(fit(f"checks: {counts or 'none finished'}", width))
    not_run = report.not_run
    if not_run:
        why = run.interruption or (error.code if error is not None else "") or "the run was interrupted"
        lines += _wrapped(f"{len(not_run)} check{'s' if len(not_run) != 1 else ''} ({why})", width, 0,
                          first="not run: ")
    if written:
        shown = [_shown_path(p) for p in written]
        joined = "reports: " + ", ".join(shown)
        lines += [joined] if len(joined) <= width else [f"{'reports:' if i == 0 else '':<9}{p}"
                                                          for i, p in enumerate(shown)]
    flags = report.selection_flags if report.selection_note else ""
    verdict = report.headline + (f" ({flags})" if flags else "")
    lines.append(verdict if len(verdict) <= width else fit(report.headline, width))
    return lines


def _heading(status: str, code: str, title: str, width: int) -> list[str]:
    """A problem's first line, ``FAIL  GPU_ECC_UNCORRECTABLE  Is the GPU free of ...?``, wrapped under
    the code rather than cut."""
    head = f"{status:<{STATUS_COLUMN - 1}} {code}  " if code else f"{status:<{STATUS_COLUMN - 1}} "
    return textwrap.wrap(head + title, width=width, subsequent_indent=" " * STATUS_COLUMN, break_on_hyphens=False,
                         break_long_words=True)


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
        self.shape = Layout(self.width, 0)
        self.skips: dict[str, list[str]] = {}
        self._fold: tuple[str, GpuFold] | None = None  # the per-GPU check whose results are held
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
        shown = []
        for item in session.items:
            function = getattr(item, "function", None)
            self.titles[item.nodeid] = check_title(getattr(function, "__doc__", None), item.name)
            if item.get_closest_marker("distributed") is not None:
                self.distributed.add(item.nodeid)
            # a per-GPU check is shown folded: its title's room is that of the longest GPU list
            shown.append(self.titles[item.nodeid] + ("-00,00-00" if gpu_param(item.name) is not None else ""))
        self.shape = layout(shown, self.width)
        self.last = session.items[-1].nodeid if session.items else None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            self.line(fit(f"ERROR could not collect {report.nodeid}: {lines[-1] if lines else ''}", self.width),
                      "ERROR")

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self._fold is not None and self._fold[0] != _function_id(nodeid):
            self._show_fold()  # another check starts: the per-GPU check before it has every GPU's result
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
        index = gpu_param(report.nodeid.rsplit("::", 1)[-1])
        if index is not None:
            function = _function_id(report.nodeid)
            if self._fold is None or self._fold[0] != function:
                self._show_fold()
                self._fold = (function, GpuFold(title.rsplit(" [", 1)[0]))
            self._fold[1].add(index, status, summary)
            return
        self._show_fold()
        for text in check_lines(status, title, summary, self.shape):
            self.line(text, status)

    def _show_fold(self) -> None:
        """Print the held results of a per-GPU check, identical ones folded."""
        if self._fold is None:
            return
        fold, self._fold = self._fold[1], None
        for status, text in fold.lines(self.shape):
            self.line(text, status)

    @pytest.hookimpl(trylast=True)  # the collector has written the reports by now
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from preflight.stash import COLLECTOR_KEY

        self.live.stop()
        self._show_fold()
        collector = self.config.stash.get(COLLECTOR_KEY, None)
        report = collector.report if collector is not None else None
        if report is None or (report.run.selection is not None and not report.run.selection.selected):
            return  # nothing was selected: the command says so in one line
        if not self.quiet:
            for text in skip_lines(self.skips, self.shape):
                self.line(text, "SKIP")
            extra = self.config.stash.get(SUMMARY_LINES_KEY, None)
            for text in extra() if extra is not None else []:
                self.line(text)
        written = list(collector.written) if collector is not None else []
        junit = self.config.getoption("xmlpath", None)
        if junit and collector is not None and collector.write_error is None:
            written.append(Path(junit))
        block = verdict_block(report, written=written, width=self.width, quiet=self.quiet)
        for text in block[:-1]:
            self.line(text, text.split(" ", 1)[0])
        self.line(block[-1], report.verdict.value, bold=True)
        if collector is not None:
            collector.shown = True  # the command does not repeat the verdict

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.live.stop()
        if self.out is not sys.stdout:
            self.out.close()

    # -- the live line -----------------------------------------------------------------------------

    def _launch_status(self) -> LaunchStatus | None:
        """The launch in flight, for the live line while a distributed check waits on it: a session's own
        (``LIVE_STATUS_KEY``: ``preflight rehearse``), else the rehearsal fixture's."""
        from preflight.launch.rehearsal_start import REHEARSAL_KEY

        source = self.config.stash.get(LIVE_STATUS_KEY, None)
        if source is not None:
            return source()
        rehearsal = self.config.stash.get(REHEARSAL_KEY, None)
        return rehearsal.status() if rehearsal is not None else None


def _function_id(nodeid: str) -> str:
    """A check's node id without its parameters: the per-GPU results of one check share it."""
    return nodeid.split("[", 1)[0]


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
