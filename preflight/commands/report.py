"""``preflight report REPORT.json [--out FILE] [--oneline]``: re-render a saved JSON report.

For a support engineer who received only ``preflight.json``: writes the HTML the run would have
written (default: beside the JSON, ``.html`` instead of ``.json``) and says the verdict as the run
said it (``READY (CPU rehearsal)``, the selection of a partial run). ``--oneline`` prints the run's
status in at most 80 characters instead. Either way it exits like the run did (by the run's verdict:
0 ready or degraded, 1 not ready or degraded under ``--strict``, 2 when the run could not judge the
node), which is what a health daemon or a script reading the last report needs. ``-`` reads the
report from stdin. A file that is not a preflight report (checked against the shipped schema
first), or one of an unknown schema version, is refused in one line with exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jinja2

from preflight.errors import EXIT_NOT_READY, EXIT_OK, UsageError
from preflight.inputs import STDIN, shown
from preflight.options import UsageParser
from preflight.outcome import RunVerdict
from preflight.report.document import Report
from preflight.report.html import render_html
from preflight.report.oneline import format_oneline
from preflight.report.saved import UnreadableReport, load_report
from preflight.report.writer import write_atomic


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="preflight report", description="Re-render the HTML of a saved preflight.json, or print "
                     "its one-line status.")
    parser.add_argument("report", metavar="REPORT.json", help="a preflight.json written by preflight ('-' = stdin)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="HTML file to write (default: REPORT.html beside it)")
    parser.add_argument("--oneline", action="store_true", help="print the status in at most 80 characters instead of "
                        "writing HTML")
    parser.epilog = ("Exits with the run's exit code (0 ready or degraded, 1 not ready or degraded with --strict, "
                     "2 not judged).")
    return parser


def exit_code(report: Report) -> int:
    """The run's exit code as its verdict gives it (a hand-edited ``exit_code`` does not turn NOT READY or
    ERROR into 0); DEGRADED keeps the run's own (1 when it ran with --strict)."""
    if report.verdict is RunVerdict.DEGRADED:
        return EXIT_NOT_READY if report.run.exit_code == EXIT_NOT_READY else EXIT_OK
    return report.verdict.exit_code()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = load_report(args.report)
    except UnreadableReport as exc:
        raise UsageError(str(exc)) from None
    if args.oneline:
        print(format_oneline(report))
        return exit_code(report)
    if args.out is None and args.report == STDIN:
        raise UsageError("a report read from standard input needs --out FILE (or --oneline)")
    out = args.out or Path(args.report).with_suffix(".html")
    name = shown(args.report)
    try:
        html = render_html(report)
    except jinja2.UndefinedError as exc:
        raise UsageError(f"{name} is not a complete preflight report ({exc.message})") from None
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # The schema checks the envelope; the node block and a view's data are free-form, and a
        # hand-edited value there (a string where the chart wants numbers) must not end in a traceback.
        raise UsageError(f"{name}: cannot render its HTML ({type(exc).__name__}: {exc})") from None
    try:
        write_atomic(out, html)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"{report.headline}  report: {shown(str(out))}")
    return exit_code(report)
