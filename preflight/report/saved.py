"""Reading a saved ``preflight.json`` back: only a preflight report of a schema version this
release understands, whose envelope matches the shipped schema, is accepted; anything else is
refused with a one-line reason naming the file and the first problem."""

from __future__ import annotations

import json
from typing import Any

from preflight.inputs import UnreadableInput, read_bytes, shown
from preflight.report.document import MalformedReport, Report
from preflight.report.model import SUPPORTED_SCHEMA_VERSIONS
from preflight.report.validate import first_problem

MAX_DEPTH = 48
"""Deepest nesting accepted. A real report is about 8 levels deep; the HTML renders nested node
facts recursively, so a hand-made 10 000-level document must be refused before it gets there."""


class UnreadableReport(ValueError):
    """The file is missing, not JSON, not a preflight report, or of an unknown schema version."""


def load_report(path: str) -> Report:
    """The report of ``path`` (``-`` for stdin); raises :class:`UnreadableReport` saying what is wrong."""
    name = shown(path)
    try:
        data = read_bytes(path)
    except UnreadableInput as exc:
        raise UnreadableReport(str(exc)) from None
    try:
        parsed = json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise UnreadableReport(f"{name} is not a preflight report (JSON nested too deeply to read)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableReport(f"{name} is not a preflight report (not JSON: {reason})") from None
    if _depth(parsed) > MAX_DEPTH:
        raise UnreadableReport(f"{name} is not a preflight report (nested more than {MAX_DEPTH} levels deep)")
    return check_report(parsed, name)


def check_report(data: Any, where: str) -> Report:
    """The report ``data`` holds when it is a preflight report of a supported schema version."""
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(tool, dict) or tool.get("name") != "preflight":
        raise UnreadableReport(f"{where} is not a preflight report (no tool.name 'preflight')")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(SUPPORTED_SCHEMA_VERSIONS)
        raise UnreadableReport(f"{where} has report schema version {_version(version)}; this preflight reads "
                               f"{supported} (use the preflight release that wrote it)")
    problem = first_problem(data)
    if problem is not None:
        kind = "complete" if " has no " in problem or problem.startswith("no ") else "valid"
        raise UnreadableReport(f"{where} is not a {kind} preflight report: {problem}")
    try:
        return Report.from_json(data)
    except MalformedReport as exc:
        raise UnreadableReport(f"{where} is not a valid preflight report: {exc}") from None


def _refuse_constant(name: str) -> Any:
    """``NaN``/``Infinity`` are not JSON; Python's reader accepts them unless told otherwise."""
    raise ValueError(f"{name} is not a JSON value")


def _version(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, int, float, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _depth(value: Any) -> int:
    """How deeply lists and objects nest (a scalar is 0), counted without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest
