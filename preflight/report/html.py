"""The HTML report: a view of the JSON report, one self-contained file, readable offline with
JavaScript off. Every value is escaped (autoescape on explicitly), and a Content-Security-Policy
forbids loading anything. Folds are ``<details>``; the narrow layout is CSS media queries.

The page leads with the verdict and the worst problem (the one order of problems,
``report.model.problems``), then every problem with its fix, then the GPUs with their health."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from preflight.codes import kind_of
from preflight.outcome import Status
from preflight.report.document import CheckResult, JsonObject, NodeFacts, Report, ordered_problems
from preflight.report.model import leading_problem

TEMPLATES = Path(__file__).resolve().parent / "templates"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_BREAK_AFTER = re.compile(r"([_/.=,:])(?=\w)")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_ACRONYMS = {word.lower(): word for word in ("OS", "CPU", "CUDA", "HIP", "NCCL", "GPU", "GPUs", "MIG", "ECC", "PCI",
                                               "PCIe", "UUID", "ID", "NVML", "FSDP2", "API", "RAM", "NUMA")}
_UNIT_SUFFIXES = (("_bytes", "bytes"), ("_mib", "MiB"), ("_s", "s"), ("_ms", "ms"), ("_c", "°C"), ("_gbps", "GB/s"))


def format_bytes(value: Any) -> str:
    """``1260000000000`` -> ``1.26 TB`` (decimal units, three significant figures)."""
    try:
        size = float(value)
    except (TypeError, ValueError):
        return str(value)
    if isinstance(value, bool):
        return str(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1000
    return str(value)


def format_value(value: Any) -> str:
    """Numbers with sensible precision, everything else as text."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, list):
        return ", ".join(format_value(item) for item in value) or "—"
    if isinstance(value, dict) and not value:
        return "—"
    return str(value)


def format_metric(value: Any, unit: str | None) -> str:
    """A metric with its unit; byte counts human-readable."""
    if unit in ("B", "bytes"):
        return format_bytes(value)
    return f"{format_value(value)} {unit}" if unit else format_value(value)


def format_fact(key: str, value: Any) -> str:
    """A fact's value, read through its key's unit suffix (``memory_bytes`` -> ``2.06 TB``)."""
    if key.endswith("bytes"):
        return format_bytes(value)
    for suffix, unit in _UNIT_SUFFIXES:
        if key.endswith(suffix) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{format_value(value)} {unit}"
    return format_value(value)


def label(key: str) -> str:
    """A key as a column or row title: ``memory_total_bytes`` -> ``Memory total``, ``temperature_c`` ->
    ``Temperature (°C)``; any key that is not a snake_case name stays as it is."""
    if not _IDENTIFIER.fullmatch(key):
        return key  # not a snake_case name (``CUDA_VISIBLE_DEVICES``, a key from elsewhere): shown as it is
    words = key
    for suffix, unit in _UNIT_SUFFIXES:
        if key.endswith(suffix):
            words = key[: -len(suffix)] + ("" if suffix == "_bytes" else f" ({unit})")
            break
    parts = [_ACRONYMS.get(word, word) for word in words.replace("_", " ").split()]
    text = " ".join(parts)
    return text[:1].upper() + text[1:]


def breakable(text: Any) -> Markup:
    """Escape ``text`` and let it wrap after ``_ / . = , :`` (``CUDA_VISIBLE_DEVICES``, a path) instead of
    anywhere: keys and values break between their words, never inside one."""
    escaped = str(escape("" if text is None else text))
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", escaped))


def inline_code(text: Any) -> Markup:
    """Escape ``text``, then show each ```backticked``` part as ``<code>``: fixes read as commands."""
    escaped = str(escape("" if text is None else text))
    return Markup(_BACKTICKED.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


def format_time(value: Any) -> str:
    """``2026-12-01T11:03:08.327277+00:00`` -> ``2026-12-01 11:03:08 UTC``; anything else unchanged."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.utcoffset() == timedelta(0):
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S %z")


def _link(value: Any) -> str:
    if isinstance(value, dict) and value.get("generation") is not None:
        return f"Gen{value.get('generation')} x{value.get('width')}"
    return "—"


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """What the per-GPU checks found on one GPU: its worst status and the codes of its problems, worst
    first (``status`` is ``OK`` when every check passed or skipped)."""

    status: str
    codes: tuple[str, ...]

    @property
    def faulty(self) -> bool:
        return bool(self.codes)


def gpu_health(checks: tuple[CheckResult, ...]) -> dict[int, GpuHealth]:
    """GPU index (NVML) -> its health, from the checks that name the GPU (``gpu`` in the report)."""
    found: dict[int, list[CheckResult]] = {}
    for check in checks:
        index = check.gpu.get("index") if check.gpu is not None else None
        if isinstance(index, int) and not isinstance(index, bool):
            found.setdefault(index, []).append(check)
    health = {}
    for index, mine in found.items():
        bad = ordered_problems(mine)
        codes = tuple(dict.fromkeys(c.verdict.code for c in bad if c.verdict.code))
        worst = max((c.status for c in bad), key=lambda s: s.rank, default=None)
        health[index] = GpuHealth(worst.value if worst is not None else "OK", codes)
    return health


def gpu_rows(gpus: list[JsonObject], health: dict[int, GpuHealth] | None = None) -> list[dict[str, str]]:
    """The GPU inventory as display rows: readable columns, units in the values, and each GPU's health
    (``FAIL GPU_ROW_REMAP_FAILED``, ``OK``; ``—`` where no per-GPU check ran)."""
    rows = []
    for gpu in gpus:
        total, used = gpu.get("memory_total_bytes"), gpu.get("memory_used_bytes")
        current, top = _link(gpu.get("pcie_current")), _link(gpu.get("pcie_max"))
        links = gpu.get("nvlinks_active"), gpu.get("nvlinks_present")
        index = gpu.get("index")
        found = (health or {}).get(index) if isinstance(index, int) else None
        rows.append({
            "GPU": f"{gpu.get('index')}" + (f" (cuda{gpu['cuda_index']})" if gpu.get("cuda_index") is not None else ""),
            "Health": "—" if found is None else " ".join((found.status, *found.codes)),
            "Model": str(gpu.get("name", "?")),
            "Memory used / total": f"{format_bytes(used)} / {format_bytes(total)}" if total is not None else "—",
            "CC": format_value(gpu.get("compute_capability")),
            "ECC": format_value(gpu.get("ecc_enabled")),
            "Persist.": format_value(gpu.get("persistence_mode")),
            "MIG": format_value(gpu.get("mig_enabled")),
            "PCIe now (max)": current if current == top else f"{current} ({top})",
            "NVLinks up": f"{links[0]} of {links[1]}" if links[1] else "none",
            "Temp.": f"{gpu['temperature_c']} °C" if isinstance(gpu.get("temperature_c"), (int, float)) else "—",
            "Clock events": format_value(gpu.get("clock_event_reasons")),  # throttle reasons
            "Procs": str(len(gpu.get("processes") or [])),
        })
    return rows


def headline(node: NodeFacts) -> list[str]:
    """The banner's facts: GPU model x count, driver, CUDA, torch, ranks (what is known)."""
    parts: list[str] = []
    inventory = node.section("gpus")
    models = Counter(str(g.get("name", "?")) for g in node.gpus)
    parts += [f"{count} × {name}" for name, count in models.items()]
    if inventory.get("driver_version"):
        parts.append(f"driver {inventory['driver_version']}")
    if inventory.get("cuda_driver_version"):
        parts.append(f"CUDA {inventory['cuda_driver_version']} (driver)")
    torch = node.section("torch")
    if torch.get("version"):
        built = ", ".join(x for x in (f"CUDA {torch['cuda']}" if torch.get("cuda") else "",
                                      f"NCCL {torch['nccl']}" if torch.get("nccl") else "") if x)
        parts.append(f"torch {torch['version']}" + (f" ({built})" if built else ""))
    job = node.section("job")
    if job.get("ranks"):
        where = "GPUs" if job.get("on_gpu") else "CPU"
        parts.append(f"{job['ranks']} rank{'s' if job['ranks'] != 1 else ''} on {where}")
    return parts


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # explicit: select_autoescape would not cover a .html.j2 name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = format_bytes
    env.filters["value"] = format_value
    env.filters["label"] = label
    env.filters["breakable"] = breakable
    env.filters["kind"] = lambda code: kind_of(code).label
    env.filters["code"] = inline_code
    env.filters["when"] = format_time
    env.globals["fact"] = format_fact
    env.globals["metric"] = format_metric
    env.globals["dict_without"] = lambda mapping, key: {k: v for k, v in mapping.items() if k != key}
    env.tests["mapping"] = lambda v: isinstance(v, dict)
    env.tests["problem"] = lambda status: Status(status).is_problem  # a check's status: WARN or worse
    env.tests["table_like"] = lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
    env.tests["matrix_like"] = _matrix_like
    return env


def _matrix_like(value: Any) -> bool:
    """A list of equally long lists of plain values (a link matrix), shown as a grid, not as one flat list."""
    return (isinstance(value, list) and bool(value) and all(isinstance(row, list) for row in value)
            and len({len(row) for row in value}) == 1
            and all(not isinstance(cell, (dict, list)) for row in value for cell in row))


@dataclass(frozen=True, slots=True)
class Heading:
    """The page's heading: the verdict with the code of the worst problem, and that problem in words."""

    verdict: str
    code: str | None
    title: str
    summary: str
    more: int
    note: str  # what the run covered: "99 of 117 checks selected (-m 'not distributed')", or ""

    @property
    def text(self) -> str:
        return f"{self.verdict}: {self.code}" if self.code else self.verdict


def heading(report: Report) -> Heading:
    """The verdict and the worst problem (as ``--oneline`` names it), the selection apart."""
    lead = leading_problem(report)
    note = report.selection_note or ""
    flags = report.selection_flags if note else ""
    note = f"{note} ({flags})" if flags else note
    if lead is None:
        return Heading(report.label, None, "", "", 0, note)
    return Heading(report.label, lead.code, lead.title, lead.summary, lead.more, note)


def topology_view(section: JsonObject) -> dict[str, Any] | None:
    """The node's ``topology`` section's link matrix as a matrix view (labelled rows and columns)."""
    labels, links = section.get("gpus"), section.get("links")
    if not (isinstance(labels, list) and isinstance(links, list) and _matrix_like(links)
            and len(links) == len(labels) == len(links[0])):
        return None
    return {"kind": "matrix", "title": f"Links ({section.get('source') or 'topology'})",
            "data": {"labels": labels, "cells": links}}


def render_html(report: Report) -> str:
    """Render the report to one HTML document; the template reads the report's JSON form, the file's
    values exactly as written."""
    data = report.to_json()
    shown = dict(zip((id(c) for c in report.checks), data["checks"], strict=True))
    checks = data["checks"]
    found = [shown[id(c)] for c in report.problems]
    groups = [
        ("Needs attention", found, True),
        ("Skipped", [shown[id(c)] for c in report.checks if c.status is Status.SKIP], False),
        ("Passed", [shown[id(c)] for c in report.checks if not c.is_problem and c.status is not Status.SKIP], False),
    ]
    gpus = report.node.gpus
    health = gpu_health(report.checks)
    template = _environment().get_template("report.html.j2")
    return template.render(report=data, problems=found, checks=checks, groups=groups, csp=CSP,
                           heading=heading(report), headline=headline(report.node), gpus=gpus,
                           gpu_rows=gpu_rows(gpus, health), health=health,
                           topology=topology_view(report.node.section("topology")))
