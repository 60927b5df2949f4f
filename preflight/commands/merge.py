"""``preflight merge REPORT.json ... [--out DIR]``: one fleet report from many nodes' reports.

Writes ``DIR/fleet.json`` and ``DIR/fleet.html`` (default DIR: ``fleet``): a row per node, which
checks failed where, and the bandwidth spread across nodes of the same GPU kind with outliers
flagged (rule in ``preflight.report.fleet``). Exit code 0 when every node is READY or DEGRADED
and none is a bandwidth outlier, 1 otherwise, 2 for unreadable input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from preflight.errors import EXIT_NOT_READY, EXIT_OK, UsageError
from preflight.options import UsageParser
from preflight.report.fleet import NodeReport, build_fleet, unique_names
from preflight.report.fleet_html import render_fleet_html
from preflight.report.saved import UnreadableReport, load_report
from preflight.report.writer import dump_json, write_atomic


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="preflight merge", description="Merge nodes' preflight.json files into one fleet report "
                     "(fleet.json and fleet.html).")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json", help="one preflight.json per node")
    parser.add_argument("--out", type=Path, default=Path("fleet"), metavar="DIR",
                        help="where fleet.json and fleet.html are written (default ./fleet)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    loaded = []
    for path in args.reports:
        try:
            loaded.append((path, load_report(path)))
        except UnreadableReport as exc:
            raise UsageError(str(exc)) from None
    names = unique_names([str(r.get("node", {}).get("hostname") or p.stem) for p, r in loaded],
                         [str(p) for p, _ in loaded])
    fleet = build_fleet([NodeReport(name, str(path), report)
                         for name, (path, report) in zip(names, loaded, strict=True)])
    json_path, html_path = args.out / "fleet.json", args.out / "fleet.html"
    try:
        write_atomic(json_path, dump_json(fleet))
        write_atomic(html_path, render_fleet_html(fleet))
    except OSError as exc:
        raise UsageError(f"cannot write the fleet report to {args.out}: {exc.strerror or exc}") from None
    counts = ", ".join(f"{n} {v}" for v, n in fleet["verdicts"].items())
    outliers = fleet["suspect"]
    suspect = f", {len(outliers)} bandwidth outlier(s): {', '.join(outliers)}" if outliers else ""
    print(f"fleet: {len(names)} nodes: {counts}{suspect}")
    print(f"reports: {json_path}, {html_path}")
    return EXIT_NOT_READY if fleet["not_ready"] or fleet["suspect"] else EXIT_OK
