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

import pytest
from _pytest.junitxml import mangle_test_address, xml_key  # pytest's JUnit plugin object: no public handle

SUITE_NAME = "preflight"
DEFAULT_SUITE_NAME = "pytest"  # junitxml's own default for junit_suite_name
WARN_PREFIX = "WARN "


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
