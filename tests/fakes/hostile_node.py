"""Test-only pytest plugin (``-p tests.fakes.hostile_node``): a node whose every self-description
is hostile, and a run that stalls at a chosen point so a test can interrupt it there.

- the hostname carries markup and a node fact section carries secrets and markup;
- ``PREFLIGHT_TEST_HOSTILE_GPU=1``: the GPU checks see a fake NVML machine (one A10G) whose GPU
  name carries markup, through the real inventory fixtures;
- ``PREFLIGHT_TEST_STALL=session|collect|collected|check|report`` with ``PREFLIGHT_TEST_STALL_MARK=PATH``
  writes PATH and sleeps (once) when the run reaches that point (``check`` is done by
  ``planted_checks.test_planted_stall``); checks of planted_checks run before the shipped ones.
It never ships with preflight.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from preflight.node.transports import Transports
from preflight.report import writing as report_writing
from preflight.report.document import Report
from preflight.report.facts import add_fact
from tests.fakes import planted
from tests.fakes.nvml import fake_transport
from tests.fakes.nvml_profiles import PROFILES

STALL_S = 600.0
REPORT_STALL_S = 4.0
"""Short, so a run that rightly holds signals while it writes its reports still ends in time; long enough
for a test that sees the mark to signal the run well inside it (it polls the mark every 0.1 s at most)."""


def _stall(point: str, seconds: float = STALL_S) -> None:
    """Stall once at ``point`` (a retry after the interruption goes straight through)."""
    mark = Path(os.environ.get("PREFLIGHT_TEST_STALL_MARK", "/nonexistent/mark"))
    if os.environ.get("PREFLIGHT_TEST_STALL") == point and not mark.exists():
        mark.write_text(point)
        time.sleep(seconds)


@pytest.hookimpl(wrapper=True)
def pytest_preflight_transports(config: pytest.Config) -> Generator[None, Transports | None, Transports | None]:
    """The run's transports with a hostname that carries markup and (with ``PREFLIGHT_TEST_HOSTILE_GPU=1``)
    a fake A10G whose NVML name carries markup."""
    wrapped = yield
    if wrapped is None:
        return None
    hostile = dataclasses.replace(wrapped, hostname=lambda: planted.HOSTNAME)
    if os.environ.get("PREFLIGHT_TEST_HOSTILE_GPU") != "1":
        return hostile
    spec = PROFILES["1x-a10g"]
    gpus = tuple(dataclasses.replace(gpu, name=planted.GPU_NAME) for gpu in spec.gpus)
    return dataclasses.replace(hostile, nvml=fake_transport("1x-a10g", spec=dataclasses.replace(spec, gpus=gpus)))


def pytest_configure(config: pytest.Config) -> None:
    add_fact(config, f"planted{planted.MARKUP}", {planted.MARKUP: planted.URL_WITH_PASSWORD,
                                                  "token": planted.PLAIN_TOKEN, "note": planted.HF_TOKEN})
    if os.environ.get("PREFLIGHT_TEST_STALL") == "report":
        render = report_writing.render_html  # type: ignore[attr-defined]  # writing's own import, replaced below

        def slow_render(report: Report) -> str:
            _stall("report", REPORT_STALL_S)
            return render(report)

        report_writing.render_html = slow_render  # type: ignore[attr-defined]  # the stall this fake plants


def pytest_sessionstart(session: pytest.Session) -> None:
    _stall("session")


def pytest_collectstart(collector: pytest.Collector) -> None:
    if isinstance(collector, pytest.Module):
        _stall("collect")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: "planted" not in item.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    _stall("collected")
