"""``preflight report REPORT.json [--out FILE] [--oneline]``: re-render a saved JSON report.

For a support engineer who received only ``preflight.json``: writes the HTML the run would have
written (default: beside the JSON, ``.html`` instead of ``.json``). ``--oneline`` prints the run's
status in at most 80 characters instead and exits like the run did (0 ready or degraded, 1 not
ready), which is what a health daemon reading the last report needs. A file that is not a
preflight report, or one of an unknown schema version, is refused with exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jinja2

from preflight.errors import EXIT_NOT_READY, EXIT_OK, UsageError
from preflight.options import UsageParser
from preflight.report.html import render_html
from preflight.report.oneline import format_oneline
from preflight.report.saved import UnreadableReport, load_report
from preflight.report.writer import write_atomic


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="preflight report", description="Re-render the HTML of a saved preflight.json, or print "
                     "its one-line status.")
    parser.add_argument("report", type=Path, metavar="REPORT.json", help="a preflight.json written by preflight")
    parser.add_argument("--out", type=Path, metavar="FILE", help="HTML file to write (default: REPORT.html beside it)")
    parser.add_argument("--oneline", action="store_true", help="print the status in at most 80 characters and exit "
                        "with the run's exit code (0 ready or degraded, 1 not ready) instead of writing HTML")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = load_report(args.report)
    except UnreadableReport as exc:
        raise UsageError(str(exc)) from None
    if args.oneline:
        print(format_oneline(report))
        return EXIT_NOT_READY if report["verdict"] == "NOT READY" else int(report["run"].get("exit_code") or EXIT_OK)
    out = args.out or args.report.with_suffix(".html")
    try:
        html = render_html(report)
    except jinja2.UndefinedError as exc:
        raise UsageError(f"{args.report} is not a complete preflight report ({exc.message})") from None
    try:
        write_atomic(out, html)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"{report['verdict']}  report: {out}")
    return EXIT_OK
