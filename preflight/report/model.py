"""What a run records (:class:`RunRecord`) and the typed report built from it once (:func:`build_report`,
a :class:`preflight.report.document.Report`), with the problem a one-line answer leads with.

``SCHEMA_VERSION`` changes when a consumer of the JSON would have to change; the tool's version is
separate. ``preflight/report/schema.json`` is the JSON Schema of this model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import preflight
from preflight.outcome import RunVerdict, Status, run_verdict
from preflight.report.document import CheckResult, NodeFacts, Report, RunError, RunInfo, RunSelection
from preflight.report.selection import Selection

__all__ = ["ERROR_CODE", "INTERNAL_ERROR_CODE", "INTERRUPTED_CODE", "NO_CHECK_FINISHED_CODE", "SCHEMA_VERSION",
           "SUPPORTED_SCHEMA_VERSIONS", "CheckResult", "Lead", "RunError", "RunRecord", "build_report",
           "leading_problem"]  # CheckResult and RunError are defined in report.document, beside the Report holding them

SCHEMA_VERSION = "2.1"  # 2.1: the run verdict ERROR and run.error; 2.0: the node model's sections
SUPPORTED_SCHEMA_VERSIONS = ("2.0", "2.1")
NO_CHECK_FINISHED_CODE = "NO_CHECK_FINISHED"
INTERNAL_ERROR_CODE = "RUN_INTERNAL_ERROR"


@dataclass(slots=True)
class RunRecord:
    """Everything a run accumulates until the report is written."""

    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    argv: list[str] = field(default_factory=list)
    checks: dict[str, CheckResult] = field(default_factory=dict)
    collected: list[str] = field(default_factory=list)
    interrupted: bool = False
    interruption: str | None = None
    startup_s: float | None = None
    selection: Selection = field(default_factory=Selection)
    internal_error: str | None = None
    """One line: what crashed inside preflight or pytest (an INTERNALERROR), if anything did."""
    internal_detail: str = ""

    def add(self, result: CheckResult) -> None:
        """Store (or replace) a check's result."""
        self.checks[result.id] = result

    def statuses(self) -> list[Status]:
        """Every check's status, plus ERROR when the run was cut short."""
        found = [c.verdict.status for c in self.checks.values()]
        return found + ([Status.ERROR] if self.interrupted else [])

    def error(self) -> RunError | None:
        """Why the run could not judge the node: no check finished (an interrupted run says so itself), or
        preflight crashed (an INTERNALERROR); None for a run that judged it."""
        if self.internal_error is None and (self.checks or self.interrupted):
            return None
        cause = self.internal_error or ("no check matches the selection (-k / -m)" if not self.collected
                                        else "the session ended without running one")
        if not self.checks:
            return RunError(NO_CHECK_FINISHED_CODE, f"no check finished: {cause}",
                            "Nothing about the node was judged. Fix the cause named here (a location preflight "
                            "cannot write, a broken plugin) and run preflight again; report it with the JSON "
                            "report attached if it is preflight's own fault.", self.internal_detail)
        done = len(self.checks)
        return RunError(INTERNAL_ERROR_CODE, f"preflight stopped after {done} of {len(self.collected) or done} "
                        f"checks: {cause}",
                        "The checks that did not run judged nothing. Fix the cause named here and run preflight "
                        "again; report it with the JSON report attached if it is preflight's own fault.",
                        self.internal_detail)

    def verdict(self) -> RunVerdict:
        """READY / DEGRADED / NOT READY for the node, or ERROR when it could not be judged."""
        return run_verdict(self.statuses(), judged=self.error() is None)

    def not_run(self) -> list[str]:
        """Collected checks that never finished (an interrupted or timed-out run)."""
        return [nodeid for nodeid in self.collected if nodeid not in self.checks]


INTERRUPTED_CODE = "RUN_INTERRUPTED"
ERROR_CODE = "CHECK_ERROR"


@dataclass(frozen=True, slots=True)
class Lead:
    """What a one-line answer names after the verdict: the first problem of the one order (or the
    interruption of a run cut short), with how many more problems there are."""

    code: str
    summary: str
    title: str
    check: str | None  # the check's id, None for an interruption
    more: int


def leading_problem(report: Report) -> Lead | None:
    """The problem the verdict leads with (``--oneline``, the HTML heading), or None when there is none.

    A run that could not judge the node (verdict ERROR) names why first (``run.error``). An interrupted
    run names the interruption first, whatever the checks found before it (a WARN seen before Ctrl-C is
    not why the node is NOT READY), with how many checks did not run."""
    found = report.problems
    error = report.run.error
    if report.verdict is RunVerdict.ERROR and error is not None:
        return Lead(error.code or ERROR_CODE, error.summary, "", None, len(found))
    if report.run.interrupted:
        not_run = len(report.not_run)
        summary = report.run.interruption or "the run was interrupted"
        if not_run:  # the count first: a short line cuts the reason, never how much is missing
            summary = f"{not_run} check{'s' if not_run != 1 else ''} did not run ({summary})"
        return Lead(INTERRUPTED_CODE, summary, "", None, len(found))
    if not found:
        return None
    worst = found[0]
    return Lead(worst.verdict.code or ERROR_CODE, worst.verdict.summary, worst.title, worst.id, len(found) - 1)


def build_report(record: RunRecord, *, node: dict[str, Any], environment: dict[str, str],
                 options: dict[str, Any], exit_code: int | None,
                 sections: dict[str, Any] | None = None) -> Report:
    """The report of what ``record`` holds; ``sections`` are optional top-level blocks (``rehearsal``)
    that never replace a core key."""
    finished = datetime.now(timezone.utc)
    counts = Counter(c.verdict.status for c in record.checks.values())
    selection = record.selection.as_dict()
    run = RunInfo(
        started_at=record.started_at.isoformat(),
        finished_at=finished.isoformat(),
        duration_s=round((finished - record.started_at).total_seconds(), 3),
        argv=tuple(record.argv),
        options=options,
        interrupted=record.interrupted,
        interruption=record.interruption,
        startup_s=record.startup_s,
        exit_code=exit_code,
        cpu_rehearsal=bool(options.get("cpu")),
        selection=RunSelection.from_json(selection),
        error=record.error(),
    )
    return Report(schema_version=SCHEMA_VERSION, tool_version=preflight.__version__, run=run,
                  verdict=record.verdict(), summary={s.value: counts.get(s, 0) for s in Status},
                  node=NodeFacts(node), environment=environment,
                  checks=tuple(sorted(record.checks.values(), key=lambda c: _order(record.collected, c.id))),
                  not_run=tuple(record.not_run()), sections=dict(sections or {}))


def _order(collected: list[str], nodeid: str) -> int:
    try:
        return collected.index(nodeid)
    except ValueError:
        return len(collected)
