"""The pytest plugin: options, markers, the ``settings`` and ``record`` fixtures, and the hand-off
of every check's verdict to the report.

It is loaded through the ``pytest11`` entry point (or the root ``conftest.py`` of a checkout). It
stays inert for ordinary test runs: the report is written only for a ``preflight`` run (a
:class:`PreflightRun` among the session's plugins), when checks from ``preflight.checks`` are
collected, or when a report directory is given on the command line. ``preflight`` hands it the
settings it parsed and reads the run's :class:`~preflight.report.run_result.RunResult` back; pytest
alone (``pytest checks/ --preflight-cpu``) builds the settings from its own ``--preflight-*`` options.
What the plugin keeps for the run is on ``config.stash`` under the keys of :mod:`preflight.stash`.
"""

from __future__ import annotations

import os
import pkgutil
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import preflight.fixtures
from preflight.locations import checks_dir
from preflight.node import Node
from preflight.node.transports import Transports
from preflight.options import argparse_kwargs
from preflight.outcome import Status, Verdict, error
from preflight.parse.quantity import QuantityError
from preflight.probe.job_torch import JobTorch
from preflight.probe.nvml_snapshot import GpuReference
from preflight.recording import STATE_KEY, CheckState, Recorder, apply_to_report, verdict_for_phase
from preflight.report.collector import ReportCollector
from preflight.report.model import CheckResult
from preflight.report.redact import redact_text
from preflight.report.run_result import RunResult, run_result
from preflight.report.writing import HTML_NAME, JSON_NAME
from preflight.settings import OPTIONS, Settings
from preflight.stash import COLLECTOR_KEY, SETTINGS_KEY, collector_of, is_check, node_for

# Every module of preflight.fixtures is a plugin of its own (fixtures and hooks for one area).
pytest_plugins = [f"preflight.fixtures.{m.name}" for m in pkgutil.iter_modules(preflight.fixtures.__path__)]
pytest_plugins.append("preflight.report.terminal")  # preflight's own terminal output (--preflight-terminal)

DEADLINE_CODE = "RUN_DEADLINE"

MARKERS = (
    "gpu: the check needs at least one visible NVIDIA GPU",
    "distributed: the check launches torchrun workers (one launch at a time)",
    "slow: opt-in check that takes long (runs only with --preflight-slow)",
)


class DeadlinePassed(Exception):
    """The overall --timeout passed before a check could start."""


class PreflightRun:
    """One ``preflight`` run, handed to ``pytest.main(argv, plugins=[run])``: the settings the command parsed
    (pytest's own ``--preflight-*`` options are not read then), and the run's result once pytest returns."""

    def __init__(self, settings: Settings, job_torch: JobTorch | None = None) -> None:
        self.settings = settings
        self.job_torch = job_torch  # the command already asked the job's interpreter (preflight rehearse)
        self._collector: ReportCollector | None = None

    @pytest.hookimpl(trylast=True)  # after the plugin's pytest_configure made the collector
    def pytest_configure(self, config: pytest.Config) -> None:
        self._collector = collector_of(config)
        if self.job_torch is not None and not hasattr(config, "workerinput"):
            node_for(config).torch_known(self.job_torch, "the command, before the run")

    def result(self) -> RunResult | None:
        """The verdict, exit code and reports of the finished run; None when no report was ever built (pytest
        refused the arguments, or nothing was collected)."""
        collector = self._collector
        if collector is None or collector.report is None:
            return None
        return run_result(collector.report, report_dir=collector.report_dir, json_name=JSON_NAME, html_name=HTML_NAME,
                          written=collector.written, write_error=collector.write_error, shown=collector.shown)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight", "preflight: node readiness checks")
    for option in OPTIONS:
        group.addoption(option.pytest_flag, **{**argparse_kwargs(option), "dest": f"preflight_{option.dest}"})


def _cli_run(config: pytest.Config) -> PreflightRun | None:
    """The :class:`PreflightRun` the ``preflight`` command registered, None under pytest alone."""
    return next((p for p in config.pluginmanager.get_plugins() if isinstance(p, PreflightRun)), None)


def _settings_from(config: pytest.Config) -> Settings:
    """pytest alone: the settings from its own parse of the ``--preflight-*`` options."""
    try:
        return Settings.from_options({o.dest: config.getoption(f"preflight_{o.dest}") for o in OPTIONS})
    except QuantityError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from preflight import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_preflight_transports(config: pytest.Config) -> Transports:
    """The real transports (a test-only plugin's implementation runs first and wins), with the job's
    interpreter from ``--python``."""
    return Transports(python=config.stash[SETTINGS_KEY].python, environ=dict(os.environ))


def pytest_configure(config: pytest.Config) -> None:
    started = time.monotonic()  # the overall --timeout counts from pytest's configuration, as ever
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    run = _cli_run(config)
    settings = (run.settings if run is not None else _settings_from(config)).with_(started=started)
    config.stash[SETTINGS_KEY] = settings
    if hasattr(config, "workerinput"):
        return  # xdist worker: the controller writes the report
    explicit = run is not None or config.getoption("preflight_report_dir") is not None
    shipped = str(checks_dir())
    runs_checks = any(str(Path(a).resolve()).startswith(shipped) or a.startswith("preflight.checks")
                      for a in config.args)
    if explicit or runs_checks:
        collector = ReportCollector(config, settings)
        config.stash[COLLECTOR_KEY] = collector
        config.pluginmanager.register(collector, "preflight-report")  # before its first file: see open()
        collector.open()
        node_for(config)  # starts the job's torch probe now: it takes a torch import


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Cheap probes first, launches last: a node whose GPUs are missing says so in seconds.
    # Distributed checks in the launch's phase order (each waits for its phase on pytest's one thread).
    from preflight.launch.rehearsal_start import launch_order

    def place(item: pytest.Item) -> tuple[bool, int]:
        distributed = item.get_closest_marker("distributed") is not None
        return distributed, launch_order(item) if distributed else 0

    items.sort(key=place)
    if config.stash[SETTINGS_KEY].slow:
        return
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.skip(reason="opt-in slow check: run with --slow to include it"))


@pytest.fixture(scope="session")
def node(pytestconfig: pytest.Config) -> Node:
    """The run's node model: ``node.torch``, ``node.job`` and every other fact about the node."""
    return node_for(pytestconfig)


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    """The run's options, one typed field each (``settings.expect_gpus``, ``settings.model_params``, ...)."""
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Recorder:
    """Record this check's verdict: ``record(verdict)``, ``record.metric(name, value, unit)``."""
    return Recorder(request.node.stash.setdefault(STATE_KEY, CheckState()))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not is_check(item):
        return  # the overall deadline is preflight's, not that of an ordinary test run
    settings = item.config.stash[SETTINGS_KEY]
    if settings.remaining_s() <= 0:
        raise DeadlinePassed(f"the overall --timeout of {settings.timeout_s:.0f} s passed before this check started")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    if not is_check(item):
        return report
    state = item.stash.setdefault(STATE_KEY, CheckState())
    state.duration_s += report.duration
    if call.excinfo is not None and call.excinfo.errisinstance(DeadlinePassed):
        verdict: Verdict | None = error(str(call.excinfo.value), code=DEADLINE_CODE)
    else:
        verdict = verdict_for_phase(call.when, report, call.excinfo, state)
    if verdict is not None:
        state.phases[call.when] = verdict
        if call.when == "call":
            apply_to_report(verdict, report, item)
    if call.when == "call" or (verdict is not None and verdict.status is not Status.PASS):
        status = verdict.status.value if verdict else "PASS"
        report.user_properties = [*report.user_properties, ("preflight.status", status)]
    if call.when == "teardown":
        final = state.final()
        report.user_properties = [*report.user_properties, ("preflight.verdict", final.status.value),
                                  ("preflight.code", final.code or ""), ("preflight.summary", final.summary),
                                  ("preflight.remediation", final.remediation or "")]
        collector = item.config.stash.get(COLLECTOR_KEY, None)
        if collector is not None:
            collector.add_result(_check_result(item, final, state))
    _redact_report(report)
    return report


def _redact_report(report: pytest.TestReport) -> None:
    """What pytest itself writes (JUnit XML, terminal) gets the same scrubbing as our reports."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, lineno, reason = report.longrepr
        report.longrepr = (path, lineno, redact_text(str(reason)))
    elif report.longrepr is not None:
        report.longrepr = redact_text(str(report.longrepr))
    report.sections = [(title, redact_text(text)) for title, text in report.sections]
    report.user_properties = [(name, redact_text(value) if isinstance(value, str) else value)
                              for name, value in report.user_properties]


def _check_result(item: pytest.Item, verdict: Verdict, state: CheckState) -> CheckResult:
    function = getattr(item, "function", None)
    doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
    module = getattr(getattr(item, "module", None), "__name__", "") or ""
    group = module.rsplit(".", 1)[-1].removeprefix("test_")
    return CheckResult(id=item.nodeid, name=item.name, title=doc[0].strip() if doc else item.name, group=group,
                       verdict=verdict, duration_s=state.duration_s, gpu=_gpu_reference(item))


def _gpu_reference(item: pytest.Item) -> GpuReference | None:
    """The ids of the GPU a per-GPU check (``gpu`` fixture, parametrized by NVML index) is about."""
    callspec = getattr(item, "callspec", None)
    index = callspec.params.get("gpu") if callspec is not None else None
    if not isinstance(index, int) or isinstance(index, bool) or SETTINGS_KEY not in item.config.stash:
        return None
    return node_for(item.config).gpu_reference(index)


_STATUS_WORDS = {
    "PASS": ("passed", ".", ("PASS", {"green": True})),
    "WARN": ("warned", "W", ("WARN", {"yellow": True})),
    "FAIL": ("failed", "F", ("FAIL", {"red": True})),
    "ERROR": ("error", "E", ("ERROR", {"red": True})),
    "SKIP": ("skipped", "s", ("SKIP", {"yellow": True})),
}


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    """Show WARN as its own word; show each check's verdict word in verbose mode."""
    status = dict(getattr(report, "user_properties", ())).get("preflight.status")
    if report.when == "call" and status in _STATUS_WORDS:
        return _STATUS_WORDS[status]
    return None
