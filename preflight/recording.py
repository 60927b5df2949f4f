"""The ``record`` fixture's object, and how a check's phases become one verdict.

A check records a :class:`~preflight.outcome.Verdict`; pytest's own outcome of each phase (setup,
call, teardown) is folded in: a fixture that skipped is SKIP, a setup or teardown that raised is
ERROR, a bare ``assert`` that failed is FAIL, any other exception in the body is ERROR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from preflight.outcome import Metric, Status, Verdict, View, error, fail, passed, skip

ASSERTION_CODE = "CHECK_ASSERTION"
CRASH_CODE = "CHECK_CRASHED"


@dataclass(slots=True)
class CheckState:
    """What one check recorded while it ran."""

    verdict: Verdict | None = None
    metrics: list[Metric] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)
    views: list[View] = field(default_factory=list)
    phases: dict[str, Verdict] = field(default_factory=dict)
    duration_s: float = 0.0

    def final(self) -> Verdict:
        """The verdict of the whole check: the worst phase, with everything recorded attached."""
        ordered = [self.phases[p] for p in ("setup", "call", "teardown") if p in self.phases]
        chosen = ordered[0] if ordered else passed("check did not run")
        for verdict in ordered[1:]:
            if verdict.status.rank > chosen.status.rank:
                chosen = verdict
        return chosen.with_extra(metrics=self.metrics, evidence=self.evidence, views=self.views)


STATE_KEY = pytest.StashKey[CheckState]()


class Recorder:
    """Handed to checks as ``record``: ``record(verdict)``, ``record.metric(...)``, ``record.evidence(...)``."""

    def __init__(self, state: CheckState) -> None:
        self._state = state

    def __call__(self, verdict: Verdict) -> Verdict:
        """Record the check's verdict (a second call replaces the first) and return it."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"record() takes a Verdict, got {type(verdict).__name__}")
        self._state.verdict = verdict
        return verdict

    def metric(self, name: str, value: Any, unit: str = "", **labels: str) -> None:
        """Add a named figure (``unit`` kept apart from the name)."""
        self._state.metrics.append(Metric(name, value, unit, {k: str(v) for k, v in labels.items()}))

    def evidence(self, name: str, text: str) -> None:
        """Add raw text the verdict relied on (command output, log tail)."""
        self._state.evidence[name] = text

    def view(self, view: View) -> None:
        """Add structured data the HTML shows specially (table, matrix, chart)."""
        self._state.views.append(view)


def verdict_for_phase(when: str, report: pytest.TestReport, excinfo: Any, state: CheckState) -> Verdict | None:
    """The verdict one phase contributes, from what pytest saw and what the check recorded."""
    if report.skipped:
        return skip(_skip_reason(report))
    if when == "call":
        if excinfo is not None and not report.skipped:
            return _verdict_for_exception(excinfo)
        return state.verdict or passed("check passed")
    if report.failed:
        message = _first_line(str(report.longrepr)) if report.longrepr else "error"
        return error(f"{when} of the check failed: {message}", code=CRASH_CODE,
                     evidence={f"{when} traceback": str(report.longrepr)})
    return None


def _verdict_for_exception(excinfo: Any) -> Verdict:
    exc = excinfo.value
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, AssertionError):
        return fail(ASSERTION_CODE, _first_line(text), "Read the evidence of this check; it states what was expected.",
                    evidence={"assertion": text})
    return error(f"the check crashed: {type(exc).__name__}: {_first_line(text)}", code=CRASH_CODE,
                 evidence={"traceback": str(excinfo.getrepr(style="short"))})


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "skipped")
    return reason.removeprefix("Skipped: ")


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else text


def apply_to_report(verdict: Verdict, report: pytest.TestReport, item: pytest.Item) -> None:
    """Make pytest's outcome agree with the verdict (FAIL/ERROR failed, SKIP skipped, WARN/PASS passed)."""
    if verdict.status in (Status.FAIL, Status.ERROR) and report.outcome != "failed":
        report.outcome = "failed"
        fix = f"\nFix: {verdict.remediation}" if verdict.remediation else ""
        report.longrepr = f"[{verdict.code}] {verdict.summary}{fix}"  # the JUnit failure body a CI view shows
    elif verdict.status is Status.SKIP and report.outcome != "skipped":
        path, lineno, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (lineno or 0) + 1, f"Skipped: {verdict.summary}")
