"""The typed report (issue 28 item 2): built once, written as preflight.json in its exact shape, read back
from a saved file (old ones too) into the same value, and one status order behind every list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.commands import merge, report
from preflight.errors import EXIT_NOT_READY, EXIT_OK, UsageError
from preflight.outcome import PROBLEM_STATUSES, RunVerdict, Status, error, fail, skip, warn
from preflight.report.document import MalformedReport, Report
from preflight.report.html import render_html
from preflight.report.oneline import format_oneline
from preflight.report.terminal import verdict_block
from tests.conftest import validate_report
from tests.fleet_reports import busbw_check, ddp_check, hung_ddp, make_report, slow_p2p

CORE_KEYS = ["schema_version", "tool", "run", "verdict", "summary", "node", "environment", "checks", "problems",
             "not_run"]


def _cases() -> list[dict[str, Any]]:
    return [make_report("n1", [ddp_check()]),
            make_report("n2", [busbw_check(231.5, "p2p", nop2p=25.0), slow_p2p(), hung_ddp(), ("ecc", skip("no GPU")),
                               ("probe", error("probe crashed", code="PROBE_CRASHED"))],
                        gpu_name="NVIDIA H100 80GB HBM3", gpus=8),
            make_report("n3", [ddp_check()], interrupted="terminated by SIGTERM")]


@pytest.mark.parametrize("index", range(3))
def test_a_report_reads_back_to_the_same_json(index: int) -> None:
    data = _cases()[index]
    validate_report(data)
    typed = Report.from_json(data)
    assert typed.to_json() == data
    assert json.dumps(typed.to_json()) == json.dumps(data)  # key order too
    assert Report.from_json(typed.to_json()) == typed
    assert list(data)[: len(CORE_KEYS)] == CORE_KEYS


def test_the_problems_follow_the_one_order() -> None:
    typed = Report.from_json(_cases()[1])
    assert [c.verdict.code for c in typed.problems] == ["DDP_RANK_HUNG", "PROBE_CRASHED", "NCCL_P2P_SLOW"]
    assert [p["code"] for p in typed.to_json()["problems"]] == [c.verdict.code for c in typed.problems]
    assert all(c.status in PROBLEM_STATUSES for c in typed.problems)


def test_the_status_order_is_one_order() -> None:
    assert sorted(Status, key=lambda s: s.rank) == [Status.PASS, Status.SKIP, Status.WARN, Status.ERROR, Status.FAIL]
    assert PROBLEM_STATUSES == (Status.FAIL, Status.ERROR, Status.WARN)
    assert [s for s in Status if s.is_problem] == [Status.WARN, Status.ERROR, Status.FAIL]
    assert sorted(RunVerdict, key=lambda v: -v.rank) == [RunVerdict.NOT_READY, RunVerdict.ERROR, RunVerdict.DEGRADED,
                                                         RunVerdict.READY]


def test_extra_sections_stay_and_never_replace_a_core_key() -> None:
    data = {**make_report("n1", [ddp_check()]), "rehearsal_note": {"kept": True}}
    typed = Report.from_json(data)
    assert typed.sections == {"rehearsal_note": {"kept": True}} and typed.to_json() == data


def _old(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as an early 2.0 file: no run.error, selection or cpu_rehearsal, no problems, no check gpu,
    details or metric labels."""
    data["schema_version"] = "2.0"
    for key in ("error", "selection", "cpu_rehearsal"):
        del data["run"][key]
    del data["problems"]
    for check in data["checks"]:
        del check["gpu"], check["details"]
        for metric in check["metrics"]:
            metric.pop("labels", None)
    return data


def test_an_old_report_reads_and_every_writer_takes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _old(make_report("n1", [ddp_check(), slow_p2p()]))
    typed = Report.from_json(data)
    assert typed.run.error is None and typed.run.selection is None and not typed.run.cpu_rehearsal
    assert format_oneline(typed).startswith("DEGRADED: NCCL_P2P_SLOW")
    assert verdict_block(typed, written=[], width=80)[-1] == "DEGRADED"
    assert "<h1>DEGRADED: NCCL_P2P_SLOW</h1>" in render_html(typed)
    validate_report(typed.to_json())  # written again, it is a valid report of today's shape
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert report.main([str(path), "--oneline"]) == EXIT_OK
    assert merge.main([str(path), "--out", str(tmp_path / "fleet")]) == EXIT_OK
    assert "fleet: 1 nodes: 0 READY, 1 DEGRADED" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "reason"), [
    (lambda d: d.update(verdict="MAYBE"), "'MAYBE' is not a valid RunVerdict"),
    (lambda d: d["checks"][0].update(status="OK"), "'OK' is not a valid Status"),
    (lambda d: d["run"].update(argv="preflight"), "expected a list of text, got str"),
    (lambda d: d.pop("checks"), "no 'checks'"),
    (lambda d: d["summary"].update(PASS="1"), "expected an integer, got str"),
])
def test_a_value_no_report_holds_is_one_line(change: Any, reason: str) -> None:
    data = make_report("n1", [ddp_check()])
    change(data)
    with pytest.raises(MalformedReport, match=reason):
        Report.from_json(data)


def test_a_saved_report_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    """The schema comes first (its reason names the field); what passes it reads as a report."""
    data = make_report("n1", [hung_ddp()])
    data["checks"][0]["status"] = "OK"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError) as refused:
        report.main([str(path)])
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"{path} is not a valid preflight report: checks[0].status is \"OK\"")


def test_a_degraded_run_keeps_its_strict_exit_code(tmp_path: Path) -> None:
    data = make_report("n1", [slow_p2p()])
    data["run"]["exit_code"] = EXIT_NOT_READY
    path = tmp_path / "strict.json"
    path.write_text(json.dumps(data))
    assert report.main([str(path), "--oneline"]) == EXIT_NOT_READY
    failing = make_report("n1", [("x", fail("GPU_LOST", "gone", "replace it")), ("y", warn("W", "w", "fix"))])
    assert Report.from_json(failing).verdict is RunVerdict.NOT_READY
