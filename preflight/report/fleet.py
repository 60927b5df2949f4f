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
from collections.abc import Mapping
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


@dataclass(frozen=True, slots=True)
class Outlier:
    """A node whose bandwidth is far below its peers' (``RULE``)."""

    node: str
    value: float
    reason: str

    def as_dict(self) -> dict[str, str | float]:
        return {"node": self.node, "value": self.value, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class BandwidthSpread:
    """One bandwidth metric of one GPU kind across the nodes that have it."""

    gpu_kind: str
    check: str
    metric: str
    labels: tuple[tuple[str, str], ...]
    values: Mapping[str, float]  # node name -> value
    outliers: tuple[Outlier, ...]

    @property
    def label(self) -> str:
        """``busbw_peak[run=p2p]``: how a node's row names the metric it is an outlier in."""
        return self.metric + "".join(f"[{k}={v}]" for k, v in self.labels)

    def as_dict(self) -> dict[str, Any]:
        numbers = list(self.values.values())
        median = statistics.median(numbers)
        return {"gpu_kind": self.gpu_kind, "check": self.check, "metric": self.metric, "labels": dict(self.labels),
                "unit": BANDWIDTH_UNIT, "nodes": len(numbers), "median": median, "mad": _mad(numbers),
                "min": min(numbers), "max": max(numbers),
                "spread": (max(numbers) - min(numbers)) / median if median else None,
                "values": dict(self.values), "outliers": [o.as_dict() for o in self.outliers]}


def _mad(numbers: list[float]) -> float:
    median = statistics.median(numbers)
    return statistics.median(abs(v - median) for v in numbers)


def bandwidth_spread(nodes: list[NodeReport]) -> list[BandwidthSpread]:
    """Per GPU kind and bandwidth metric: the values and the outliers among them."""
    series: dict[tuple[str, tuple[str, str, tuple[tuple[str, str], ...]]], dict[str, float]] = {}
    for node in nodes:
        kind = gpu_kind(node.report.node)
        for key, value in bandwidth_metrics(node.report).items():
            series.setdefault((kind, key), {})[node.name] = value
    rows = []
    for (kind, (check, metric, labels)), values in sorted(series.items()):
        numbers = list(values.values())
        median, mad = statistics.median(numbers), _mad(numbers)
        outliers = []
        if len(numbers) >= MIN_PEERS:
            for name, value in values.items():
                reason = outlier_reason(value, median, mad)
                if reason is not None:
                    outliers.append(Outlier(name, value, reason))
        rows.append(BandwidthSpread(kind, check, metric, labels, values, tuple(outliers)))
    return rows


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One row of the fleet table: a node's report and the metrics it is a bandwidth outlier in."""

    node: NodeReport
    outlier_in: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        node, report, run = self.node, self.node.report, self.node.report.run
        problems = [{"check": c.id, "title": c.title, "status": c.status.value, "code": c.verdict.code,
                     "summary": c.verdict.summary} for c in report.problems]
        facts = report.node
        return {"name": node.name, "source": node.source, "hostname": facts.facts.get("hostname"),
                "verdict": report.verdict.value, "exit_code": run.exit_code, "started_at": run.started_at,
                "profile": run.options.get("profile"), "gpu_kind": gpu_kind(facts),
                "gpu_count": gpu_count(facts), "summary": dict(report.summary), "problems": problems,
                "interrupted": run.interrupted, "bandwidth_outlier_in": list(self.outlier_in),
                "error": run.error.as_dict() if run.error is not None else None}


@dataclass(frozen=True, slots=True)
class FleetCheck:
    """A check seen on some node, with its status on each node (absent where it did not run)."""

    check: str
    title: str
    statuses: Mapping[str, Status]

    @property
    def problem_nodes(self) -> list[str]:
        return [n for n, s in self.statuses.items() if s.is_problem]

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "title": self.title, "statuses": {n: s.value for n, s in self.statuses.items()},
                "problem_nodes": self.problem_nodes}


def check_matrix(nodes: list[NodeReport]) -> list[FleetCheck]:
    """Every check seen, with its status on each node (absent where it did not run)."""
    order: dict[str, str] = {}
    statuses: dict[str, dict[str, Status]] = {}
    for node in nodes:
        for check in node.report.checks:
            order.setdefault(check.id, check.title)
            statuses.setdefault(check.id, {})[node.name] = check.status
    return [FleetCheck(check_id, title, statuses[check_id]) for check_id, title in order.items()]


@dataclass(frozen=True, slots=True)
class Skipped:
    """An input merge could not read, and why."""

    source: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Fleet:
    """The fleet report (``fleet.json``, ``fleet.html``) of many nodes' reports."""

    nodes: tuple[FleetNode, ...]
    checks: tuple[FleetCheck, ...]
    bandwidth: tuple[BandwidthSpread, ...]
    skipped: tuple[Skipped, ...]
    created_at: str

    @property
    def verdicts(self) -> dict[RunVerdict, int]:
        """How many nodes have each verdict, every verdict listed."""
        counts = Counter(row.node.report.verdict for row in self.nodes)
        return {v: counts.get(v, 0) for v in RunVerdict}

    def with_verdict(self, verdict: RunVerdict) -> list[str]:
        return [row.node.name for row in self.nodes if row.node.report.verdict is verdict]

    @property
    def suspect(self) -> list[str]:
        """The nodes that are a bandwidth outlier in some metric, by name."""
        return sorted({row.node.name for row in self.nodes if row.outlier_in})

    def to_json(self) -> dict[str, Any]:
        """``fleet.json``."""
        return {
            "kind": "preflight-fleet",
            "schema_version": FLEET_SCHEMA_VERSION,
            "tool": {"name": "preflight", "version": preflight.__version__},
            "created_at": self.created_at,
            "outlier_rule": RULE,
            "verdicts": {v.value: n for v, n in self.verdicts.items()},
            "not_ready": self.with_verdict(RunVerdict.NOT_READY),
            "not_judged": self.with_verdict(RunVerdict.ERROR),
            "suspect": self.suspect,
            "nodes": [row.as_dict() for row in self.nodes],
            "checks": [c.as_dict() for c in self.checks],
            "bandwidth": [b.as_dict() for b in self.bandwidth],
            "skipped": [s.as_dict() for s in self.skipped],
        }


def build_fleet(nodes: list[NodeReport], skipped: list[Skipped] | None = None) -> Fleet:
    """The fleet of ``nodes``; ``skipped`` lists the inputs that could not be read, so the page says that
    the fleet is not complete."""
    spread = bandwidth_spread(nodes)
    suspects: dict[str, list[str]] = {}
    for row in spread:
        for outlier in row.outliers:
            suspects.setdefault(outlier.node, []).append(row.label)
    return Fleet(nodes=tuple(FleetNode(node, tuple(suspects.get(node.name, []))) for node in nodes),
                 checks=tuple(check_matrix(nodes)), bandwidth=tuple(spread), skipped=tuple(skipped or ()),
                 created_at=datetime.now(timezone.utc).isoformat())


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
