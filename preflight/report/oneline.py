"""The run's verdict as one line of at most 80 characters, for schedulers and health daemons.

Slurm takes it as a node's drain reason and node-problem-detector as a condition message (NPD cuts
plugin output at 80 characters by default), so the stable code of the worst problem comes first
and the human summary only fills what room is left: ``NOT READY: DDP_RANK_HUNG (+2 more)``.
"""

from __future__ import annotations

from typing import Any

from preflight.report.model import verdict_label
from preflight.report.selection import selection_note

MAX_LENGTH = 80
SEVERITY = {"FAIL": 0, "ERROR": 1, "WARN": 2}
INTERRUPTED_CODE = "RUN_INTERRUPTED"
ERROR_CODE = "CHECK_ERROR"


def problems(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Checks that ended FAIL, ERROR or WARN, worst first (report order within a status)."""
    found = [c for c in report.get("checks", []) if c.get("status") in SEVERITY]
    return sorted(found, key=lambda c: SEVERITY[c["status"]])


def format_oneline(report: dict[str, Any], limit: int = MAX_LENGTH) -> str:
    """``READY``, ``DEGRADED: NCCL_P2P_SLOW - ...``, ``NOT READY: CODE (+N more) - summary`` or
    ``ERROR: NO_CHECK_FINISHED - why`` (the run could not judge the node).

    An interrupted run names the interruption first, whatever the checks found before it (a WARN seen
    before Ctrl-C is not why the node is NOT READY), with how many checks did not run. A partial run
    says how much of the suite it covered: ``READY: 1 of 45 checks selected``. Plain ASCII, no
    newline, never longer than ``limit``; the code is never cut.
    """
    verdict = verdict_label(report)
    note = selection_note(report)
    found = problems(report)
    run = report.get("run", {})
    error = run.get("error") or {}
    if report.get("verdict") == "ERROR" and error:  # preflight could not judge the node: say why, first
        code, extra, summary = str(error.get("code") or ERROR_CODE), len(found), str(error.get("summary") or "")
    elif run.get("interrupted"):
        code, extra = INTERRUPTED_CODE, len(found)
        not_run = len(report.get("not_run") or [])
        summary = str(run.get("interruption") or "the run was interrupted")
        if not_run:  # the count first: a short line cuts the reason, never how much is missing
            summary = f"{not_run} check{'s' if not_run != 1 else ''} did not run ({summary})"
    elif found:
        worst = found[0]
        code = worst.get("code") or ERROR_CODE
        summary = str(worst.get("summary") or "")
        extra = len(found) - 1
    else:
        return _ascii(f"{verdict}: {note}" if note else verdict)[:limit]
    counts = [f"+{extra} more"] if extra else []
    if note:
        counts.append(note)
    head = f"{verdict}: {code}" + (f" ({', '.join(counts)})" if counts else "")
    return _ascii(_fit(head, summary, limit))


def _fit(head: str, summary: str, limit: int) -> str:
    """``head - summary`` with the summary shortened (ending in ``...``) to stay within ``limit``."""
    head = head[:limit]
    summary = " ".join(summary.split())
    room = limit - len(head) - len(" - ")
    if not summary or room < 8:
        return head
    if len(summary) > room:
        summary = summary[: room - 3].rstrip() + "..."
    return f"{head} - {summary}"


def _ascii(text: str) -> str:
    """Drain reasons and NPD messages travel through tools that mangle non-ASCII: replace it."""
    return text.encode("ascii", "replace").decode("ascii").replace("\n", " ")
