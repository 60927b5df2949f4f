"""The plugin object that gathers check results and writes the reports, whatever happens.

Registered by the plugin only for a preflight run (checks collected, or a report directory given).
It streams one JSON line per finished check, writes ``preflight.json`` and ``preflight.html``
atomically at the end (also after Ctrl-C, SIGTERM or the overall deadline), and prints the
problems with their fixes in the terminal summary.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Generator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from preflight.errors import EXIT_NOT_READY
from preflight.report.facts import gathered_facts, gathered_sections
from preflight.report import junit
from preflight.report.html import render_html
from preflight.report.model import CheckResult, RunRecord, build_report, headline, problems
from preflight.report.ownership import LOGS, DirectoryInUse, NotPreflights, ReportDirectory, make_private
from preflight.report.redact import redact_files, redact_obj, report_environment
from preflight.report.selection import Selection
from preflight.report.writer import LineLog, dump_json, printable, write_atomic
from preflight.settings import Settings

JSON_NAME = "preflight.json"
HTML_NAME = "preflight.html"
LINES_NAME = "preflight.jsonl"
WATCHDOG_GRACE_S = 3.0
WATCHDOG_HARD_S = 10.0


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or the overall deadline, so pytest unwinds and the
    report is still written."""


class ReportCollector:
    """Collects every check's verdict and writes the reports."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.record = RunRecord(argv=list(sys.argv))
        self.record.selection = Selection(keyword=config.getoption("keyword", None) or None,
                                          markexpr=config.getoption("markexpr", None) or None,
                                          profile=settings.profile, strategy=list(settings.strategies) or None,
                                          slow=settings.slow)
        self.report_dir = settings.report_dir
        self.lines: LineLog | None = None
        self.written: list[Path] = []
        self.report: dict[str, Any] | None = None
        self._write_lock = threading.Lock()
        self._finished = threading.Event()
        self._lines_finished = False
        self._old_sigterm: Any = None
        self._held: list[int] = []
        self._held_previous: dict[int, Any] = {}
        self.directory: ReportDirectory | None = None
        self.write_error: str | None = None
        self.shown = False
        """The terminal output ended with the verdict (the command does not repeat it)."""

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Own the report directory (a second run into it is refused), remove what an earlier run left
        there, and start the line log; a usage error when any of it is impossible.

        Call it once the collector is registered (its ``pytest_unconfigure`` writes the report of a run
        interrupted before its session started). From here until the session starts, Ctrl-C and SIGTERM
        are held, then delivered: an interruption never finds half an opening, nor a plugin half
        configured (pytest's own JUnit plugin cannot unconfigure then)."""
        self._hold_signals()
        try:
            directory = ReportDirectory(self.report_dir)
            directory.acquire()
            self.directory = directory
            directory.clear_previous(self._own_outputs())
            self.lines = LineLog(self.report_dir / LINES_NAME)
        except (DirectoryInUse, NotPreflights) as exc:
            self._release_signals(deliver=False)
            raise pytest.UsageError(str(exc)) from None
        except OSError as exc:
            self._release_signals(deliver=False)
            raise pytest.UsageError(f"cannot write reports to {self.report_dir}: {exc.strerror or exc}") from None

    def _hold_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._held_previous = {s: signal.signal(s, lambda signum, frame: self._held.append(signum))
                                   for s in (signal.SIGINT, signal.SIGTERM)}

    def _release_signals(self, *, deliver: bool) -> None:
        """Stop holding: from here on a SIGTERM ends in a report marked interrupted. Held signals are
        delivered (``deliver``) or, at the end of a run that never started, recorded as its interruption."""
        if not self._held_previous:
            return
        previous, self._held_previous = self._held_previous, {}
        signal.signal(signal.SIGINT, previous[signal.SIGINT])
        self._old_sigterm = previous[signal.SIGTERM]
        signal.signal(signal.SIGTERM, self._on_sigterm)
        held, self._held = list(dict.fromkeys(self._held)), []
        if held and not deliver:
            self.record.interrupted = True
            self.record.interruption = self.record.interruption or (
                "terminated by SIGTERM" if held[0] == signal.SIGTERM else "interrupted by the user (Ctrl-C)")
        for signum in held if deliver else ():
            signal.raise_signal(signum)

    def _own_outputs(self) -> list[Path]:
        """This run's outputs outside the report's fixed names: the JUnit and Prometheus files it was given."""
        paths = [self.config.getoption("xmlpath", default=None), self.settings.prometheus]
        return [Path(p) for p in paths if p]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.record.startup_s = _seconds_since_process_start()
        junit.name_suite(self.config)
        threading.Thread(target=self._watchdog, name="preflight-watchdog", daemon=True).start()
        self._release_signals(deliver=True)  # every plugin is configured: a signal held since open() lands now

    @pytest.hookimpl(trylast=True)  # after -k/-m deselection and preflight's own ordering
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.record.collected = [item.nodeid for item in items]
        self.record.selection.collected = len(items) + self.record.selection.deselected

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """-k, -m (and --deselect) drop checks here: counted, so the report says how much of the suite ran."""
        self.record.selection.deselected += len(items)

    def add_result(self, result: CheckResult) -> None:
        """Called by the plugin when a check has finished all its phases."""
        self.record.add(result)
        if self.lines is not None:
            self.lines.write(printable(redact_obj({"type": "check", **result.as_dict()})))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        junit.mark_warning(self.config, report)  # here, on the controller: xdist workers write no JUnit

    def pytest_internalerror(self, excrepr: Any, excinfo: pytest.ExceptionInfo[BaseException]) -> bool | None:
        """pytest or a plugin crashed (an INTERNALERROR): the run's verdict is ERROR naming it (never READY),
        the traceback goes into the report, and the terminal shows one line instead of pytest's dump
        (``-v`` keeps pytest's)."""
        self.record.internal_error = " ".join(f"{excinfo.typename}: {excinfo.value}".split())[:500]
        self.record.internal_detail = str(excrepr)[-20_000:]
        return None if self.config.get_verbosity() > 0 else True

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.record.interrupted = True
        if not self.record.interruption:
            self.record.interruption = "interrupted by the user (Ctrl-C)"

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """Write the reports first; a JUnit file that cannot be written (a full disk) is one line, not
        a traceback from pytest's JUnit plugin, and the verdict already written stands."""
        self._finish(exitstatus)
        failure = self.record.error()
        if failure is not None:
            junit.record_run_error(self.config, failure.code, failure.summary)
        pending = junit.write_atomically(self.config)  # whole or not at all: never a truncated file
        try:
            yield
        except OSError as exc:
            if not _raised_in(exc, "junitxml.py"):
                raise
            junit.abandon(self.config, pending)
            self._junit_failed(exc)
            return
        try:
            junit.commit(self.config, pending)
        except OSError as exc:
            self._junit_failed(exc)

    def _junit_failed(self, exc: OSError) -> None:
        problem = f"could not write the JUnit XML {self.config.getoption('xmlpath')}: {exc.strerror or exc}"
        if self.write_error is None:
            self.write_error = problem
            print(f"preflight: {problem}", file=sys.stderr, flush=True)

    def _finish(self, exitstatus: int | pytest.ExitCode) -> None:
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.record.interrupted = True
            self.record.interruption = self.record.interruption or "the run was interrupted"
        self.write_reports()
        self._finished.set()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The run is over (JUnit and the Prometheus textfile written): let the next run in. An
        interruption before the session had started (pytest then skips ``sessionfinish``) still
        leaves a report, marked interrupted."""
        self._release_signals(deliver=False)
        if self.report is None and self.directory is not None:
            if self.record.internal_error is None:  # a crash before the session is an ERROR, not an interruption
                self.record.interrupted = True
                self.record.interruption = self.record.interruption or "interrupted before the checks started"
            self.write_reports()
            self._finished.set()
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        if self.directory is not None:
            self._make_private()
            self.directory.release()

    def _make_private(self) -> None:
        """This run's files 0600 (the reports, the JUnit file when it lies in the report directory), its own
        folder's tree 0700/0600; nothing else there is re-moded (the user's files beside them). The
        Prometheus textfile, read by an exporter that may run as another user, is left as written."""
        xml = self.config.getoption("xmlpath", default=None)
        inside = [Path(xml)] if xml and Path(os.path.abspath(xml)).parent == self.report_dir else []
        make_private(self.report_dir, also=inside)

    # -- writing ---------------------------------------------------------------------------

    def exit_code(self) -> int:
        """0 ready or degraded (1 for degraded with --strict), 1 not ready, 2 could not judge (ERROR)."""
        return self.record.verdict().exit_code(strict=self.settings.strict)

    def write_reports(self) -> None:
        """Build the report and write JSON then HTML atomically; safe to call from any thread once.

        In the main thread, Ctrl-C and SIGTERM are held while the files are written (a signal
        would otherwise abort them half way); a held signal marks the run interrupted and the
        reports are written once more, so they say so. The line log's finish line comes last, once,
        from the final report: the two always agree."""
        began = time.monotonic()
        if threading.current_thread() is not threading.main_thread():
            self._write_reports()
            self._finish_lines(began)
            return
        held: list[int] = []
        previous = {s: signal.signal(s, lambda signum, frame: held.append(signum))
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._write_reports()
            if held and not self.record.interrupted:
                self.record.interrupted = True
                self.record.interruption = f"{signal.Signals(held[0]).name} while the reports were written"
                self.report, self.written = None, []
                self._write_reports()
            self._finish_lines(began)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _finish_lines(self, began: float) -> None:
        """The jsonl's last line: the final report's verdict and whether it was interrupted (once)."""
        with self._write_lock:
            if self.lines is None or self.report is None or self._lines_finished:
                return
            self._lines_finished = True
            self.lines.write({"type": "finish", "verdict": self.report["verdict"],
                              "interrupted": bool(self.report["run"]["interrupted"]),
                              "report_write_s": round(time.monotonic() - began, 4)})
            self.lines.close()

    def _write_reports(self) -> None:
        with self._write_lock:
            if self.report is not None:
                return
            self._build_and_write()

    def _build_and_write(self) -> None:
        """Build the report; write JSON then HTML. A write that fails (a full disk, a removed directory)
        is recorded in ``write_error`` and said in one line; the verdict is kept in memory for the CLI."""
        node: dict[str, Any] = _node_model_facts(self.config, wait=not self.record.interrupted)
        node.update(gathered_facts(self.config))
        report = build_report(
            self.record,
            node=node,
            environment=report_environment(_job_environment(self.config)),
            options={k: _plain(v) for k, v in self.settings.as_options().items()},
            exit_code=self.exit_code(),
            sections=gathered_sections(self.config),
        )
        self.report = printable(redact_obj(report))
        try:
            for path, render in ((self.report_dir / JSON_NAME, dump_json), (self.report_dir / HTML_NAME,
                                                                              render_html)):
                write_atomic(path, render(self.report))
                self.written.append(path)
        except OSError as exc:
            self.write_error = f"could not write the reports in {self.report_dir}: {exc.strerror or exc}"
            print(f"preflight: {self.write_error}", file=sys.stderr, flush=True)

    # -- terminal --------------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report
        if report is None:
            return
        tw = terminalreporter
        found = problems(report)
        if found:
            tw.section("preflight: problems", sep="=", bold=True)
            for check in found:
                colour = {"FAIL": {"red": True}, "ERROR": {"purple": True}, "WARN": {"yellow": True}}[check["status"]]
                tw.line(f"{check['status']:5} {check['code'] or ''} {check['id']}", bold=True, **colour)
                tw.line(f"      {check['summary']}")
                if check.get("remediation"):
                    tw.line(f"      fix: {check['remediation']}")
        if report["not_run"]:
            tw.line(f"not run: {len(report['not_run'])} check(s) ({report['run']['interruption']})", yellow=True)
        colour = {"READY": {"green": True}, "DEGRADED": {"yellow": True}}.get(report["verdict"], {"red": True})
        tw.line(f"preflight: {headline(report)}", bold=True, **colour)
        tw.line("reports: " + ", ".join(str(p) for p in self.written))
        self.shown = True  # the command does not repeat the verdict

    # -- interruption ----------------------------------------------------------------------

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.record.interrupted = True
        self.record.interruption = "terminated by SIGTERM"
        raise RunInterrupted("SIGTERM")

    def _watchdog(self) -> None:
        """Enforce the overall --timeout: interrupt the main thread, and if it does not unwind
        (stuck in C), write the partial report from here and leave."""
        if self._finished.wait(max(0.0, self.settings.remaining_s()) + WATCHDOG_GRACE_S):
            return
        self.record.interrupted = True
        self.record.interruption = f"overall --timeout of {self.settings.timeout_s:.0f} s reached"
        os.kill(os.getpid(), signal.SIGINT)
        if self._finished.wait(WATCHDOG_HARD_S):
            return
        try:
            self.write_reports()
            print(f"preflight: {self.record.verdict().value} (run stopped at its deadline); reports: "
                  + ", ".join(str(p) for p in self.written), file=sys.stderr, flush=True)
            redact_files(self.report_dir / LOGS)  # a launch still in flight was never scrubbed
            self._make_private()
        finally:
            os._exit(EXIT_NOT_READY)


def _node_model_facts(config: pytest.Config, *, wait: bool) -> dict[str, Any]:
    """The node model's sections (the host's identity, the job's torch, the job), whatever ``-k`` selected; an
    interrupted run does not wait for a torch probe still running (a scheduler's grace period is short)."""
    from preflight.stash import node_for

    node = node_for(config)
    return {**node.host.identity.as_dict(), **node.as_dict(wait=wait)}


def _job_environment(config: pytest.Config) -> Mapping[str, str]:
    """The environment the job inherits (the node model's), for the report's allow-listed section."""
    from preflight.stash import node_for

    return node_for(config).env


def _seconds_since_process_start() -> float | None:
    """How long the interpreter ran before the session started (imports, option parsing)."""
    try:
        import psutil

        return round(time.time() - psutil.Process().create_time(), 3)
    except Exception:  # noqa: BLE001 - a missing figure is better than a crashed run
        return None


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _raised_in(exc: BaseException, filename: str) -> bool:
    """True when ``exc`` was raised from a frame in a file of that name."""
    return any(frame.filename.endswith(filename) for frame in traceback.extract_tb(exc.__traceback__))
