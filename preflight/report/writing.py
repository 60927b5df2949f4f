"""Writing a run's report files: the report directory owned for the run, ``preflight.json`` then
``preflight.html`` atomically, once, from any thread, the line log, and the files made private at the end.

The report is built once (the collector's ``build``), redacted once (:func:`redacted`: every string of
its JSON form), and every writer reads that one :class:`Report`. A write that fails (a full disk, a
removed directory) is said in one line and kept in ``write_error``; the verdict stays in memory for
the command.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from preflight.report.document import Report
from preflight.report.html import render_html
from preflight.report.model import RunRecord
from preflight.report.ownership import ReportDirectory, make_private
from preflight.report.redact import redact_obj
from preflight.report.watchdog import signals_held
from preflight.report.writer import LineLog, dump_json, printable, write_atomic

JSON_NAME = "preflight.json"
HTML_NAME = "preflight.html"
LINES_NAME = "preflight.jsonl"


def redacted(report: Report) -> Report:
    """``report`` with secrets removed from every string of its JSON form, and every string printable."""
    return Report.from_json(printable(redact_obj(report.to_json())))


def report_json(report: Report) -> str:
    """``preflight.json``'s text."""
    return dump_json(report.to_json())


def note_write_error(problem: str) -> None:
    """Say in one line that a file could not be written (the caller keeps it in ``write_error``)."""
    print(f"preflight: {problem}", file=sys.stderr, flush=True)


class ReportFiles:
    """The report of one run and the files it went to; :meth:`write` builds and writes it once."""

    def __init__(self, report_dir: Path, record: RunRecord, build: Callable[[], Report],
                 exit_code: Callable[[], int]) -> None:
        self.report_dir = report_dir
        self.record = record
        self.build = build
        self.exit_code = exit_code
        self.lines: LineLog | None = None
        self.report: Report | None = None
        self.written: list[Path] = []
        self.write_error: str | None = None
        self.directory: ReportDirectory | None = None
        self._lock = threading.Lock()
        self._lines_finished = False

    def open(self, others: list[Path]) -> None:
        """Own the report directory (``DirectoryInUse`` when another run does; ``NotPreflights`` or an
        ``OSError`` when it cannot be used), remove what an earlier run left there (its fixed names and
        ``others``: this run's JUnit and Prometheus files), and start the line log."""
        directory = ReportDirectory(self.report_dir)
        directory.acquire()
        self.directory = directory
        directory.clear_previous(others)
        self.lines = LineLog(self.report_dir / LINES_NAME)

    def make_private(self, also: list[Path]) -> None:
        """This run's files 0600 (and ``also``), its own folder's tree 0700/0600; nothing else is re-moded."""
        make_private(self.report_dir, also=also)

    def release(self) -> None:
        """Let the next run into the report directory."""
        if self.directory is not None:
            self.directory.release()

    def line(self, record: dict[str, Any]) -> None:
        if self.lines is not None:
            self.lines.write(record)

    def write(self) -> None:
        """Build the report and write JSON then HTML atomically; safe to call from any thread once.

        In the main thread, Ctrl-C and SIGTERM are held while the files are written (a signal
        would otherwise abort them half way); a held signal marks the run interrupted and the
        reports are written once more, so they say so. The line log's finish line comes last, once,
        from the final report: the two always agree."""
        began = time.monotonic()
        with signals_held() as held:
            self._write_once()
            if held and not self.record.interrupted:
                self.record.interrupted = True
                self.record.interruption = f"{signal.Signals(held[0]).name} while the reports were written"
                self.report, self.written = None, []
                self._write_once()
            self._finish_lines(began)

    def _finish_lines(self, began: float) -> None:
        """The jsonl's last line: the final report's verdict and whether it was interrupted (once)."""
        with self._lock:
            if self.lines is None or self.report is None or self._lines_finished:
                return
            self._lines_finished = True
            self.lines.write({"type": "finish", "verdict": self.report.verdict.value,
                              "interrupted": self.report.run.interrupted,
                              "report_write_s": round(time.monotonic() - began, 4)})
            self.lines.close()

    def _write_once(self) -> None:
        with self._lock:
            if self.report is None:
                self._build_and_write()

    def _build_and_write(self) -> None:
        self.report = redacted(self.build())
        try:
            for path, render in ((self.report_dir / JSON_NAME, report_json), (self.report_dir / HTML_NAME,
                                                                                render_html)):
                write_atomic(path, render(self.report))
                self.written.append(path)
        except OSError as exc:
            self.write_error = f"could not write the reports in {self.report_dir}: {exc.strerror or exc}"
            note_write_error(self.write_error)
