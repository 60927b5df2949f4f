"""The HTML report: a view of the JSON report, one self-contained file, readable offline with
JavaScript off. Every value is escaped (autoescape on explicitly), and a Content-Security-Policy
forbids loading anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from preflight.report.model import headline

TEMPLATES = Path(__file__).resolve().parent / "templates"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
STATUS_ORDER = {"FAIL": 0, "ERROR": 1, "WARN": 2, "SKIP": 3, "PASS": 4}


def format_bytes(value: Any) -> str:
    """``85899345920`` -> ``80.0 GiB``."""
    try:
        size = float(value)
    except (TypeError, ValueError):
        return str(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def format_value(value: Any) -> str:
    """Numbers with sensible precision, everything else as text."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # explicit: select_autoescape would not cover a .html.j2 name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = format_bytes
    env.filters["value"] = format_value
    env.filters["headline"] = headline  # the verdict as the terminal and --oneline say it
    env.tests["mapping"] = lambda v: isinstance(v, dict)
    env.tests["table_like"] = lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
    return env


def render_html(report: dict[str, Any]) -> str:
    """Render the report dict (as written to JSON) to one HTML document."""
    checks = report.get("checks", [])
    problems = sorted((c for c in checks if c["status"] in ("FAIL", "ERROR", "WARN")),
                      key=lambda c: STATUS_ORDER.get(c["status"], 9))
    template = _environment().get_template("report.html.j2")
    return template.render(report=report, problems=problems, checks=checks, csp=CSP)
