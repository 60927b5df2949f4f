"""``preflight merge REPORT.json ... [--out DIR]``: one fleet report from many nodes' reports.

Writes ``DIR/fleet.json`` and ``DIR/fleet.html`` (default DIR: ``fleet``): a row per node, which
checks failed where, and the bandwidth spread across nodes of the same GPU kind with outliers
flagged (rule in ``preflight.report.fleet``). Each report is checked against the shipped schema
first; one that cannot be read is named on stderr, listed under ``skipped`` in fleet.json, and left
out. Exit code 0 when every node read is READY or DEGRADED and none is a bandwidth outlier, 1
otherwise (a node NOT READY, one whose run could not judge it (ERROR), an outlier), 2 when no report
could be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from preflight.errors import EXIT_NOT_READY, EXIT_OK, UsageError
from preflight.inputs import STDIN, shown
from preflight.options import UsageParser
from preflight.report.document import Report
from preflight.outcome import RunVerdict
from preflight.report.fleet import NodeReport, Skipped, build_fleet, unique_names
from preflight.report.fleet_html import render_fleet_html
from preflight.report.saved import UnreadableReport, load_report
from preflight.report.writer import dump_json, write_atomic


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="preflight merge", description="Merge nodes' preflight.json files into one fleet report "
                     "(fleet.json and fleet.html).")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="one preflight.json per node ('-' = stdin); an unreadable one is named and skipped")
    parser.add_argument("--out", type=Path, default=Path("fleet"), metavar="DIR",
                        help="where fleet.json and fleet.html are written (default ./fleet)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.reports.count(STDIN) > 1:
        raise UsageError("'-' (standard input) can be given only once")
    loaded: list[tuple[str, Report]] = []
    skipped: list[Skipped] = []
    for path in args.reports:
        try:
            loaded.append((path, load_report(path)))
        except UnreadableReport as exc:
            if len(args.reports) == 1:
                raise UsageError(str(exc)) from None
            skipped.append(Skipped(shown(path), str(exc)))
            print(f"preflight: skipped: {exc}", file=sys.stderr)
    if not loaded:
        raise UsageError(f"none of the {len(args.reports)} reports could be read (each one is named above)")
    names = unique_names([_hostname(report, path) for path, report in loaded], [shown(p) for p, _ in loaded])
    nodes = [NodeReport(name, shown(path), report) for name, (path, report) in zip(names, loaded, strict=True)]
    fleet = build_fleet(nodes, skipped=skipped)
    json_path, html_path = args.out / "fleet.json", args.out / "fleet.html"
    try:
        write_atomic(json_path, dump_json(fleet.to_json()))
        write_atomic(html_path, render_fleet_html(fleet))
    except OSError as exc:
        raise UsageError(f"cannot write the fleet report to {args.out}: {exc.strerror or exc}") from None
    counts = ", ".join(f"{n} {v.value}" for v, n in fleet.verdicts.items()
                       if n or v is not RunVerdict.ERROR)  # ERROR: when seen
    outliers = fleet.suspect
    suspect = f", {len(outliers)} bandwidth outlier(s): {', '.join(outliers)}" if outliers else ""
    unread = f" ({len(skipped)} unreadable report(s) skipped)" if skipped else ""
    print(f"fleet: {len(names)} nodes: {counts}{suspect}{unread}")
    print(f"reports: {json_path}, {html_path}")
    bad = fleet.with_verdict(RunVerdict.NOT_READY) or fleet.with_verdict(RunVerdict.ERROR) or outliers
    return EXIT_NOT_READY if bad else EXIT_OK


def _hostname(report: Report, path: str) -> str:
    """The node's hostname, or the file's name when the report does not give one as text."""
    hostname = report.node.hostname
    if hostname is not None and hostname.strip():
        return hostname
    return "stdin" if path == STDIN else Path(path).stem
