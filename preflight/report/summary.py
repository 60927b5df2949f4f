"""pytest's terminal summary of a preflight run (plain ``pytest`` over the checks; the ``preflight``
command prints its own verdict block, ``report.terminal``): the problems with their fixes, what did
not run, the verdict and where the reports are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflight.outcome import RunVerdict, Status
from preflight.report.document import Report

PROBLEM_MARKUP: dict[Status, dict[str, bool]] = {Status.FAIL: {"red": True}, Status.ERROR: {"purple": True},
                                                 Status.WARN: {"yellow": True}}
VERDICT_MARKUP: dict[RunVerdict, dict[str, bool]] = {RunVerdict.READY: {"green": True},
                                                     RunVerdict.DEGRADED: {"yellow": True}}


def print_summary(tw: Any, report: Report, written: list[Path]) -> None:
    """Write the summary through pytest's terminal writer ``tw`` (its ``section`` and ``line``)."""
    found = report.problems
    if found:
        tw.section("preflight: problems", sep="=", bold=True)
        for check in found:
            v = check.verdict
            tw.line(f"{v.status.value:5} {v.code or ''} {check.id}", bold=True, **PROBLEM_MARKUP[v.status])
            tw.line(f"      {v.summary}")
            if v.remediation:
                tw.line(f"      fix: {v.remediation}")
    if report.not_run:
        tw.line(f"not run: {len(report.not_run)} check(s) ({report.run.interruption})", yellow=True)
    tw.line(f"preflight: {report.headline}", bold=True, **VERDICT_MARKUP.get(report.verdict, {"red": True}))
    tw.line("reports: " + ", ".join(str(p) for p in written))
