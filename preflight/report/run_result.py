"""What a finished run hands back to the ``preflight`` command: its verdict, exit code and reports, as a value.

The command prints its last lines and picks its exit code from this, never by reading the report back
from the disk (which may have refused it) or from a module global.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preflight.report.document import Report
from preflight.report.oneline import format_oneline


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """One run's outcome. ``written`` are the reports on disk; ``write_error`` says why one is missing."""

    verdict: str
    exit_code: int
    headline: str
    """``READY: 1 of 45 checks selected``: the verdict with what the run covered."""
    oneline: str
    """The run's status in at most 80 characters (``--oneline``)."""
    json_path: Path
    html_path: Path
    written: tuple[Path, ...]
    write_error: str | None
    shown: bool
    """The terminal output already ended with the verdict (the command does not repeat it)."""

    @property
    def reported(self) -> bool:
        """preflight.json is on disk."""
        return self.json_path in self.written


def run_result(report: Report, *, report_dir: Path, json_name: str, html_name: str,
               written: Sequence[Path], write_error: str | None, shown: bool) -> RunResult:
    """The result of the run whose final report is ``report`` (as written: redacted, printable)."""
    exit_code = report.run.exit_code if report.run.exit_code is not None else report.verdict.exit_code()
    return RunResult(verdict=report.verdict.value, exit_code=exit_code, headline=report.headline,
                     oneline=format_oneline(report), json_path=report_dir / json_name,
                     html_path=report_dir / html_name, written=tuple(written), write_error=write_error, shown=shown)
