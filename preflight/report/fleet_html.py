"""The fleet report's HTML: one self-contained page (same rules as the node report: autoescape,
no script, a Content-Security-Policy that forbids loading anything)."""

from __future__ import annotations

import jinja2

from preflight.outcome import RunVerdict
from preflight.report.fleet import Fleet
from preflight.report.html import CSP, TEMPLATES, format_value


def render_fleet_html(fleet: Fleet) -> str:
    """Render the fleet to one HTML document; the template reads its JSON form (``fleet.json``): nodes not
    ready or not judged first, then bandwidth outliers."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["value"] = format_value
    env.tests["bad_verdict"] = lambda verdict: RunVerdict(verdict).rank >= RunVerdict.ERROR.rank
    rows = sorted(fleet.nodes, key=lambda n: (-n.node.report.verdict.rank, not n.outlier_in, n.node.name))
    problem_checks = [c.as_dict() for c in fleet.checks if c.problem_nodes]
    return env.get_template("fleet.html.j2").render(fleet=fleet.to_json(), nodes=[n.as_dict() for n in rows],
                                                    problem_checks=problem_checks, csp=CSP)
