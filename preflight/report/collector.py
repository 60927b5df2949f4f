"""The plugin object that records every check's verdict and has the reports written, whatever happens.

Registered by the plugin only for a preflight run (checks collected, or a report directory given).
It records what the run does (``RunRecord``: results, selection, interruptions, an INTERNALERROR) and
builds the one typed report from it; the jobs around that live apart: signals and the deadline in
``report.watchdog``, the files (``preflight.json``, ``preflight.html``, the line log) in
``report.writing``, pytest's terminal summary in ``report.summary``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from preflight.report import junit
from preflight.report.document import Report
from preflight.report.facts import gathered_facts, gathered_sections
from preflight.report.model import CheckResult, RunRecord, build_report
from preflight.report.ownership import LOGS, DirectoryInUse, NotPreflights
from preflight.report.redact import redact_files, redact_obj, report_environment
from preflight.report.selection import Selection
from preflight.report.summary import print_summary
from preflight.report.watchdog import SignalGuard, Watchdog
from preflight.report.writer import printable
from preflight.report.writing import ReportFiles, note_write_error
from preflight.settings import Settings


class ReportCollector:
    """Records every check's verdict and has the reports written at the end of the run."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.record = RunRecord(argv=list(sys.argv))
        self.record.selection = Selection(keyword=config.getoption("keyword", None) or None,
                                          markexpr=config.getoption("markexpr", None) or None,
                                          profile=settings.profile, strategy=list(settings.strategies) or None,
                                          slow=settings.slow)
        self.report_dir = settings.report_dir
        self.files = ReportFiles(self.report_dir, self.record, self._build, self.exit_code)
        self.signals = SignalGuard(self.record)
        self._finished = threading.Event()
        self.shown = False
        """The terminal output ended with the verdict (the command does not repeat it)."""

    @property
    def report(self) -> Report | None:
        """The run's report once written (redacted: what the files hold)."""
        return self.files.report

    @property
    def written(self) -> list[Path]:
        return self.files.written

    @property
    def write_error(self) -> str | None:
        return self.files.write_error

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Own the report directory (a second run into it is refused), remove what an earlier run left
        there, and start the line log; a usage error when any of it is impossible.

        Call it once the collector is registered (its ``pytest_unconfigure`` writes the report of a run
        interrupted before its session started). From here until the session starts, Ctrl-C and SIGTERM
        are held, then delivered: an interruption never finds half an opening, nor a plugin half
        configured (pytest's own JUnit plugin cannot unconfigure then)."""
        self.signals.hold()
        try:
            self.files.open(self._own_outputs())
        except (DirectoryInUse, NotPreflights) as exc:
            self.signals.release(deliver=False)
            raise pytest.UsageError(str(exc)) from None
        except OSError as exc:
            self.signals.release(deliver=False)
            raise pytest.UsageError(f"cannot write reports to {self.report_dir}: {exc.strerror or exc}") from None

    def _own_outputs(self) -> list[Path]:
        """This run's outputs outside the report's fixed names: the JUnit and Prometheus files it was given."""
        paths = [self.config.getoption("xmlpath", default=None), self.settings.prometheus]
        return [Path(p) for p in paths if p]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.record.startup_s = _seconds_since_process_start()
        junit.name_suite(self.config)
        Watchdog(self.record, self.settings, self._finished, self._write_at_deadline).start()
        self.signals.release(deliver=True)  # every plugin is configured: a signal held since open() lands now

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
        self.files.line(printable(redact_obj({"type": "check", **result.as_dict()})))

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
            if not junit.raised_by_junit(exc):
                raise
            junit.abandon(self.config, pending)
            self._junit_failed(exc)
            return
        try:
            junit.commit(self.config, pending)
        except OSError as exc:
            self._junit_failed(exc)

    def _junit_failed(self, exc: OSError) -> None:
        if self.files.write_error is None:
            self.files.write_error = (f"could not write the JUnit XML {self.config.getoption('xmlpath')}: "
                                      f"{exc.strerror or exc}")
            note_write_error(self.files.write_error)

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
        self.signals.release(deliver=False)
        if self.report is None and self.files.directory is not None:
            if self.record.internal_error is None:  # a crash before the session is an ERROR, not an interruption
                self.record.interrupted = True
                self.record.interruption = self.record.interruption or "interrupted before the checks started"
            self.write_reports()
            self._finished.set()
        self.signals.restore()
        if self.files.directory is not None:
            self._make_private()
            self.files.release()

    def _make_private(self) -> None:
        """This run's files 0600 (the reports, the JUnit file when it lies in the report directory), its own
        folder's tree 0700/0600; nothing else there is re-moded (the user's files beside them). The
        Prometheus textfile, read by an exporter that may run as another user, is left as written."""
        xml = self.config.getoption("xmlpath", default=None)
        self.files.make_private([Path(xml)] if xml and Path(os.path.abspath(xml)).parent == self.report_dir else [])

    # -- the report ------------------------------------------------------------------------

    def exit_code(self) -> int:
        """0 ready or degraded (1 for degraded with --strict), 1 not ready, 2 could not judge (ERROR)."""
        return self.record.verdict().exit_code(strict=self.settings.strict)

    def write_reports(self) -> None:
        """Build the report and write its files (once; see ``ReportFiles.write``)."""
        self.files.write()

    def _build(self) -> Report:
        """The report of what the run recorded, with the node's facts and the run's environment and options."""
        node: dict[str, Any] = _node_model_facts(self.config, wait=not self.record.interrupted)
        node.update(gathered_facts(self.config))
        return build_report(
            self.record,
            node=node,
            environment=report_environment(_job_environment(self.config)),
            options={k: _plain(v) for k, v in self.settings.as_options().items()},
            exit_code=self.exit_code(),
            sections=gathered_sections(self.config),
        )

    def _write_at_deadline(self) -> str:
        """The watchdog's last resort (the main thread is stuck): the partial report, the launch logs still
        in flight scrubbed, the files private; returns where the reports went."""
        self.write_reports()
        redact_files(self.report_dir / LOGS)  # a launch still in flight was never scrubbed
        self._make_private()
        return ", ".join(str(p) for p in self.written)

    # -- terminal --------------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is not None:
            print_summary(terminalreporter, self.report, self.written)
            self.shown = True  # the command does not repeat the verdict


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

