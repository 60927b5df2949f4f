"""The run verdict ERROR (issue 25 item 1): a run in which no check finished, or preflight crashed before
it found a fault, is never READY in any output, and exits 2 naming the cause."""

from __future__ import annotations

import json
from typing import Any
from pathlib import Path

import pytest

from preflight.commands import merge, report
from preflight.errors import EXIT_NOT_READY, EXIT_OK, EXIT_USAGE
from preflight.outcome import RUN_VERDICTS, RunVerdict, Status, fail, passed, run_verdict, warn
from preflight.report.document import Report
from preflight.report.fleet import NodeReport, build_fleet
from preflight.report.fleet_html import render_fleet_html
from preflight.report.html import render_html
from preflight.report.model import CheckResult, RunRecord, build_report
from preflight.report.oneline import format_oneline
from preflight.report.prometheus import run_families
from preflight.report.terminal import verdict_block
from preflight.report.validate import first_problem
from tests.conftest import validate_report
from tests.fleet_reports import make_report, node_facts


def _record(*verdicts: tuple[str, Status], collected: int | None = None) -> RunRecord:
    record = RunRecord(argv=["preflight"])
    names = [f"test_x.py::test_{i}" for i in range(collected if collected is not None else len(verdicts))]
    record.collected = names
    for nodeid, (_name, status) in zip(names, verdicts, strict=False):
        verdict = {Status.PASS: passed("ok"), Status.WARN: warn("SLOW", "slow", "fix it"),
                   Status.FAIL: fail("BROKEN", "broken", "fix it")}[status]
        record.add(CheckResult(nodeid, nodeid.split("::")[1], "A check", "x", verdict, 0.1))
    return record


def _report(record: RunRecord) -> dict[str, Any]:
    data = build_report(record, node=node_facts("node-1"), environment={}, options={},
                        exit_code=record.verdict().exit_code()).to_json()
    validate_report(data)
    assert first_problem(data) is None
    return data


def test_exit_codes_follow_the_verdict() -> None:
    assert [RunVerdict(v).exit_code() for v in RUN_VERDICTS] == [EXIT_OK, EXIT_OK, EXIT_NOT_READY, EXIT_USAGE]
    assert RunVerdict.DEGRADED.exit_code(strict=True) == EXIT_NOT_READY
    assert run_verdict([], judged=False) is RunVerdict.ERROR
    assert run_verdict([Status.PASS, Status.FAIL], judged=False) is RunVerdict.NOT_READY  # a fault found stands
    assert run_verdict([Status.PASS], judged=True) is RunVerdict.READY


def test_no_check_finished_is_an_error_never_ready() -> None:
    record = _record(collected=3)
    record.internal_error = "NotADirectoryError: [Errno 20] Not a directory: '/home/u/.cache/preflight'"
    error = record.error()
    assert error is not None and error.code == "NO_CHECK_FINISHED" and "Not a directory" in error.summary
    data = _report(record)
    assert data["verdict"] == "ERROR" and data["run"]["exit_code"] == EXIT_USAGE
    assert Report.from_json(data).headline == "ERROR: NO_CHECK_FINISHED"


def test_a_session_with_nothing_collected_names_the_selection() -> None:
    error = _record(collected=0).error()
    assert error is not None and "no check matches the selection" in error.summary


def test_a_crash_after_some_checks_is_an_error_unless_a_failure_was_found() -> None:
    passing = _record(("a", Status.PASS), collected=4)
    passing.internal_error = "RuntimeError: boom"
    assert passing.verdict() is RunVerdict.ERROR
    assert passing.error() is not None and passing.error().code == "RUN_INTERNAL_ERROR"  # type: ignore[union-attr]
    assert "after 1 of 4 checks" in passing.error().summary  # type: ignore[union-attr]
    failing = _record(("a", Status.FAIL), collected=4)
    failing.internal_error = "RuntimeError: boom"
    assert failing.verdict() is RunVerdict.NOT_READY


def test_an_interrupted_run_stays_not_ready() -> None:
    record = _record(collected=5)
    record.interrupted, record.interruption = True, "terminated by SIGTERM"
    assert record.error() is None and record.verdict() is RunVerdict.NOT_READY


def test_every_writer_says_error() -> None:
    record = _record(collected=2)
    record.internal_error = "OSError: [Errno 30] Read-only file system"
    data = Report.from_json(_report(record))
    line = format_oneline(data)
    assert line.startswith("ERROR: NO_CHECK_FINISHED - no check finished: OSError") and len(line) <= 80
    html = render_html(data)
    assert 'class="verdict ERROR"' in html and "NO_CHECK_FINISHED" in html and "Read-only file system" in html
    families = {family.name: family for family in run_families(data)}
    verdicts = {sample.labels["verdict"]: sample.value for sample in families["preflight_verdict"].samples}
    assert verdicts == {"READY": 0.0, "DEGRADED": 0.0, "NOT READY": 0.0, "ERROR": 1.0}
    assert families["preflight_exit_code"].samples[0].value == 2.0
    block = verdict_block(data, written=[], width=80)
    assert block[-1] == "ERROR: NO_CHECK_FINISHED" and any("preflight could not judge the node" in b for b in block)


def test_report_oneline_exits_2_and_merge_counts_the_node_not_judged(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    record = _record(collected=2)
    record.internal_error = "OSError: [Errno 30] Read-only file system"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(_report(record)))
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps(make_report("node-2", [("ddp", passed("ok"))])))
    assert report.main([str(broken), "--oneline"]) == EXIT_USAGE
    assert capsys.readouterr().out.startswith("ERROR: NO_CHECK_FINISHED")
    assert merge.main([str(broken), str(ready), "--out", str(tmp_path / "fleet")]) == EXIT_NOT_READY
    fleet = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert fleet["verdicts"] == {"READY": 1, "DEGRADED": 0, "NOT READY": 0, "ERROR": 1}
    assert fleet["not_judged"] == ["node-1"] and fleet["not_ready"] == []
    assert "1 ERROR" in capsys.readouterr().out
    html = render_fleet_html(build_fleet([NodeReport("node-1", "broken.json", Report.from_json(json.loads(broken.read_text())))]))
    assert "badge ERROR" in html


def test_an_old_report_without_run_error_still_reads(tmp_path: Path) -> None:
    data = make_report("node-3", [("ddp", passed("ok"))])
    data["schema_version"] = "2.0"
    del data["run"]["error"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert report.main([str(path), "--out", str(tmp_path / "old.html")]) == EXIT_OK
    assert "Not judged" not in (tmp_path / "old.html").read_text()
