"""The rehearsal table, from the report's ``rehearsal`` section: lines for the terminal and a
``table`` view for the HTML. Both read the same plain data, so they never disagree."""

from __future__ import annotations

import shlex
from typing import Any

from preflight.judge.rehearse import human_bytes, human_seconds
from preflight.outcome import PROBLEM_STATUSES, View


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _scaling(size: dict[str, Any], baseline: Any = 1) -> str:
    if size.get("scaling") is None:
        return "-"
    text = f"{size['scaling']:.2f}x"
    if size.get("ranks") in (1, baseline) or size.get("efficiency") is None:
        return text
    noise = f" +/-{size['scaling_spread']:.0%}" if size.get("scaling_spread") is not None else ""
    return f"{text} ({size['efficiency']:.0%}{noise})"


def _rate(size: dict[str, Any]) -> str:
    """``730 +/-5%``: steps/s with the 95 % spread of its window's blocks."""
    rate = _num(size.get("steps_per_s"))
    spread = size.get("steps_per_s_spread")
    return rate if spread is None or rate == "-" else f"{rate} +/-{spread:.0%}"


def _memory(size: dict[str, Any]) -> str:
    peaks = [p for p in size.get("peak_memory_bytes") or [] if p is not None]
    return human_bytes(max(peaks)) if peaks else "-"


def _money(value: Any) -> str:
    if value is None:
        return "-"
    return "<$0.01" if 0 < value < 0.005 else f"${value:,.2f}"


def columns(section: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, heading) of every column the section has figures for."""
    sizes = section.get("sizes", [])
    kind = next((s.get("memory_kind") for s in sizes if s.get("memory_kind")), "GPU" if section.get("device") == "gpu"
                else "RSS")
    cols = [("ranks", "ranks"), ("first", "first step"), ("p50", "step p50"), ("p90", "step p90"),
            ("rate", "steps/s"), ("throughput", "batches/s*"), ("scaling", "scaling"),
            ("memory", "peak GPU mem" if kind == "GPU" else "peak RSS")]
    if section.get("communication"):
        cols.append(("comm", "comm/step+"))
    if section.get("price_per_hour_usd"):
        cols.append(("cost", "$/1k steps"))
    cols.append(("status", "status"))
    return cols


def cells(size: dict[str, Any], baseline: Any = 1) -> dict[str, str]:
    """One size's cells, formatted (``baseline``: the rank count the scaling is against)."""
    return {
        "ranks": str(size["ranks"]),
        "first": human_seconds(size.get("first_step_s")),
        "p50": human_seconds(size.get("step_median_s")),
        "p90": human_seconds(size.get("step_p90_s")),
        "rate": _rate(size),
        "throughput": _num(size.get("throughput")),
        "scaling": _scaling(size, baseline),
        "memory": _memory(size),
        "comm": human_seconds(size.get("comm_per_step_s")) if size.get("ranks", 1) > 1 else "-",
        "cost": _money(size.get("cost_per_1k_steps_usd")),
        "status": str(size.get("status", "")),
    }


def footnotes(section: dict[str, Any]) -> list[str]:
    """What the starred columns mean."""
    notes = [f"* batches/s = {section.get('assumption', 'steps/s x ranks')}"]
    comm = section.get("communication")
    if comm:
        notes.append(f"+ predicted: {comm.get('description', '')}")
        priced = [s for s in section.get("sizes", []) if s.get("comm_cost_per_1k_steps_usd") and s.get("ranks", 1) > 1]
        if priced:
            notes.append("  the link's share of $/1k steps: " + ", ".join(
                f"{_money(s['comm_cost_per_1k_steps_usd'])} at {s['ranks']} ranks" for s in priced))
    elif section.get("communication_note"):
        notes.append(f"+ no communication estimate: {section['communication_note']}")
    return notes


def title(section: dict[str, Any]) -> str:
    """``Rehearsal of train.py --lr 1: 5 warm-up + 50 measured steps per size, CPU ranks (gloo)``."""
    command = shlex.join([str(section.get("script", "")), *section.get("args", [])])
    where = "GPU ranks" if section.get("device") == "gpu" else "CPU ranks (gloo)"
    return (f"Rehearsal of {command}: {section.get('warmup')} warm-up + {section.get('steps')} measured steps per "
            f"size, {where}")


def terminal_lines(section: dict[str, Any]) -> list[str]:
    """The table as fixed-width lines, then the footnotes and each size that did not pass."""
    cols = columns(section)
    rows = [cells(size, section.get("baseline_ranks")) for size in section.get("sizes", [])]
    widths = {key: max([len(head)] + [len(row[key]) for row in rows]) for key, head in cols}
    line = "  ".join(head.rjust(widths[key]) if key != "status" else head for key, head in cols)
    out = [title(section), line]
    for row in rows:
        out.append("  ".join(row[key].rjust(widths[key]) if key != "status" else row[key] for key, _ in cols))
    out += footnotes(section)
    for size in section.get("sizes", []):
        if size.get("status") not in ("PASS",):
            code = f" {size['code']}" if size.get("code") else ""
            out.append(f"{size['ranks']} rank{'s' if size['ranks'] != 1 else ''} {size.get('status')}{code}: "
                       f"{size.get('summary')}")
    return out


def table_view(section: dict[str, Any]) -> View:
    """The same table for the HTML report (failed sizes highlighted)."""
    cols = columns(section)
    sizes = section.get("sizes", [])
    rows = [[cells(size, section.get("baseline_ranks"))[key] for key, _ in cols] for size in sizes]
    problem = {status.value for status in PROBLEM_STATUSES}
    highlight = [i for i, size in enumerate(sizes) if size.get("status") in problem]
    legend = "* batches/s = steps/s x ranks"
    if section.get("communication"):
        legend += "; + predicted, see the evidence"
    return View("table", f"{title(section)} ({legend})",
                {"columns": [head for _, head in cols], "rows": rows, "highlight": highlight})
