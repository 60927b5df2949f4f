"""The HTML report: a view of the JSON report, one self-contained file, readable offline with
JavaScript off. Every value is escaped (autoescape on explicitly), and a Content-Security-Policy
forbids loading anything. Folds are ``<details>``; the narrow layout is CSS media queries."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from preflight.report.model import headline as verdict_headline

TEMPLATES = Path(__file__).resolve().parent / "templates"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
STATUS_ORDER = {"FAIL": 0, "ERROR": 1, "WARN": 2, "SKIP": 3, "PASS": 4}
PROBLEM_STATUSES = ("FAIL", "ERROR", "WARN")
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


def gpu_rows(gpus: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The GPU inventory as display rows: readable columns, units in the values."""
    rows = []
    for gpu in gpus:
        total, used = gpu.get("memory_total_bytes"), gpu.get("memory_used_bytes")
        current, top = _link(gpu.get("pcie_current")), _link(gpu.get("pcie_max"))
        links = gpu.get("nvlinks_active"), gpu.get("nvlinks_present")
        rows.append({
            "GPU": f"{gpu.get('index')}" + (f" (cuda{gpu['cuda_index']})" if gpu.get("cuda_index") is not None else ""),
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


def _section(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def headline(node: dict[str, Any]) -> list[str]:
    """The banner's facts: GPU model x count, driver, CUDA, torch, ranks (what is known)."""
    parts: list[str] = []
    inventory = _section(node, "gpus")
    gpus = inventory.get("gpus") or []
    models = Counter(str(g.get("name", "?")) for g in gpus if isinstance(g, dict))
    parts += [f"{count} × {name}" for name, count in models.items()]
    if inventory.get("driver_version"):
        parts.append(f"driver {inventory['driver_version']}")
    if inventory.get("cuda_driver_version"):
        parts.append(f"CUDA {inventory['cuda_driver_version']} (driver)")
    torch = _section(node, "torch")
    if torch.get("version"):
        built = ", ".join(x for x in (f"CUDA {torch['cuda']}" if torch.get("cuda") else "",
                                      f"NCCL {torch['nccl']}" if torch.get("nccl") else "") if x)
        parts.append(f"torch {torch['version']}" + (f" ({built})" if built else ""))
    job = _section(node, "job")
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
    env.filters["headline"] = verdict_headline  # the verdict as the terminal and --oneline say it
    env.filters["label"] = label
    env.filters["code"] = inline_code
    env.filters["when"] = format_time
    env.globals["fact"] = format_fact
    env.globals["metric"] = format_metric
    env.globals["dict_without"] = lambda mapping, key: {k: v for k, v in mapping.items() if k != key}
    env.tests["mapping"] = lambda v: isinstance(v, dict)
    env.tests["table_like"] = lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
    return env


def render_html(report: dict[str, Any]) -> str:
    """Render the report dict (as written to JSON) to one HTML document."""
    checks = report.get("checks", [])
    problems = sorted((c for c in checks if c["status"] in PROBLEM_STATUSES),
                      key=lambda c: STATUS_ORDER.get(c["status"], 9))
    groups = [
        ("Needs attention", problems, True),
        ("Skipped", [c for c in checks if c["status"] == "SKIP"], False),
        ("Passed", [c for c in checks if c["status"] == "PASS"], False),
    ]
    node = _section(report, "node")
    inventory = _section(node, "gpus")
    gpus = [g for g in inventory.get("gpus") or [] if isinstance(g, dict)]
    template = _environment().get_template("report.html.j2")
    return template.render(report=report, problems=problems, checks=checks, groups=groups, csp=CSP,
                           headline=headline(node), gpus=gpus, gpu_rows=gpu_rows(gpus))
