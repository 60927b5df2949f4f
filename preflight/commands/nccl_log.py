"""``preflight nccl-log FILE [--json]``: explain a saved NCCL_DEBUG log in plain words.

Reads a log file (``-`` for stdin) and says which NCCL version ran, which transport each GPU pair
used (and whether peer-to-peer was used at all), the ``NCCL WARN`` lines with what they usually
mean, NCCL errors and torch watchdog timeouts. An nccl-tests table in the same file is summarized
too. Exit code 0 after a successful analysis, 2 when the file cannot be read.
"""

from __future__ import annotations

import json
from typing import TypedDict, final

from preflight.errors import UsageError
from preflight.inputs import read_text, shown
from preflight.options import UsageParser
from preflight.judge.nccl import human_bytes
from preflight.parse.nccl_explain import LogExplanation, TimeoutJson, explain
from preflight.parse.nccl_log import NcclLog, NcclLogError, analyze
from preflight.parse.nccl_tests import NcclTestsError, contains_table, looks_like_nccl_tests, parse_nccl_tests



@final
class NcclTestsSummary(TypedDict):
    """The nccl-tests table in the same file: which collective on how many ranks, peak and average busbw."""

    collective: str | None
    collective_candidates: list[str]
    ranks: int | None
    devices_elided: bool
    single_rank: bool
    sizes: int
    peak_busbw_gbps: float
    peak_size_bytes: int
    max_size_bytes: int
    avg_busbw_gbps: float
    reported_avg_busbw_gbps: float | None
    wrong: int | None
    notes: list[str]


@final
class NcclTestsUnreadable(TypedDict):
    """An nccl-tests table that could not be read, and why."""

    error: str


class NcclLogResult(LogExplanation):
    """What ``nccl-log`` prints (``--json`` as it is, else :func:`render_text`): the file, the log explained and
    the nccl-tests table's summary (None when the file holds no table)."""

    file: str
    nccl_tests: NcclTestsSummary | NcclTestsUnreadable | None


def main(argv: list[str]) -> int:
    """Entry point of ``preflight nccl-log``."""
    parser = UsageParser(prog="preflight nccl-log", description="Explain a saved NCCL_DEBUG=INFO log.")
    parser.add_argument("file", help="log file to read, or - for standard input")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    text = read_text(args.file)
    if not text.strip():
        raise UsageError(f"{shown(args.file)} is empty: there is no log to read")
    try:
        log = analyze(text)
    except NcclLogError as exc:
        raise UsageError(f"{shown(args.file)}: {exc}") from None
    tests = _nccl_tests_summary(text)
    if tests is not None and "error" in tests and _nothing_else(log):
        raise UsageError(f"{shown(args.file)} is nccl-tests output, but its table cannot be read: {tests['error']}")
    result: NcclLogResult = {"file": args.file, **explain(log), "nccl_tests": tests}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render_text(result))
    return 0


def _nccl_tests_summary(text: str) -> NcclTestsSummary | NcclTestsUnreadable | None:
    """Peak and average busbw of an nccl-tests table in the same text, or None when there is none."""
    if not contains_table(text) and not looks_like_nccl_tests(text):
        return None
    try:
        result = parse_nccl_tests(text)
    except NcclTestsError as exc:
        return {"error": str(exc)}
    peak = result.peak
    return {
        "collective": result.collective_named,
        "collective_candidates": list(result.layout_collectives),
        "ranks": result.ranks,
        "devices_elided": result.devices_elided,
        "single_rank": result.single_rank,
        "sizes": len(result.rows),
        "peak_busbw_gbps": peak.busbw_gbps,
        "peak_size_bytes": peak.size_bytes,
        "max_size_bytes": result.max_size_bytes,
        "avg_busbw_gbps": round(result.avg_busbw_gbps, 4),
        "reported_avg_busbw_gbps": result.reported_avg_busbw,
        "wrong": result.wrong_total,
        "notes": list(result.notes),
    }


def _nothing_else(log: NcclLog) -> bool:
    """The log part found nothing at all: the file is only the table that could not be read."""
    return not (log.connections or log.warnings or log.timeouts or log.errors or log.nvls_used)


def _plural(count: int, word: str) -> str:
    """``1 line`` / ``2 lines``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def render_text(result: NcclLogResult) -> str:
    """The human form of the analysis."""
    out = [f"NCCL log: {result['file']}"]
    versions = result["nccl_versions"]
    if result["nccl_version"]:
        out.append(f"NCCL version: {result['nccl_version']}")
    elif versions:
        out.append(f"NCCL version: several in one log ({', '.join(versions)})")
    else:
        out.append("NCCL version: not stated in this log")
    out.append("")
    out.append("What the log shows:")
    out.extend(f"  - {finding}" for finding in result["findings"])
    if result["pairs"]:
        out.append("")
        out.append("Transport per GPU pair:")
        out.extend(f"  {pair['explanation']}" for pair in result["pairs"])
    if result["nvls"]["used"]:
        channels = result["nvls"]["channels"]
        out.append("")
        out.append("NVLS (NVLink SHARP) was set up" + (f" with {channels} channels." if channels else "."))
    if result["warnings"]:
        out.append("")
        out.append(f"NCCL WARN lines ({len(result['warnings'])}):")
        for warning in result["warnings"]:
            where = f"{warning['source']}" + (f" ({warning['function']})" if warning["function"] else "")
            out.append(f"  line {warning['line_no']}: {where + ': ' if warning['source'] else ''}{warning['message']}")
            if warning["hint"]:
                out.append(f"      means: {warning['hint']}")
    if result["errors"]:
        out.append("")
        out.append(f"NCCL errors ({len(result['errors'])}):")
        for err in result["errors"]:
            last = f"; last error: {err['last_error']}" if err["last_error"] else ""
            out.append(f"  line {err['line_no']}: {err['reason']}{last}")
            if err["hint"]:
                out.append(f"      means: {err['hint']}")
    if result["timeouts"]:
        out.append("")
        out.append(f"Watchdog timeouts ({len(result['timeouts'])}):")
        for timeout in result["timeouts"]:
            out.append("  " + _timeout_text(timeout))
    tests = result.get("nccl_tests")
    if tests:
        out.append("")
        if "error" in tests:
            out.append(f"nccl-tests table: could not be read ({tests['error']})")
        else:
            out.append(_tests_text(tests))
            out.extend(f"  note: {note}" for note in tests["notes"])
    return "\n".join(out)


def _tests_text(tests: NcclTestsSummary) -> str:
    """``nccl-tests table (all_reduce_perf on 8 ranks): peak busbw ... at 4 GiB (the largest size tested), ...``."""
    ranks = f" on {_plural(tests['ranks'], 'rank')}" if tests["ranks"] else ""
    candidates = tests["collective_candidates"]
    name = " or ".join(candidates) if candidates else tests["collective"] or "collective not named"
    told = "; the collective told from the columns" if candidates else ""
    head = f"nccl-tests table ({name}{ranks}{told}): "
    if tests["single_rank"]:
        return head + ("one rank has no peer to exchange data with: busbw is 0 by definition, and the run did "
                       "not cross GPUs or nodes, so it says nothing about the links")
    largest = tests["max_size_bytes"]
    where = " (the largest size tested)" if largest == tests["peak_size_bytes"] else (
        f", largest size tested {human_bytes(largest)}")
    return (head + f"peak busbw {tests['peak_busbw_gbps']:.2f} GB/s at {human_bytes(tests['peak_size_bytes'])}{where}, "
            f"average {tests['avg_busbw_gbps']:.2f} GB/s over {_plural(tests['sizes'], 'size')}")


def _timeout_text(timeout: TimeoutJson) -> str:
    """``rank 0: BROADCAST (SeqNum 1, 131072000 elements) not done after 600081 ms (timeout 600000 ms)``."""
    who = f"rank {timeout['rank']}" if timeout["rank"] is not None else "a rank"
    what = timeout["collective"] or "a collective (not named in the log)"
    details = []
    if timeout["seq_num"] is not None:
        details.append(f"SeqNum {timeout['seq_num']}")
    if timeout["numel_in"] is not None:
        details.append(f"{timeout['numel_in']} elements")
    detail = f" ({', '.join(details)})" if details else ""
    ran = f" after {timeout['ran_for_ms']} ms" if timeout["ran_for_ms"] is not None else ""
    limit = f" (timeout {timeout['timeout_ms']} ms)" if timeout["timeout_ms"] is not None else ""
    return f"{who}: {what}{detail} did not finish{ran}{limit}"
