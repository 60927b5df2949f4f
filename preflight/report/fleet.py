"""One fleet report from many nodes' reports: a row per node, which checks failed where, and the
bandwidth spread across nodes of the same GPU kind with outliers flagged.

A node far below its peers is suspect even when it passed its own threshold (a slow link, a PCIe
slot trained at a lower width, a noisy neighbour). The rule, applied per GPU kind and per
bandwidth metric (unit GB/s, e.g. ``busbw_peak{run=...}``) when at least ``MIN_PEERS`` nodes have
it: a value is an outlier when it is below ``LOW_FRACTION`` (80 %) of the median, or when it is
below median - 3 x MAD (scaled by 1.4826, the normal-consistent MAD) *and* below 90 % of the
median; the second clause keeps a tight cluster from flagging noise of a few percent.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import preflight
from preflight.outcome import RunVerdict, Status
from preflight.report.document import NodeFacts, Report

FLEET_SCHEMA_VERSION = "1.0"
BANDWIDTH_UNIT = "GB/s"
MIN_PEERS = 3
LOW_FRACTION = 0.8
MAD_K = 3.0
MAD_SCALE = 1.4826
MAD_FLOOR_FRACTION = 0.9
RULE = (f"per GPU kind and bandwidth metric, with at least {MIN_PEERS} nodes: a node is an outlier when its value "
        f"is below {LOW_FRACTION:.0%} of the median, or below median - {MAD_K:g} x MAD (MAD x {MAD_SCALE}) and "
        f"below {MAD_FLOOR_FRACTION:.0%} of the median")


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One node's report as given to merge, with the name it is shown under."""

    name: str
    source: str
    report: Report


def gpu_kind(node: NodeFacts) -> str:
    """The GPU model(s) NVML listed (``NVIDIA H100 80GB HBM3``), ``no GPU`` when none are known."""
    section = node.facts.get("gpus")
    gpus = section.get("gpus") if isinstance(section, dict) else section if isinstance(section, list) else None
    names = sorted({str(g.get("name")) for g in gpus or [] if isinstance(g, dict) and g.get("name")})
    if names:
        return " + ".join(names)
    return "CUDA GPU (model unknown)" if node.section("torch").get("device_count") else "no GPU"


def gpu_count(node: NodeFacts) -> int | None:
    """GPUs listed by NVML, else counted by torch, else None."""
    section = node.facts.get("gpus")
    gpus = section.get("gpus") if isinstance(section, dict) else section if isinstance(section, list) else None
    if isinstance(gpus, list):
        return len(gpus)
    count = node.section("torch").get("device_count")
    return count if isinstance(count, int) else None


def bandwidth_metrics(report: Report) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], float]:
    """(check id, metric name, labels) -> value for every numeric metric measured in GB/s."""
    found = {}
    for check in report.checks:
        for metric in check.verdict.metrics:
            value = metric.value
            if metric.unit == BANDWIDTH_UNIT and isinstance(value, (int, float)) and not isinstance(value, bool):
                found[(check.id, metric.name, tuple(sorted(metric.labels.items())))] = float(value)
    return found


def outlier_reason(value: float, median: float, mad: float) -> str | None:
    """Why ``value`` is an outlier among peers with this median and (unscaled) MAD, or None."""
    if median <= 0:
        return None
    if value < LOW_FRACTION * median:
        return f"{value / median:.0%} of the median {median:.4g} (below {LOW_FRACTION:.0%})"
    scaled = MAD_SCALE * mad
    if scaled > 0 and value < median - MAD_K * scaled and value < MAD_FLOOR_FRACTION * median:
        return f"{(median - value) / scaled:.1f} MADs below the median {median:.4g}"
    return None


def bandwidth_spread(nodes: list[NodeReport]) -> list[dict[str, Any]]:
    """Per GPU kind and bandwidth metric: the values, median, MAD, spread and outliers."""
    series: dict[tuple[str, tuple[str, str, tuple[tuple[str, str], ...]]], dict[str, float]] = {}
    for node in nodes:
        kind = gpu_kind(node.report.node)
        for key, value in bandwidth_metrics(node.report).items():
            series.setdefault((kind, key), {})[node.name] = value
    rows = []
    for (kind, (check, metric, labels)), values in sorted(series.items()):
        numbers = list(values.values())
        median = statistics.median(numbers)
        mad = statistics.median(abs(v - median) for v in numbers)
        outliers = []
        if len(numbers) >= MIN_PEERS:
            for name, value in values.items():
                reason = outlier_reason(value, median, mad)
                if reason is not None:
                    outliers.append({"node": name, "value": value, "reason": reason})
        rows.append({"gpu_kind": kind, "check": check, "metric": metric, "labels": dict(labels), "unit": BANDWIDTH_UNIT,
                     "nodes": len(numbers), "median": median, "mad": mad, "min": min(numbers), "max": max(numbers),
                     "spread": (max(numbers) - min(numbers)) / median if median else None,
                     "values": values, "outliers": outliers})
    return rows


def node_row(node: NodeReport, suspect_for: list[str]) -> dict[str, Any]:
    """One row of the fleet table."""
    report, run = node.report, node.report.run
    problems = [{"check": c.id, "title": c.title, "status": c.status.value, "code": c.verdict.code,
                 "summary": c.verdict.summary} for c in report.problems]
    facts = report.node
    return {"name": node.name, "source": node.source, "hostname": facts.facts.get("hostname"),
            "verdict": report.verdict.value, "exit_code": run.exit_code, "started_at": run.started_at,
            "profile": run.options.get("profile"), "gpu_kind": gpu_kind(facts),
            "gpu_count": gpu_count(facts), "summary": dict(report.summary), "problems": problems,
            "interrupted": run.interrupted, "bandwidth_outlier_in": suspect_for,
            "error": run.error.as_dict() if run.error is not None else None}


def check_matrix(nodes: list[NodeReport]) -> list[dict[str, Any]]:
    """Every check seen, with its status on each node (absent where it did not run)."""
    order: dict[str, str] = {}
    statuses: dict[str, dict[str, Status]] = {}
    for node in nodes:
        for check in node.report.checks:
            order.setdefault(check.id, check.title)
            statuses.setdefault(check.id, {})[node.name] = check.status
    rows = []
    for check_id, title in order.items():
        by_node = statuses[check_id]
        rows.append({"check": check_id, "title": title, "statuses": {n: s.value for n, s in by_node.items()},
                     "problem_nodes": [n for n, s in by_node.items() if s.is_problem]})
    return rows


def build_fleet(nodes: list[NodeReport], skipped: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The fleet report as plain JSON data; ``skipped`` lists the inputs that could not be read
    (``{"source": ..., "reason": ...}``), so the page says that the fleet is not complete."""
    spread = bandwidth_spread(nodes)
    suspects: dict[str, list[str]] = {}
    for row in spread:
        label = row["metric"] + "".join(f"[{k}={v}]" for k, v in row["labels"].items())
        for outlier in row["outliers"]:
            suspects.setdefault(outlier["node"], []).append(label)
    rows = [node_row(node, suspects.get(node.name, [])) for node in nodes]
    verdicts = Counter(node.report.verdict for node in nodes)
    return {
        "kind": "preflight-fleet",
        "schema_version": FLEET_SCHEMA_VERSION,
        "tool": {"name": "preflight", "version": preflight.__version__},
        "created_at": datetime.now(timezone.utc).isoformat(),
        "outlier_rule": RULE,
        "verdicts": {v.value: verdicts.get(v, 0) for v in RunVerdict},
        "not_ready": [node.name for node in nodes if node.report.verdict is RunVerdict.NOT_READY],
        "not_judged": [node.name for node in nodes if node.report.verdict is RunVerdict.ERROR],
        "suspect": sorted(suspects),
        "nodes": rows,
        "checks": check_matrix(nodes),
        "bandwidth": spread,
        "skipped": list(skipped or []),
    }


def unique_names(hostnames: list[str], sources: list[str]) -> list[str]:
    """Hostnames, with the report's file added where two reports come from the same host."""
    counts = Counter(hostnames)
    names = [host if counts[host] == 1 else f"{host} ({source})"
             for host, source in zip(hostnames, sources, strict=True)]
    seen: Counter[str] = Counter()
    unique = []
    for name in names:
        seen[name] += 1
        unique.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return unique
