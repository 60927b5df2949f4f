"""The finished report as a node_exporter textfile (Prometheus text format), for fleet dashboards.

Written with ``prometheus_client`` into a registry of its own (never the process-wide default) and
``write_to_textfile``, which writes a temporary file beside the target and renames it over it, so
node_exporter never reads half a file. No timestamps (the textfile collector rejects them);
staleness is node_exporter's ``node_textfile_mtime_seconds``.

Families: ``preflight_verdict{verdict}`` (1 for this run's verdict, 0 for the others),
``preflight_check_status{check,group,status}`` (the same state-set idiom per check),
``preflight_check_problem_info{check,status,code}``, ``preflight_gpu_count{source}``, run
facts, and every numeric metric any check recorded as ``preflight_<name>_<unit>{check,...}``
(e.g. ``preflight_busbw_peak_gigabytes_per_second{check,run}``,
``preflight_step_time_max_seconds{check}``; a name that already says its unit, such as
``ram_bytes_per_rank``, does not repeat it), so checks added later appear without a change here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from preflight.outcome import RunVerdict, Status
from preflight.report.document import CheckResult, NodeFacts, Report

PREFIX = "preflight"
UNIT_SUFFIXES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "B": "bytes",
                 "GB/s": "gigabytes_per_second", "MB/s": "megabytes_per_second", "%": "percent", "W": "watts",
                 "C": "celsius", "Hz": "hertz", "MHz": "megahertz"}
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]+")


class PrometheusPathError(ValueError):
    """The textfile path cannot be used by node_exporter's textfile collector."""


def prometheus_path(text: str) -> Path:
    """Option type for ``--prometheus FILE``: a path ending in ``.prom`` (made absolute)."""
    path = Path(text).expanduser()
    if path.suffix != ".prom" or path.name == ".prom":
        raise PrometheusPathError(f"node_exporter's textfile collector only reads *.prom files, got {text!r}")
    return path.resolve()


def write_prometheus(report: Report, path: Path) -> None:
    """Write ``report`` as a textfile at ``path`` atomically (temp file beside it, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReportMetricsCollector(report))
    write_to_textfile(str(path), registry)


class ReportMetricsCollector(Collector):
    """A collector that yields the families of one finished report (read once, at write time)."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from run_families(self.report)
        yield from check_families(self.report)
        yield from metric_families(self.report.checks)


def run_families(report: Report) -> Iterator[GaugeMetricFamily]:
    """The run's verdict, counts, timing and GPU count."""
    run = report.run
    verdict = GaugeMetricFamily(f"{PREFIX}_verdict", "1 for this run's verdict (READY, DEGRADED, NOT READY, "
                                "ERROR: not judged), 0 for the others", labels=["verdict"])
    for name in RunVerdict:
        verdict.add_metric([name.value], 1.0 if report.verdict is name else 0.0)
    yield verdict
    yield _single(f"{PREFIX}_exit_code", "preflight's exit code: 0 ready or degraded, 1 not ready, 2 could not judge",
                  run.exit_code)
    yield _single(f"{PREFIX}_run_interrupted", "1 when the run was cut short (deadline, signal)", run.interrupted)
    yield _single(f"{PREFIX}_run_duration_seconds", "wall time of the whole run", run.duration_s)
    finished = _epoch(run.finished_at)
    yield _single(f"{PREFIX}_last_run_timestamp_seconds", "when the run finished (Unix time)", finished)
    counts = GaugeMetricFamily(f"{PREFIX}_checks", "number of checks that ended with each status", labels=["status"])
    for status in Status:
        counts.add_metric([status.value], float(report.summary.get(status.value, 0)))
    yield counts
    gpus = GaugeMetricFamily(f"{PREFIX}_gpu_count", "GPUs seen, by who saw them (nvml, torch)", labels=["source"])
    for source, count in gpu_counts(report.node).items():
        gpus.add_metric([source], float(count))
    yield gpus
    info = GaugeMetricFamily(f"{PREFIX}_run_info", "always 1; the tool version and profile as labels",
                             labels=["version", "profile"])
    info.add_metric([report.tool_version, run.profile or ""], 1.0)
    yield info


def check_families(report: Report) -> Iterator[GaugeMetricFamily]:
    """Each check's status (state set) and, for problems, its code."""
    status = GaugeMetricFamily(f"{PREFIX}_check_status", "1 for the status the check ended with, 0 for the others",
                               labels=["check", "group", "status"])
    problem = GaugeMetricFamily(f"{PREFIX}_check_problem_info", "1 for each check that ended WARN, FAIL or ERROR, "
                                "with its stable code", labels=["check", "status", "code"])
    for check in report.checks:
        for name in Status:
            status.add_metric([check.id, check.group, name.value], 1.0 if check.status is name else 0.0)
        if check.is_problem:
            problem.add_metric([check.id, check.status.value, check.verdict.code or ""], 1.0)
    yield status
    yield problem


def metric_families(checks: Iterable[CheckResult]) -> Iterator[GaugeMetricFamily]:
    """Every numeric metric of every check, one family per (name, unit), labelled by check."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    helps: dict[str, str] = {}
    for check in checks:
        for metric in check.verdict.metrics:
            value = _number(metric.value)
            if value is None:
                continue
            family = family_name(metric.name, metric.unit)
            labels = {"check": check.id}
            labels.update({_label_name(k): str(v) for k, v in metric.labels.items()})
            samples.setdefault(family, {})[tuple(sorted(labels.items()))] = value
            unit = metric.unit or "no unit"
            helps.setdefault(family, f"check metric {metric.name} ({unit})")
    for family, by_labels in sorted(samples.items()):
        names = sorted({k for labels in by_labels for k, _ in labels}, key=lambda n: (n != "check", n))
        gauge = GaugeMetricFamily(family, helps[family], labels=names)
        for label_pairs, value in by_labels.items():
            found = dict(label_pairs)
            gauge.add_metric([found.get(n, "") for n in names], value)
        yield gauge


RESERVED = {f"{PREFIX}_{n}" for n in ("verdict", "exit_code", "run_interrupted", "run_duration_seconds", "checks",
                                       "last_run_timestamp_seconds", "gpu_count", "run_info", "check_status",
                                       "check_problem_info")}


def family_name(name: str, unit: str) -> str:
    """``busbw_peak`` + ``GB/s`` -> ``preflight_busbw_peak_gigabytes_per_second``; a name that already
    says its unit keeps it once (``cpu_cores_per_rank`` + ``cores`` -> ``preflight_cpu_cores_per_rank``)."""
    suffix = UNIT_SUFFIXES.get(unit) or _NOT_NAME.sub("_", unit.replace("/", "_per_")).strip("_").lower()
    base = f"{PREFIX}_{_NOT_NAME.sub('_', name).strip('_').lower()}"
    full = f"{base}_{suffix}" if suffix and f"_{suffix}_" not in f"{base}_" else base
    return f"{full}_metric" if full in RESERVED else full


def gpu_counts(node: NodeFacts) -> dict[str, int]:
    """GPUs listed by NVML (the ``gpus`` node section) and counted by torch, where known."""
    found: dict[str, int] = {}
    section = node.facts.get("gpus")
    if isinstance(section, Mapping) and isinstance(section.get("gpus"), list) and not section.get("error"):
        found["nvml"] = len(section["gpus"])
    elif isinstance(section, list):
        found["nvml"] = len(section)
    count = node.section("torch").get("device_count")
    if isinstance(count, int):
        found["torch"] = count
    return found


def _single(name: str, help_text: str, value: Any) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    number = _number(value)
    if number is not None:
        family.add_metric([], number)
    return family


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _label_name(key: str) -> str:
    name = _NOT_NAME.sub("_", key).lstrip("_") or "label"
    name = f"_{name}" if name[0].isdigit() else name
    return "metric_check" if name == "check" else name


def _epoch(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None
