"""The run's verdict as one line of at most 80 characters, for schedulers and health daemons.

Slurm takes it as a node's drain reason and node-problem-detector as a condition message (NPD cuts
plugin output at 80 characters by default), so the stable code of the worst problem comes first
and the human summary only fills what room is left: ``NOT READY: DDP_RANK_HUNG (+2 more)``. The code
named is the first of the one order of problems (``report.model.problems``): a GPU to replace before a
toolkit to install.
"""

from __future__ import annotations

from preflight.report.document import Report
from preflight.report.model import leading_problem

MAX_LENGTH = 80


def format_oneline(report: Report, limit: int = MAX_LENGTH) -> str:
    """``READY``, ``DEGRADED: NCCL_P2P_SLOW - ...``, ``NOT READY: CODE (+N more) - summary`` or
    ``ERROR: NO_CHECK_FINISHED - why`` (the run could not judge the node: its cause leads).

    An interrupted run names the interruption first, whatever the checks found before it (a WARN seen
    before Ctrl-C is not why the node is NOT READY), with how many checks did not run. A partial run
    says how much of the suite it covered: ``READY: 1 of 45 checks selected``. Plain ASCII, no
    newline, never longer than ``limit``; the code is never cut.
    """
    verdict = report.label
    note = report.selection_note
    lead = leading_problem(report)
    if lead is None:
        return _ascii(f"{verdict}: {note}" if note else verdict)[:limit]
    counts = [f"+{lead.more} more"] if lead.more else []
    if note:
        counts.append(note)
    head = f"{verdict}: {lead.code}" + (f" ({', '.join(counts)})" if counts else "")
    return _ascii(_fit(head, lead.summary, limit))


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
