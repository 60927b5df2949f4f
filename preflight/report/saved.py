"""Reading a saved ``preflight.json`` back: only a preflight report of a schema version this
release understands is accepted; anything else is refused with a one-line reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from preflight.report.model import SUPPORTED_SCHEMA_VERSIONS

REQUIRED_KEYS = ("verdict", "run", "node", "checks", "summary")


class UnreadableReport(ValueError):
    """The file is missing, not JSON, not a preflight report, or of an unknown schema version."""


def load_report(path: Path) -> dict[str, Any]:
    """The report dict from ``path``; raises :class:`UnreadableReport` saying what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UnreadableReport(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UnreadableReport(f"{path} is not a preflight report (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UnreadableReport(f"{path} is not a preflight report (not JSON: {exc})") from None
    return check_report(data, str(path))


def check_report(data: Any, where: str) -> dict[str, Any]:
    """``data`` itself when it is a preflight report of a supported schema version."""
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(tool, dict) or tool.get("name") != "preflight":
        raise UnreadableReport(f"{where} is not a preflight report (no tool.name 'preflight')")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(SUPPORTED_SCHEMA_VERSIONS)
        raise UnreadableReport(f"{where} has report schema version {version!r}; this preflight reads {supported} "
                               "(use the preflight release that wrote it)")
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing or not isinstance(data.get("checks"), list):
        absent = ", ".join(missing) or "checks list"
        raise UnreadableReport(f"{where} is not a complete preflight report (missing {absent})")
    return data
