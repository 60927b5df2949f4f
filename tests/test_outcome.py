"""The verdict model: codes, remediations, severity order and the node's verdict."""

from __future__ import annotations

import math

import pytest

from preflight.outcome import Metric, RunVerdict, Status, error, fail, passed, run_verdict, skip, warn, worst


def test_warn_and_fail_need_a_code_and_a_remediation() -> None:
    with pytest.raises(ValueError):
        fail("", "broken", "fix it")
    with pytest.raises(ValueError):
        warn("SLOW_LINK", "slow", "")
    with pytest.raises(ValueError):
        fail("not-snake", "broken", "fix it")


def test_metrics_reject_non_finite_values_and_units_in_names() -> None:
    with pytest.raises(ValueError):
        Metric("busbw", math.nan, "GB/s")
    with pytest.raises(ValueError):
        Metric("busbw GB/s", 1.0)
    assert Metric("busbw_peak", 231.5, "GB/s").as_dict()["unit"] == "GB/s"


def test_worst_orders_fail_above_error_above_warn() -> None:
    verdicts = [passed("ok"), skip("n/a"), warn("W_CODE", "w", "do"), error("e"), fail("F_CODE", "f", "do")]
    assert getattr(worst(verdicts), "status", None) is Status.FAIL
    assert getattr(worst(verdicts[:4]), "status", None) is Status.ERROR
    assert getattr(worst(verdicts[:3]), "status", None) is Status.WARN
    assert worst([]) is None


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([Status.PASS, Status.SKIP], RunVerdict.READY),
        ([], RunVerdict.READY),
        ([Status.PASS, Status.WARN], RunVerdict.DEGRADED),
        ([Status.WARN, Status.ERROR], RunVerdict.NOT_READY),
        ([Status.FAIL], RunVerdict.NOT_READY),
    ],
)
def test_run_verdict(statuses: list[Status], expected: RunVerdict) -> None:
    assert run_verdict(statuses) is expected
