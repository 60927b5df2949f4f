"""What a report shows beside an all-reduce verdict: each run's per-size figures, and what NCCL's
INFO log said about its transports (so a reader sees why a figure is what it is)."""

from __future__ import annotations

from preflight.judge.nccl import human_bytes
from preflight.outcome import View
from preflight.parse.nccl_explain import explain
from preflight.parse.nccl_log import NcclLogError, analyze
from preflight.probe.sweep import SweepRun


def sizes_table(runs: list[SweepRun]) -> View:
    """Per-size figures of every run, wrong results highlighted."""
    rows: list[list[object]] = []
    highlight: list[int] = []
    for run in runs:
        for size in sorted(run.sizes, key=lambda s: s.bytes):
            if not size.correct:
                highlight.append(len(rows))
            rows.append([run.label, human_bytes(size.bytes), round(size.time_s * 1000, 4), round(size.algbw_gbps, 3),
                         round(size.busbw_gbps, 3), size.correct])
    return View("table", "All-reduce per message size", {
        "columns": ["run", "size", "time (ms)", "algbw (GB/s)", "busbw (GB/s)", "values correct"],
        "rows": rows, "highlight": highlight})


def transport_evidence(run: SweepRun) -> dict[str, str]:
    """What NCCL_DEBUG=INFO said about a run: version, transports per GPU pair, WARN lines, timeouts."""
    if run.backend != "nccl" or not run.nccl_log.strip():
        return {}
    try:
        explained = explain(analyze(run.nccl_log))
    except NcclLogError:
        return {}
    lines = [f"NCCL version: {explained['nccl_version'] or 'not stated'}"]
    lines += [f"- {finding}" for finding in explained["findings"]]
    lines += [pair["explanation"] for pair in explained["pairs"]]
    lines += [f"NCCL WARN: {w['line']}" for w in explained["warnings"][:10]]
    lines += [f"timeout: {t['line']}" for t in explained["timeouts"][:10]]
    return {f"NCCL transports ({run.label})": "\n".join(lines)}
