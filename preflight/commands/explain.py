"""``preflight explain CODE [CODE ...]``: what a verdict code means, why it matters, and the fix.

For the person reading ``NOT READY: GPU_ROW_REMAP_PENDING`` in a scheduler's drain reason, a CI
log or the JUnit view, without the HTML at hand. ``--list`` prints every code with its meaning
(whole: one line a code when piped, for ``grep``; wrapped under the code on a terminal), ``--json``
the entries as JSON, ``--markdown`` the catalogue page (``docs/codes.md``). Each entry names its
class (``replace the hardware``, ``stops the job``, ...: where its problems are listed). An unknown code
is one line naming the closest known codes, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator

from preflight.codes import Code, catalogue, close_matches, iter_codes, lookup
from preflight.codes.markdown import catalogue_markdown
from preflight.errors import EXIT_OK, UsageError
from preflight.options import UsageParser

MAX_WIDTH = 100


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="preflight explain", description="What a verdict code means, why it matters for the "
                         "training job, and the fix.")
    parser.add_argument("codes", nargs="*", metavar="CODE", help="a code from a report, e.g. GPU_ECC_UNCORRECTABLE "
                        "(case does not matter)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list every code with what it means")
    what.add_argument("--markdown", action="store_true", help="print the catalogue as Markdown (docs/codes.md)")
    parser.add_argument("--json", action="store_true", help="print the entries (of CODE, or all with --list) as JSON")
    return parser


def _width() -> int:
    return max(40, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))


def describe(entry: Code, area: str, width: int) -> Iterator[str]:
    """The entry as the terminal shows it: the code, then what / why / fix wrapped under a label."""
    yield f"{entry.code}  ({area}; {entry.problem_kind.label})"
    for label, text in (("what", entry.meaning), ("why", entry.why), ("fix", entry.fix)):
        yield textwrap.fill(text, width=width, initial_indent=f"  {label + ':':<6}", subsequent_indent=" " * 8,
                            break_on_hyphens=False, break_long_words=False)


def _as_json(entry: Code, area: str) -> dict[str, str]:
    return {"code": entry.code, "area": area, "kind": entry.problem_kind.value, "meaning": entry.meaning,
            "why": entry.why, "fix": entry.fix}


def list_lines(width: int | None) -> list[str]:
    """``--list``: every code and its whole meaning, aligned; wrapped within ``width`` (a terminal), or one
    line a code when ``width`` is None (a pipe: nothing is cut, every line greps)."""
    column = max(len(code) for code in catalogue()) + 2
    if width is None:
        return [f"{entry.code:<{column}}{entry.meaning}" for _, entry in iter_codes()]
    if width - column < 40:  # a narrow terminal: each meaning under its code
        return [entry.code + "\n" + textwrap.fill(entry.meaning, width=width, initial_indent="    ",
                                                  subsequent_indent="    ", break_on_hyphens=False)
                for _, entry in iter_codes()]
    return [textwrap.fill(entry.meaning, width=width, initial_indent=f"{entry.code:<{column}}",
                          subsequent_indent=" " * column, break_on_hyphens=False) for _, entry in iter_codes()]


def _unknown(code: str) -> UsageError:
    near = close_matches(code)
    hint = f"; did you mean {', '.join(near)}?" if near else " (preflight explain --list shows every code)"
    return UsageError(f"unknown code {code!r}{hint}")


def _output(args: argparse.Namespace) -> list[str]:
    width = _width()
    if args.markdown:
        return [catalogue_markdown().rstrip("\n")]
    if args.list:
        if args.json:
            return [json.dumps([_as_json(entry, area.title) for area, entry in iter_codes()], indent=2)]
        return list_lines(width if sys.stdout.isatty() else None)
    if not args.codes:
        raise UsageError("name a code to explain (e.g. preflight explain NCCL_BUSBW_LOW), or --list")
    known = catalogue()
    entries = []
    for code in args.codes:
        if lookup(code) is None:
            raise _unknown(code)
        area, entry = known[code.strip().upper().replace("-", "_")]
        entries.append((area.title, entry))
    if args.json:
        found = [_as_json(entry, area) for area, entry in entries]
        return [json.dumps(found[0] if len(found) == 1 else found, indent=2)]
    blocks = ["\n".join(describe(entry, area, width)) for area, entry in entries]
    return ["\n\n".join(blocks)]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    text = "\n".join(_output(args))
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `preflight explain --list | head`: the reader left; say nothing more (Python's own advice:
        # point stdout at devnull so the interpreter's final flush does not raise again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
