"""Verdicts: what a judge decides and what a check records.

A judge is a pure function that returns a :class:`Verdict`; a check hands it to the ``record``
fixture. Everything the report shows about a check (status, summary, code, remediation, metrics,
evidence, views) lives on the verdict, so judges can be unit-tested without pytest.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from preflight.errors import EXIT_NOT_READY, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # the typing of ``**parts``: a name for mypy only, never imported at run time
    from typing_extensions import Unpack

CODE_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]*$")
METRIC_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


class Status(str, enum.Enum):
    """The five ends of a check, ordered from best to worst by :attr:`rank`."""

    PASS = "PASS"
    SKIP = "SKIP"
    WARN = "WARN"
    ERROR = "ERROR"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        """Severity used by :func:`worst`: FAIL > ERROR > WARN > SKIP > PASS. The one status order: every
        list of checks or problems sorts by it."""
        return _RANK[self]

    @property
    def is_problem(self) -> bool:
        """WARN and worse: what the verdict block, the HTML and the JSON's ``problems`` list."""
        return _RANK[self] >= _RANK[Status.WARN]


_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}
PROBLEM_STATUSES = tuple(sorted((s for s in Status if s.is_problem), key=lambda s: -s.rank))
"""The statuses that are problems (WARN and worse), worst first: FAIL, ERROR, WARN."""


class RunVerdict(str, enum.Enum):
    """The one-line answer for the whole node. ``ERROR``: preflight itself could not judge the node (no
    check finished, or preflight crashed before it found a fault); never read as READY."""

    READY = "READY"
    DEGRADED = "DEGRADED"
    NOT_READY = "NOT READY"
    ERROR = "ERROR"

    @property
    def rank(self) -> int:
        """Severity, for lists of nodes worst first: NOT READY > ERROR (not judged) > DEGRADED > READY."""
        return _VERDICT_RANK[self]

    def exit_code(self, *, strict: bool = False) -> int:
        """0 ready or degraded (1 for degraded with ``strict``), 1 not ready, 2 could not judge."""
        if self is RunVerdict.ERROR:
            return EXIT_USAGE
        if self is RunVerdict.NOT_READY or (self is RunVerdict.DEGRADED and strict):
            return EXIT_NOT_READY
        return EXIT_OK


_VERDICT_RANK = {RunVerdict.READY: 0, RunVerdict.DEGRADED: 1, RunVerdict.ERROR: 2, RunVerdict.NOT_READY: 3}
RUN_VERDICTS = tuple(v.value for v in RunVerdict)
"""Every run verdict as the report spells it, best first: the one order every writer uses."""


@dataclass(frozen=True, slots=True)
class Metric:
    """A named figure with its unit, e.g. ``Metric("busbw_peak", 231.4, "GB/s")``."""

    name: str
    value: float | int | str | bool | None
    unit: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not METRIC_NAME_PATTERN.match(self.name):
            raise ValueError(f"metric names are snake_case with the unit kept apart: {self.name!r}")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise ValueError(f"metric {self.name!r} is not finite: {self.value!r}")

    def as_dict(self) -> dict[str, Any]:
        """JSON form used by the report."""
        return {"name": self.name, "value": self.value, "unit": self.unit, "labels": dict(self.labels)}


@dataclass(frozen=True, slots=True)
class View:
    """Structured data the HTML shows in a dedicated way.

    ``kind`` selects the template ``report/templates/views/<kind>.html.j2``; ``data`` is plain
    JSON. Known kinds: ``table`` (``columns``: list of str, ``rows``: list of lists,
    ``highlight``: row indices to mark), ``matrix`` and ``chart`` (see their templates).
    """

    kind: str
    title: str
    data: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """JSON form used by the report."""
        return {"kind": self.kind, "title": self.title, "data": dict(self.data)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The decision of one check.

    WARN and FAIL must carry a stable ``code`` (UPPER_SNAKE) and a ``remediation`` a person can
    act on; SKIP carries its reason in ``summary``.
    """

    status: Status
    summary: str
    code: str | None = None
    remediation: str | None = None
    metrics: tuple[Metric, ...] = ()
    evidence: Mapping[str, str] = field(default_factory=dict)
    views: tuple[View, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code is not None and not CODE_PATTERN.match(self.code):
            raise ValueError(f"verdict code must be UPPER_SNAKE: {self.code!r}")
        if self.status in (Status.WARN, Status.FAIL) and not (self.code and self.remediation):
            raise ValueError(f"{self.status.value} needs a code and a remediation: {self.summary!r}")

    def with_extra(
        self,
        *,
        metrics: Iterable[Metric] = (),
        evidence: Mapping[str, str] | None = None,
        views: Iterable[View] = (),
    ) -> Verdict:
        """A copy with more metrics, evidence or views appended."""
        return Verdict(
            status=self.status,
            summary=self.summary,
            code=self.code,
            remediation=self.remediation,
            metrics=self.metrics + tuple(metrics),
            evidence={**self.evidence, **(evidence or {})},
            views=self.views + tuple(views),
            details=self.details,
        )



class VerdictParts(TypedDict, total=False):
    """What a verdict carries beside its status, code, summary and remediation: the keywords of
    :func:`passed`, :func:`warn`, :func:`fail`, :func:`skip` and :func:`error` (a judge may build them once)."""

    metrics: tuple[Metric, ...]
    evidence: Mapping[str, str]
    views: tuple[View, ...]
    details: Mapping[str, Any]


class VerdictNotes(VerdictParts, total=False):
    """:class:`VerdictParts` and a remediation: what PASS, SKIP and ERROR may also carry (WARN and FAIL take it
    as an argument)."""

    remediation: str | None


def passed(summary: str, **extra: Unpack[VerdictNotes]) -> Verdict:
    """A PASS verdict."""
    return Verdict(status=Status.PASS, summary=summary, **extra)


def warn(code: str, summary: str, remediation: str, **extra: Unpack[VerdictParts]) -> Verdict:
    """A WARN verdict: the job will run, but something costs time or money."""
    return Verdict(status=Status.WARN, code=code, summary=summary, remediation=remediation, **extra)


def fail(code: str, summary: str, remediation: str, **extra: Unpack[VerdictParts]) -> Verdict:
    """A FAIL verdict: the job will break or badly underperform."""
    return Verdict(status=Status.FAIL, code=code, summary=summary, remediation=remediation, **extra)


def skip(reason: str, **extra: Unpack[VerdictNotes]) -> Verdict:
    """A SKIP verdict; ``reason`` says why the check does not apply here."""
    return Verdict(status=Status.SKIP, summary=reason, **extra)


def error(summary: str, code: str = "CHECK_ERROR", **extra: Unpack[VerdictNotes]) -> Verdict:
    """An ERROR verdict: the check itself could not decide (a probe crashed or timed out)."""
    return Verdict(status=Status.ERROR, code=code, summary=summary, **extra)


def worst(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The most severe verdict of several (the first one among equals), or None when empty."""
    best: Verdict | None = None
    for verdict in verdicts:
        if best is None or verdict.status.rank > best.status.rank:
            best = verdict
    return best


def run_verdict(statuses: Iterable[Status], *, judged: bool = True) -> RunVerdict:
    """READY with no FAIL/ERROR/WARN, DEGRADED with WARN only, NOT READY with any FAIL or ERROR.
    ``judged`` false (no check finished, or preflight crashed): ERROR, unless a FAIL was already found."""
    seen = set(statuses)
    if Status.FAIL in seen:
        return RunVerdict.NOT_READY
    if not judged:
        return RunVerdict.ERROR
    if Status.ERROR in seen:
        return RunVerdict.NOT_READY
    if Status.WARN in seen:
        return RunVerdict.DEGRADED
    return RunVerdict.READY
