"""What preflight adds to pytest's JUnit XML so a CI view shows the verdicts as they are.

JUnit has four outcomes (passed, failed, error, skipped) and no "warning"; GitLab's test report and
Jenkins' JUnit page show only those, plus the test's name and, for failures, the failure body. A
WARN stays a passed test (a DEGRADED node exits 0, so CI must not count it as failed), and its
testcase name starts with ``WARN `` (the one thing both views list for every test), its
``preflight.*`` properties carry the code, summary and fix. FAIL and ERROR bodies carry the fix
(``recording.apply_to_report``). The suite is named ``preflight`` unless the run's
``junit_suite_name`` says otherwise.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import traceback
from dataclasses import dataclass

import pytest
from _pytest.junitxml import mangle_test_address, xml_key  # pytest's JUnit plugin object: no public handle

SUITE_NAME = "preflight"
DEFAULT_SUITE_NAME = "pytest"  # junitxml's own default for junit_suite_name
WARN_PREFIX = "WARN "


def raised_by_junit(exc: BaseException) -> bool:
    """True when ``exc`` came from pytest's JUnit plugin (its file could not be written)."""
    return any(frame.filename.endswith("junitxml.py") for frame in traceback.extract_tb(exc.__traceback__))


def name_suite(config: pytest.Config) -> None:
    """``<testsuite name="preflight">``, unless the user named the suite (``-o junit_suite_name=...``)."""
    xml = config.stash.get(xml_key, None)
    if xml is not None and xml.suite_name == DEFAULT_SUITE_NAME:
        xml.suite_name = SUITE_NAME


def mark_warning(config: pytest.Config, report: pytest.TestReport) -> None:
    """Prefix the testcase name of a check whose verdict is WARN (read from its call report)."""
    xml = config.stash.get(xml_key, None)
    if xml is None or report.when != "call" or dict(report.user_properties).get("preflight.status") != "WARN":
        return
    xml.node_reporter(report).add_attribute("name", WARN_PREFIX + mangle_test_address(report.nodeid)[-1])


RUN_ERROR_NODEID = "preflight::run"


def record_run_error(config: pytest.Config, code: str, summary: str) -> None:
    """One ``<error>`` testcase for a run that judged nothing (no check finished, preflight crashed): a CI
    reading the JUnit file alone must not pass a run with zero tests as green."""
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    setup = pytest.TestReport(RUN_ERROR_NODEID, ("preflight", None, "run"), {}, "failed", f"[{code}] {summary}",
                              "setup")
    teardown = pytest.TestReport(RUN_ERROR_NODEID, ("preflight", None, "run"), {}, "passed", None, "teardown")
    for report in (setup, teardown):
        xml.pytest_runtest_logreport(report)


@dataclass(frozen=True, slots=True)
class PendingJunit:
    """pytest's JUnit writer pointed at a temporary file beside the real one, until :func:`commit`."""

    temporary: str
    target: str


def write_atomically(config: pytest.Config) -> PendingJunit | None:
    """Make pytest's JUnit plugin write a private temporary file beside its target (a full disk then leaves
    no truncated ``preflight-junit.xml`` for CI to read as a result); None without ``--junitxml``."""
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return None
    target = xml.logfile
    folder = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=folder)
        os.close(fd)
    except OSError:
        return None  # pytest then fails on the target itself, and the run says so in one line
    xml.logfile = temporary
    return PendingJunit(temporary, target)


def commit(config: pytest.Config, pending: PendingJunit | None) -> None:
    """Flush the written file to disk and rename it into place (an OSError when the disk took it only in
    part: the temporary file is removed, and no JUnit file is left)."""
    if pending is None:
        return
    _restore(config, pending)
    try:
        fd = os.open(pending.temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(pending.temporary, pending.target)
    except OSError:
        abandon(config, pending)
        raise


def abandon(config: pytest.Config, pending: PendingJunit | None) -> None:
    """The JUnit file could not be written whole: remove the temporary one."""
    if pending is None:
        return
    _restore(config, pending)
    with contextlib.suppress(OSError):
        os.unlink(pending.temporary)


def _restore(config: pytest.Config, pending: PendingJunit) -> None:
    xml = config.stash.get(xml_key, None)
    if xml is not None:
        xml.logfile = pending.target  # its terminal line names the real file
