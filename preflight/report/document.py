"""The typed report every writer reads: built once at the end of a run (``model.build_report``) or read
back from a saved ``preflight.json`` (``Report.from_json``), written by ``Report.to_json``.

``to_json`` is the file's exact shape and key order (``preflight/report/schema.json``). ``from_json``
takes what the schema lets through, old files too (2.0 has no ``run.error``, older ones no
``problems`` or ``run.selection``): a key the schema does not require may be absent. The blocks the
schema leaves free-form (the node's facts, a view's data, the options, a section such as ``rehearsal``)
stay JSON, read through :class:`NodeFacts`' accessors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from preflight.codes import kind_of
from preflight.outcome import Metric, RunVerdict, Status, Verdict, View

JsonObject = Mapping[str, Any]
"""A block the schema leaves free-form (a fact, a view's data, an option's value): JSON as parsed."""


class MalformedReport(ValueError):
    """The data passed the schema but does not make a report (a value of the wrong kind inside it)."""


@dataclass(frozen=True, slots=True)
class RunError:
    """Why preflight could not judge the node (the run verdict ERROR, exit code 2): a code, one line of
    cause, what to do, and the raw detail (a traceback) for a bug report."""

    code: str
    summary: str
    remediation: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
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
    gpu: JsonObject | None = None  # the GPU a per-GPU check is about (``Node.gpu_reference``)

    @property
    def status(self) -> Status:
        return self.verdict.status

    @property
    def is_problem(self) -> bool:
        """Ended FAIL, ERROR or WARN."""
        return self.verdict.status.is_problem

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        v = self.verdict
        return {
            "id": self.id,
            "gpu": dict(self.gpu) if self.gpu is not None else None,
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

    @classmethod
    def from_json(cls, data: JsonObject) -> CheckResult:
        """A check of a saved report (``gpu``, ``details`` and a metric's ``labels`` may be absent)."""
        metrics = tuple(Metric(_text(m["name"]), m["value"], _text(m.get("unit", "")), dict(_object(m.get("labels"))))
                        for m in _objects(data.get("metrics")))
        views = tuple(View(_text(v["kind"]), _text(v["title"]), dict(_object(v["data"])))
                      for v in _objects(data.get("views")))
        verdict = Verdict(status=Status(data["status"]), summary=_text(data["summary"]),
                          code=_optional_text(data.get("code")), remediation=_optional_text(data.get("remediation")),
                          metrics=metrics, evidence=dict(_object(data.get("evidence"))), views=views,
                          details=dict(_object(data.get("details"))))
        gpu = data.get("gpu")
        return cls(id=_text(data["id"]), name=_text(data["name"]), title=_text(data["title"]),
                   group=_text(data["group"]), verdict=verdict, duration_s=_number(data["duration_s"]),
                   gpu=dict(gpu) if isinstance(gpu, Mapping) else None)


@dataclass(frozen=True, slots=True)
class Problem:
    """One entry of the report's ``problems``: a check that ended FAIL, ERROR or WARN, with its code's class."""

    id: str
    status: Status
    code: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status.value, "code": self.code, "kind": kind_of(self.code).value}


@dataclass(frozen=True, slots=True)
class RunSelection:
    """``run.selection``: what chose the checks, and how many of the suite's were left."""

    keyword: str | None
    markexpr: str | None
    profile: str
    strategy: tuple[str, ...] | None
    slow: bool
    collected: int
    selected: int
    deselected: int
    partial: bool

    def as_dict(self) -> dict[str, Any]:
        return {"keyword": self.keyword, "markexpr": self.markexpr, "profile": self.profile,
                "strategy": list(self.strategy) if self.strategy is not None else None, "slow": self.slow,
                "collected": self.collected, "selected": self.selected, "deselected": self.deselected,
                "partial": self.partial}

    @property
    def note(self) -> str | None:
        """``1 of 45 checks selected`` when only some of the suite's checks were selected, else None."""
        return f"{self.selected} of {self.collected} checks selected" if self.partial else None

    @property
    def flags(self) -> str:
        """What selected them, as the user typed it: ``-k ddp -m 'not slow'`` (empty when nothing did)."""
        parts = []
        for flag, value in (("-k", self.keyword), ("-m", self.markexpr)):
            if value:
                parts.append(f"{flag} {value}" if " " not in value else f"{flag} '{value}'")
        return " ".join(parts)

    @classmethod
    def from_json(cls, data: JsonObject) -> RunSelection:
        strategy = data["strategy"]
        return cls(_optional_text(data["keyword"]), _optional_text(data["markexpr"]), _text(data["profile"]),
                   _texts(strategy) if strategy is not None else None, bool(data["slow"]),
                   _integer(data["collected"]), _integer(data["selected"]), _integer(data["deselected"]),
                   bool(data["partial"]))


@dataclass(frozen=True, slots=True)
class RunInfo:
    """``run``: when and how preflight ran, and whether it finished."""

    started_at: str
    finished_at: str
    duration_s: float
    argv: tuple[str, ...]
    options: JsonObject
    interrupted: bool
    interruption: str | None
    startup_s: float | None
    exit_code: int | None
    cpu_rehearsal: bool = False
    selection: RunSelection | None = None  # None: a report written before the selection was recorded
    error: RunError | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "started_at": self.started_at, "finished_at": self.finished_at, "duration_s": self.duration_s,
            "argv": list(self.argv), "options": dict(self.options), "interrupted": self.interrupted,
            "interruption": self.interruption, "startup_s": self.startup_s, "exit_code": self.exit_code,
            "cpu_rehearsal": self.cpu_rehearsal,
        }
        if self.selection is not None:
            out["selection"] = self.selection.as_dict()
        out["error"] = self.error.as_dict() if self.error is not None else None
        return out

    @property
    def profile(self) -> str | None:
        """The ``--profile`` the run was given (``quick``, ``full``), as its options recorded it."""
        value = self.options.get("profile")
        return str(value) if value else None

    @classmethod
    def from_json(cls, data: JsonObject) -> RunInfo:
        selection, error = data.get("selection"), data.get("error")
        startup, code = data.get("startup_s"), data["exit_code"]
        return cls(started_at=_text(data["started_at"]), finished_at=_text(data["finished_at"]),
                   duration_s=_number(data["duration_s"]), argv=_texts(data["argv"]),
                   options=dict(_object(data["options"])), interrupted=bool(data["interrupted"]),
                   interruption=_optional_text(data.get("interruption")),
                   startup_s=_number(startup) if startup is not None else None,
                   exit_code=_integer(code) if code is not None else None,
                   cpu_rehearsal=bool(data.get("cpu_rehearsal")),
                   selection=RunSelection.from_json(selection) if isinstance(selection, Mapping) else None,
                   error=RunError(_text(error["code"]), _text(error["summary"]), _text(error["remediation"]),
                                  _text(error.get("detail", ""))) if isinstance(error, Mapping) else None)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """``node``: the node model's sections and the areas' facts, free-form JSON below its top level."""

    facts: JsonObject = field(default_factory=dict)

    @property
    def hostname(self) -> str | None:
        value = self.facts.get("hostname")
        return value if isinstance(value, str) else None

    def section(self, name: str) -> JsonObject:
        """A section of the node (``gpus``, ``torch``, ``job``, ``topology``), empty when it is not an object."""
        value = self.facts.get(name)
        return value if isinstance(value, Mapping) else {}

    @property
    def gpus(self) -> list[JsonObject]:
        """The GPUs NVML listed (the ``gpus`` section's list)."""
        return [g for g in self.section("gpus").get("gpus") or [] if isinstance(g, Mapping)]


@dataclass(frozen=True, slots=True)
class Report:
    """One node's report: the verdict, the checks in collection order, the run, the node's facts."""

    schema_version: str
    tool_version: str
    run: RunInfo
    verdict: RunVerdict
    summary: Mapping[str, int]  # checks per status, in the file's order (the Status order when written)
    node: NodeFacts
    environment: Mapping[str, str]
    checks: tuple[CheckResult, ...]
    not_run: tuple[str, ...]
    sections: JsonObject = field(default_factory=dict)  # top-level blocks beside the core (``rehearsal``)

    TOOL_NAME = "preflight"

    @property
    def problems(self) -> list[CheckResult]:
        """The problems (FAIL, ERROR, WARN) in the one order every output uses: the terminal's verdict block,
        ``--oneline``, the HTML, the JSON's ``problems`` and ``preflight merge``. By the class of the code
        (what needs the hardware replaced, other hardware faults, what stops the job, what it costs), then
        worst status first; equal problems keep the report's order."""
        return ordered_problems(self.checks)

    @property
    def label(self) -> str:
        """The verdict as people read it: ``READY (CPU rehearsal)`` when the run rehearsed on CPU ranks
        (``--cpu``), so a CPU run never passes for a GPU node's acceptance."""
        return f"{self.verdict.value} ({CPU_REHEARSAL_LABEL})" if self.run.cpu_rehearsal else self.verdict.value

    @property
    def selection_note(self) -> str | None:
        """``1 of 45 checks selected`` for a partial run, else None."""
        return self.run.selection.note if self.run.selection is not None else None

    @property
    def selection_flags(self) -> str:
        return self.run.selection.flags if self.run.selection is not None else ""

    @property
    def headline(self) -> str:
        """The verdict with what the run covered: ``READY: 1 of 45 checks selected`` for a partial run;
        ``ERROR: NO_CHECK_FINISHED`` when the run could not judge the node."""
        if self.run.error is not None and self.verdict is RunVerdict.ERROR:
            return f"{self.label}: {self.run.error.code}"
        note = self.selection_note
        return f"{self.label}: {note}" if note else self.label

    def to_json(self) -> dict[str, Any]:
        """The report as ``preflight.json`` holds it (key order included)."""
        core: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool": {"name": self.TOOL_NAME, "version": self.tool_version},
            "run": self.run.as_dict(),
            "verdict": self.verdict.value,
            "summary": dict(self.summary),
            "node": dict(self.node.facts),
            "environment": dict(self.environment),
            "checks": [c.as_dict() for c in self.checks],
            "problems": [Problem(c.id, c.status, c.verdict.code).as_dict() for c in self.problems],
            "not_run": list(self.not_run),
        }
        return {**core, **{name: data for name, data in self.sections.items() if name not in core}}

    @classmethod
    def from_json(cls, data: JsonObject) -> Report:
        """The report of a ``preflight.json`` the schema accepted (``saved.check_report``); raises
        :class:`MalformedReport` on a value the schema allows but a report cannot hold."""
        try:
            return cls._parse(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"no {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
            raise MalformedReport(what) from None

    @classmethod
    def _parse(cls, data: JsonObject) -> Report:
        tool = _object(data["tool"])
        if tool.get("name") != cls.TOOL_NAME:
            raise ValueError("no tool.name 'preflight'")
        summary = {_text(k): _integer(v) for k, v in _object(data["summary"]).items()}
        environment = {_text(k): _text(v) for k, v in _object(data["environment"]).items()}
        core = {"schema_version", "tool", "run", "verdict", "summary", "node", "environment", "checks", "problems",
                "not_run"}
        return cls(schema_version=_text(data["schema_version"]), tool_version=_text(tool["version"]),
                   run=RunInfo.from_json(_object(data["run"])), verdict=RunVerdict(data["verdict"]),
                   summary=summary, node=NodeFacts(dict(_object(data["node"]))), environment=environment,
                   checks=tuple(CheckResult.from_json(c) for c in _objects(data["checks"])),
                   not_run=_texts(data["not_run"]),
                   sections={k: v for k, v in data.items() if k not in core})


CPU_REHEARSAL_LABEL = "CPU rehearsal"


def ordered_problems(checks: tuple[CheckResult, ...] | list[CheckResult]) -> list[CheckResult]:
    """The problems of ``checks`` in the one order of problems (:attr:`Report.problems`)."""
    return sorted((c for c in checks if c.is_problem),
                  key=lambda c: (kind_of(c.verdict.code).rank, -c.status.rank))


def _object(value: Any) -> JsonObject:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _objects(value: Any) -> list[JsonObject]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return [_object(item) for item in value]


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list of text, got {type(value).__name__}")
    return tuple(_text(item) for item in value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return value
