"""The report: one in-memory model, serialised to JSON (the source of truth) and rendered to HTML.

``SCHEMA_VERSION`` changes when a consumer of the JSON would have to change; the tool's version is
separate. ``preflight/report/schema.json`` is the JSON Schema of this model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import preflight
from preflight.codes import kind_of
from preflight.outcome import RunVerdict, Status, Verdict, run_verdict
from preflight.report.selection import Selection, selection_note

SCHEMA_VERSION = "2.1"  # 2.1: the run verdict ERROR and run.error; 2.0: the node model's sections
SUPPORTED_SCHEMA_VERSIONS = ("2.0", "2.1")
NO_CHECK_FINISHED_CODE = "NO_CHECK_FINISHED"
INTERNAL_ERROR_CODE = "RUN_INTERNAL_ERROR"


@dataclass(frozen=True, slots=True)
class RunError:
    """Why preflight could not judge the node (the run verdict ERROR, exit code 2): a code, one line of
    cause, what to do, and the raw detail (a traceback) for a bug report."""

    code: str
    summary: str
    remediation: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``run.error``)."""
        return {"code": self.code, "summary": self.summary, "remediation": self.remediation, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's final verdict with where it came from."""

    id: str
    name: str
    title: str
    group: str
    verdict: Verdict
    duration_s: float
    gpu: dict[str, Any] | None = None  # the GPU a per-GPU check is about (``Node.gpu_reference``)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        v = self.verdict
        return {
            "id": self.id,
            "gpu": self.gpu,
            "name": self.name,
            "title": self.title,
            "group": self.group,
            "status": v.status.value,
            "summary": v.summary,
            "code": v.code,
            "remediation": v.remediation,
            "metrics": [m.as_dict() for m in v.metrics],
            "evidence": dict(v.evidence),
            "views": [view.as_dict() for view in v.views],
            "details": dict(v.details),
            "duration_s": round(self.duration_s, 4),
        }


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


CPU_REHEARSAL_LABEL = "CPU rehearsal"


def verdict_label(report: dict[str, Any]) -> str:
    """The verdict as people read it: ``READY (CPU rehearsal)`` when the run rehearsed on CPU ranks
    (``--cpu``), so a CPU run never passes for a GPU node's acceptance."""
    verdict = str(report.get("verdict", "UNKNOWN"))
    run = report.get("run")
    return f"{verdict} ({CPU_REHEARSAL_LABEL})" if isinstance(run, dict) and run.get("cpu_rehearsal") else verdict


def headline(report: dict[str, Any]) -> str:
    """The verdict with what the run covered: ``READY: 1 of 45 checks selected`` for a partial run;
    ``ERROR: NO_CHECK_FINISHED`` when the run could not judge the node."""
    run = report.get("run")
    error = run.get("error") if isinstance(run, dict) else None
    if isinstance(error, dict) and error.get("code") and report.get("verdict") == RunVerdict.ERROR.value:
        return f"{verdict_label(report)}: {error['code']}"
    note = selection_note(report)
    return f"{verdict_label(report)}: {note}" if note else verdict_label(report)


def status_rank(status: object) -> int:
    """:attr:`Status.rank` of a status word from a report (-1 for a word that is not a status)."""
    try:
        return Status(str(status)).rank
    except ValueError:
        return -1


def is_problem(check: Mapping[str, Any]) -> bool:
    """A check of a report that ended FAIL, ERROR or WARN."""
    return status_rank(check.get("status")) >= Status.WARN.rank


def problem_key(check: Mapping[str, Any]) -> tuple[int, int]:
    """Where a problem goes in the one order of problems: by the class of its code (what needs the hardware
    replaced, other hardware faults, what stops the job, what it costs; ``preflight.codes.Kind``), then
    worst status first. Sorting is stable, so equal problems keep the report's order."""
    return kind_of(check.get("code")).rank, -status_rank(check.get("status"))


def problems(checks: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The problems of a report (or of its checks) in the one order every output uses: the terminal's
    verdict block, ``--oneline``, the HTML, the JSON's ``problems`` and ``preflight merge``."""
    if isinstance(checks, Mapping):
        checks = checks.get("checks") or []
    return sorted((dict(c) for c in checks if isinstance(c, Mapping) and is_problem(c)), key=problem_key)


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


def leading_problem(report: Mapping[str, Any]) -> Lead | None:
    """The problem the verdict leads with (``--oneline``, the HTML heading), or None when there is none.

    A run that could not judge the node (verdict ERROR) names why first (``run.error``). An interrupted
    run names the interruption first, whatever the checks found before it (a WARN seen before Ctrl-C is
    not why the node is NOT READY), with how many checks did not run."""
    found = problems(report)
    run = report.get("run") or {}
    error = run.get("error") or {}
    if report.get("verdict") == "ERROR" and error:
        return Lead(str(error.get("code") or ERROR_CODE), str(error.get("summary") or ""), "", None, len(found))
    if run.get("interrupted"):
        not_run = len(report.get("not_run") or [])
        summary = str(run.get("interruption") or "the run was interrupted")
        if not_run:  # the count first: a short line cuts the reason, never how much is missing
            summary = f"{not_run} check{'s' if not_run != 1 else ''} did not run ({summary})"
        return Lead(INTERRUPTED_CODE, summary, "", None, len(found))
    if not found:
        return None
    worst = found[0]
    return Lead(str(worst.get("code") or ERROR_CODE), str(worst.get("summary") or ""), str(worst.get("title") or ""),
                str(worst.get("id") or ""), len(found) - 1)


def problem_entries(checks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The JSON's ``problems``: each problem's check id, status, code and class, worst first."""
    return [{"id": c.get("id"), "status": c.get("status"), "code": c.get("code"),
             "kind": kind_of(c.get("code")).value} for c in problems(checks)]


def build_report(record: RunRecord, *, node: dict[str, Any], environment: dict[str, str],
                 options: dict[str, Any], exit_code: int | None,
                 sections: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report as plain JSON data; ``sections`` are optional top-level blocks (``rehearsal``)
    that never replace a core key."""
    finished = datetime.now(timezone.utc)
    counts = Counter(c.verdict.status.value for c in record.checks.values())
    checks = sorted(record.checks.values(), key=lambda c: _order(record.collected, c.id))
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "preflight", "version": preflight.__version__},
        "run": {
            "started_at": record.started_at.isoformat(),
            "finished_at": finished.isoformat(),
            "duration_s": round((finished - record.started_at).total_seconds(), 3),
            "argv": list(record.argv),
            "options": options,
            "interrupted": record.interrupted,
            "interruption": record.interruption,
            "startup_s": record.startup_s,
            "exit_code": exit_code,
            "cpu_rehearsal": bool(options.get("cpu")),
            "selection": record.selection.as_dict(),
            "error": error.as_dict() if (error := record.error()) else None,
        },
        "verdict": record.verdict().value,
        "summary": {s.value: counts.get(s.value, 0) for s in Status},
        "node": node,
        "environment": environment,
        "checks": [c.as_dict() for c in checks],
        "problems": [],
        "not_run": record.not_run(),
    }
    report["problems"] = problem_entries(report["checks"])
    extra = {name: data for name, data in (sections or {}).items() if name not in report}
    return {**report, **extra}


def _order(collected: list[str], nodeid: str) -> int:
    try:
        return collected.index(nodeid)
    except ValueError:
        return len(collected)
