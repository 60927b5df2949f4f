"""Checking a saved report against the shipped JSON Schema (``schema.json``) before anything reads it.

A report handed to ``preflight report`` or ``preflight merge`` may be hand-edited, truncated or not
a report at all; code that indexes into it would end in a traceback. This module interprets the
schema itself (the keywords it uses; an unknown keyword is refused when the schema is loaded, so
the schema and this reader cannot drift apart silently) and names the first problem in one line.
It is not the ``jsonschema`` package on purpose: that would add five distributions (one of them
compiled) to every GPU node preflight is installed on, for the two sub-commands that read reports.

The ``node`` block is checked only as an object here: its sections change with the node facts
gathered, and every reader of it tolerates missing or odd sections.
"""

from __future__ import annotations

import calendar
import json
import math
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"
LOOSE_PROPERTIES = {"node": {"type": "object"}}
"""Top-level properties checked only by type (see the module docstring)."""

_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "default", "examples", "$comment"})
_KEYWORDS = frozenset({"type", "const", "enum", "required", "properties", "additionalProperties", "items",
                       "minimum", "minLength", "pattern", "format", "$ref", "allOf", "if", "then", "else"})
_TYPE_NAMES = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}
_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))$")


class SchemaError(ValueError):
    """The shipped schema uses something this reader does not interpret (a bug in the release)."""


@cache
def report_schema() -> dict[str, Any]:
    """The shipped schema with the loose properties relaxed; checked for keywords once."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    schema["properties"] = {**schema["properties"], **LOOSE_PROPERTIES}
    _check_keywords(schema, "#")
    return schema


def first_problem(data: Any, schema: dict[str, Any] | None = None) -> str | None:
    """What is wrong with ``data`` first (in document order), or None when it matches the schema."""
    root = report_schema() if schema is None else schema
    return next(_problems(data, root, "", root), None)


def _check_keywords(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        if isinstance(schema, bool):
            return
        raise SchemaError(f"{where}: a schema must be an object")
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise SchemaError(f"{where}: keywords {sorted(unknown)} are not interpreted by preflight.report.validate")
    ref = schema.get("$ref")
    if ref is not None and not str(ref).startswith("#/$defs/"):
        raise SchemaError(f"{where}: only local '#/$defs/...' references are interpreted, not {ref!r}")
    if schema.get("format") not in (None, "date-time"):
        raise SchemaError(f"{where}: format {schema['format']!r} is not interpreted")
    for key in ("properties", "$defs"):
        for name, sub in schema.get(key, {}).items():
            _check_keywords(sub, f"{where}/{key}/{name}")
    for key in ("additionalProperties", "items", "if", "then", "else"):
        if key in schema:
            _check_keywords(schema[key], f"{where}/{key}")
    for index, sub in enumerate(schema.get("allOf", [])):
        _check_keywords(sub, f"{where}/allOf/{index}")


def _problems(value: Any, schema: Any, where: str, root: dict[str, Any]) -> Iterator[str]:
    """Every mismatch of ``value`` with ``schema``, as ``where: what`` lines, in document order."""
    if schema is True:
        return
    if schema is False:
        yield f"{_label(where)} is not allowed"
        return
    if "$ref" in schema:
        target = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
        yield from _problems(value, target, where, root)
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, name) for name in wanted):
            expected = " or ".join(_TYPE_NAMES[name] for name in wanted)
            yield f"{_label(where)} is {_describe(value)}, expected {expected}"
            return  # the other keywords assume the type
    if "const" in schema and not _same(value, schema["const"]):
        yield f"{_label(where)} is {_short(value)}, expected {_short(schema['const'])}"
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        yield f"{_label(where)} is {_short(value)}, expected one of {', '.join(_short(o) for o in schema['enum'])}"
    if isinstance(value, dict):
        yield from _object_problems(value, schema, where, root)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _problems(item, schema["items"], f"{where}[{index}]", root)
    if isinstance(value, str):
        yield from _string_problems(value, schema, where)
    if _is_type(value, "number") and "minimum" in schema and value < schema["minimum"]:
        yield f"{_label(where)} is {_short(value)}, below the minimum {schema['minimum']}"
    for sub in schema.get("allOf", []):
        yield from _problems(value, sub, where, root)
    if "if" in schema:
        matched = next(_problems(value, schema["if"], where, root), None) is None
        branch = schema.get("then" if matched else "else")
        if branch is not None:
            yield from _problems(value, branch, where, root)


def _object_problems(value: dict[str, Any], schema: dict[str, Any], where: str, root: dict[str, Any]) -> Iterator[str]:
    for key in schema.get("required", []):
        if key not in value:
            yield f"{_label(where)} has no {key!r}" if where else f"no {key!r} field"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        path = f"{where}.{_key(key)}" if where else _key(key)
        if key in properties:
            yield from _problems(item, properties[key], path, root)
        else:
            yield from _problems(item, extra, path, root)


def _string_problems(value: str, schema: dict[str, Any], where: str) -> Iterator[str]:
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield f"{_label(where)} is {_short(value)}, shorter than {schema['minLength']} character(s)"
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        yield f"{_label(where)} is {_short(value)}, which does not match {schema['pattern']}"
    if schema.get("format") == "date-time" and not _is_date_time(value):
        yield f"{_label(where)} is {_short(value)}, not an RFC 3339 date-time"


def _is_type(value: Any, name: str) -> bool:
    """JSON Schema's types over what ``json.loads`` returns (``true`` is not a number; ``2.0`` is an integer)."""
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return name == "number" or isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _is_date_time(text: str) -> bool:
    match = _DATE_TIME.match(text)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return False
    offset_ok = match[7] is None or (int(match[7]) < 24 and int(match[8]) < 60)
    return hour < 24 and minute < 60 and second <= 60 and offset_ok


def _label(where: str) -> str:
    return where or "the document"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else json.dumps(key)


def _describe(value: Any) -> str:
    for name in ("null", "boolean", "object", "array", "string"):
        if _is_type(value, name):
            return f"{_TYPE_NAMES[name]} ({_short(value)})" if name == "string" else _TYPE_NAMES[name]
    return f"a number ({_short(value)})"


def _short(value: Any, limit: int = 40) -> str:
    """A value as JSON, on one line, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=True, default=str) if not isinstance(value, (dict, list)) else (
        "{...}" if isinstance(value, dict) else "[...]")
    return text if len(text) <= limit else text[: limit - 3] + "..."
