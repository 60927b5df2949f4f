"""Test-only checks that carry planted secrets and markup in every field a check can fill.

Collected only when passed explicitly (``preflight ... -- tests/fakes/planted_checks.py``); the
file name keeps it out of ordinary test runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from preflight.outcome import Metric, View, fail, warn
from preflight.recording import Recorder
from tests.fakes import planted


def test_planted_pass() -> None:
    """A check that passes before anything goes wrong."""


def test_planted_fail_with_secrets(record: Recorder) -> None:
    """A check whose failure text quotes secrets."""
    print(f"debug: HF_TOKEN={planted.HF_TOKEN} via {planted.URL_WITH_PASSWORD}")
    print(f"Authorization: Bearer {planted.BEARER}", file=sys.stderr)
    record.metric("reach_s", 1.5, "s", source=planted.URL_WITH_PASSWORD)
    record.evidence("stderr", f"Authorization: Bearer {planted.BEARER}\n{planted.PEM}\n"
                              f"aws_secret_access_key = {planted.AWS_SECRET}")
    record(fail("PLANTED_LEAK", f"could not fetch {planted.URL_WITH_PASSWORD} with {planted.GITHUB_TOKEN}",
                f"export HF_TOKEN={planted.HF_TOKEN} and --password {planted.PASSWORD}, then rerun",
                details={"token": planted.PLAIN_TOKEN, "key_id": planted.AWS_KEY_ID}))


def test_planted_crash() -> None:
    """A check that crashes with a secret in its exception."""
    raise RuntimeError(f"{planted.MARKUP} could not reach {planted.URL_WITH_PASSWORD} as {planted.AWS_KEY_ID} "
                       f"password={planted.PASSWORD}")


def test_planted_assert() -> None:
    """A check whose assertion message holds a token."""
    assert not planted.GITHUB_TOKEN, f"token {planted.GITHUB_TOKEN} was rejected"


@pytest.mark.parametrize("where", [pytest.param(1, id=f"gpu0{planted.MARKUP}")])
def test_planted_markup(record: Recorder, where: int) -> None:
    """<b>Markup</b> in the title <script>alert('title')</script>"""
    record.metric("planted_markup", 1, planted.MARKUP, label=planted.MARKUP)
    record.evidence(planted.MARKUP, planted.MARKUP)
    record.view(View("table", planted.MARKUP, {"columns": [planted.MARKUP], "rows": [[planted.MARKUP]]}))
    record.view(View(planted.MARKUP, planted.MARKUP, {planted.MARKUP: planted.MARKUP}))
    record(warn("PLANTED_MARKUP", f"summary {planted.MARKUP}", f"remediation {planted.MARKUP}",
                metrics=(Metric("x", planted.MARKUP, planted.MARKUP),)))


def test_planted_stall() -> None:
    """A check that is still running when the run is interrupted (PREFLIGHT_TEST_STALL=check)."""
    if os.environ.get("PREFLIGHT_TEST_STALL") == "check":
        Path(os.environ["PREFLIGHT_TEST_STALL_MARK"]).write_text("check")
        time.sleep(600)
