"""The fleet report's HTML: one self-contained page (same rules as the node report: autoescape,
no script, a Content-Security-Policy that forbids loading anything)."""

from __future__ import annotations

from typing import Any

import jinja2

from preflight.outcome import RunVerdict
from preflight.report.html import CSP, TEMPLATES, format_value


def render_fleet_html(fleet: dict[str, Any]) -> str:
    """Render the fleet dict (as written to fleet.json) to one HTML document."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["value"] = format_value
    nodes = sorted(fleet["nodes"], key=lambda n: (-RunVerdict(n["verdict"]).rank, not n["bandwidth_outlier_in"],
                                                  n["name"]))
    problem_checks = [c for c in fleet["checks"] if c["problem_nodes"]]
    return env.get_template("fleet.html.j2").render(fleet=fleet, nodes=nodes, problem_checks=problem_checks, csp=CSP)
