"""Several findings about one plan (a config, a command line, a script) turned into one verdict.

A check records one verdict; a plan can have several problems at once. Each :class:`Finding`
says where it is (a config key path, ``train.py:42``), what is wrong and the fix; the verdict is
the worst finding's, its summary names them all, and the details and a table keep each one.
``Status.PASS`` findings are notes: facts worth showing that are not problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from preflight.outcome import Metric, Status, Verdict, View

NOTES_IN_SUMMARY = 2
"""Notes shown in a PASS summary; the rest are in the details and the evidence."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation: status, stable code, where, what and the fix."""

    status: Status
    code: str
    where: str
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the verdict's details."""
        return {"status": self.status.value, "code": self.code, "where": self.where, "message": self.message,
                "fix": self.fix}


def note(code: str, where: str, message: str) -> Finding:
    """A fact to show, not a problem."""
    return Finding(Status.PASS, code, where, message)


def problem(status: Status, code: str, where: str, message: str, fix: str) -> Finding:
    """A WARN or FAIL finding."""
    return Finding(status, code, where, message, fix)


def findings_verdict(
    findings: Sequence[Finding],
    *,
    ok_summary: str,
    subject: str,
    caveat: str = "",
    metrics: Sequence[Metric] = (),
    details: dict[str, Any] | None = None,
    views: Sequence[View] = (),
) -> Verdict:
    """PASS with ``ok_summary`` when nothing is wrong, else the worst status with every problem named.

    ``caveat`` is appended to the summary and the remediation (e.g. "static analysis can be wrong").
    """
    problems = [f for f in findings if f.status in (Status.WARN, Status.FAIL, Status.ERROR)]
    notes = [f for f in findings if f not in problems]
    data: dict[str, Any] = {**(details or {}), "findings": [f.as_dict() for f in findings]}
    views = (*views, _table(findings, subject)) if findings else tuple(views)
    evidence = {"findings": "\n".join(_line(f) for f in findings)} if findings else {}
    tail = f" ({caveat})" if caveat else ""
    if not problems:
        shown = [f.message for f in notes if f.message][:NOTES_IN_SUMMARY]
        hidden = len([f for f in notes if f.message]) - len(shown)
        extra = "; ".join(shown) + (f" (+{hidden} more in the details)" if hidden > 0 else "")
        summary = ok_summary + (f"; {extra}" if extra else "")
        return Verdict(status=Status.PASS, summary=summary + tail, metrics=tuple(metrics), evidence=evidence,
                       views=views, details=data)
    order = sorted(problems, key=lambda f: -f.status.rank)
    head = order[0]
    more = f"; {len(order) - 1} more: " + "; ".join(f"{f.where}: {f.code}" for f in order[1:]) if len(order) > 1 else ""
    summary = f"{subject}: {head.where}: {head.message}{more}{tail}"
    remediation = " ".join(f"[{f.where}] {f.fix}" for f in order if f.fix) or "See the findings listed."
    if caveat:
        remediation += f" ({caveat})"
    return Verdict(status=head.status, summary=summary, code=head.code, remediation=remediation,
                   metrics=tuple(metrics), evidence=evidence, views=views, details=data)


def _line(finding: Finding) -> str:
    fix = f"  fix: {finding.fix}" if finding.fix else ""
    return f"{finding.status.value:<4} {finding.code} at {finding.where}: {finding.message}{fix}"


def _table(findings: Sequence[Finding], subject: str) -> View:
    rows = [[f.status.value, f.where, f.code, f.message, f.fix] for f in findings]
    highlight = [i for i, f in enumerate(findings) if f.status in (Status.WARN, Status.FAIL)]
    return View(kind="table", title=f"Findings: {subject}",
                data={"columns": ["status", "where", "code", "finding", "fix"], "rows": rows, "highlight": highlight})
