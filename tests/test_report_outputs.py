"""Smaller faults of issue 16 item 10: an unwritable JUnit path, a signal while the reports are written,
and another preflight run seen by the leftover-process check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight import cli
from preflight.judge.host_session import judge_leftover_processes
from preflight.probe.host_processes import PREFLIGHT_RUN, ProcessInfo, TrainingProcess, classify
from preflight.outcome import Status
from tests.conftest import validate_report
from tests.test_safety_e2e import HOSTILE, _assert_one_line_usage_error, _env

# ---------------------------------------------------------------------------------------------
# --junitxml that cannot be written: one line before anything runs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "why"),
    [("file/j.xml", "is not a directory"), ("file/deeper/j.xml", "is not a directory"), ("dir", "Is a directory"),
     ("/proc/preflight-junit.xml", "No such file or directory")],
)  # fmt: skip
def test_an_unwritable_junit_path_is_a_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           where: str, why: str) -> None:
    (tmp_path / "file").write_text("a file, not a directory")
    (tmp_path / "dir").mkdir()
    path = where if where.startswith("/") else str(tmp_path / where)
    started = time.monotonic()
    code = cli.main(["--report-dir", str(tmp_path / "reports"), "--junitxml", path])
    captured = capsys.readouterr()
    _assert_one_line_usage_error(code, captured.out, captured.err, what=where)
    assert f"cannot write the JUnit XML to {path}" in captured.err and why in captured.err
    assert time.monotonic() - started < 30, "refused before any check ran"


def test_a_writable_junit_path_is_left_as_it_was(tmp_path: Path) -> None:
    existing = tmp_path / "ci" / "junit.xml"
    existing.parent.mkdir()
    existing.write_text("<testsuites/>")
    cli._check_junit_path(existing)
    cli._check_junit_path(tmp_path / "new" / "junit.xml")
    assert existing.read_text() == "<testsuites/>"
    assert not (tmp_path / "new" / "junit.xml").exists()


# ---------------------------------------------------------------------------------------------
# A signal while the reports are written: preflight.json and the jsonl finish line agree
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_during_report_writing_leaves_report_and_finish_line_agreeing(tmp_path: Path, how: str) -> None:
    """The hostile node slows the HTML render (``PREFLIGHT_TEST_STALL=report``); the run's one WARN makes it
    DEGRADED until the signal, which the collector holds, then writes the reports again as interrupted."""
    out = tmp_path / "reports"
    mark = tmp_path / "stalled"
    env = {"PREFLIGHT_TEST_STALL": "report", "PREFLIGHT_TEST_STALL_MARK": str(mark), "PREFLIGHT_TEST_RUN": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "--report-dir", str(out), "-k",
                             "planted_pass or planted_markup", "--", *HOSTILE], env=_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(getattr(signal, how))
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, stdout[-2000:] + stderr[-2000:]
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    assert (report["verdict"], report["run"]["interrupted"]) == ("NOT READY", True)
    assert report["run"]["interruption"] == f"{how} while the reports were written"
    lines = [json.loads(line) for line in (out / "preflight.jsonl").read_text().splitlines()]
    finish = [line for line in lines if line["type"] == "finish"]
    assert [(f["verdict"], f["interrupted"]) for f in finish] == [("NOT READY", True)]
    assert lines[-1] == finish[0], "the finish line is the log's last"
    assert {line["name"] for line in lines if line["type"] == "check"} == {"test_planted_pass",
                                                                          next(c["name"] for c in report["checks"]
                                                                               if c["status"] == "WARN")}


# ---------------------------------------------------------------------------------------------
# Another preflight run in progress is named as such, never a leftover to kill
# ---------------------------------------------------------------------------------------------

PREFLIGHT_PROCESSES = [
    ProcessInfo(3000, 1, "preflight", ("/home/bob/.venv/bin/preflight", "--report-dir", "r1")),
    ProcessInfo(3001, 1, "python3", ("/usr/bin/python3", "-m", "preflight", "--timeout", "60")),
    ProcessInfo(3002, 3001, "python3", ("/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
                                        "--nproc-per-node=8", "-m", "preflight.workers.rehearsal", "/r/logs/plan.json")),
    ProcessInfo(3003, 3002, "python3", ("/usr/bin/python3", "-m", "preflight.workers.rehearsal", "/r/logs/plan.json")),
]


@pytest.mark.parametrize("process", PREFLIGHT_PROCESSES, ids=lambda p: str(p.pid))
def test_a_preflight_process_is_a_run_in_progress(process: ProcessInfo) -> None:
    assert classify(process) == PREFLIGHT_RUN


def test_only_other_preflight_runs_is_a_run_in_progress_with_no_kill_advice() -> None:
    verdict = judge_leftover_processes([TrainingProcess(p, PREFLIGHT_RUN) for p in PREFLIGHT_PROCESSES])
    assert (verdict.status, verdict.code) == (Status.WARN, "PREFLIGHT_RUN_IN_PROGRESS")
    assert verdict.summary.startswith("another preflight run is in progress (pid 3000, 3001, 3002, 3003)")
    assert verdict.remediation and "kill" not in verdict.remediation and "--report-dir" in verdict.remediation


def test_a_real_leftover_beside_a_preflight_run_is_the_one_to_kill() -> None:
    leftover = TrainingProcess(ProcessInfo(4000, 1, "torchrun", ("torchrun", "train.py")), "torchrun launcher")
    verdict = judge_leftover_processes([leftover, *(TrainingProcess(p, PREFLIGHT_RUN) for p in PREFLIGHT_PROCESSES)])
    assert verdict.code == "LEFTOVER_TRAINING_PROCESSES"
    assert verdict.remediation and "kill 4000`" in verdict.remediation and "3000" not in verdict.remediation


@pytest.mark.e2e
def test_a_live_preflight_run_is_not_called_a_leftover(tmp_path: Path) -> None:
    """Run A stalls at collection in its own directory; run B's leftover check sees it as a run in
    progress (other agents' processes on a shared machine may add real leftovers: A is never one)."""
    mark = tmp_path / "stalled"
    env = {"PREFLIGHT_TEST_STALL": "collect", "PREFLIGHT_TEST_STALL_MARK": str(mark), "PREFLIGHT_TEST_RUN": str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-m", "preflight", "--report-dir", str(tmp_path / "a"), "--", *HOSTILE],
                             env=_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        second = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(tmp_path / "b"), "-k",
                                 "leftover"], env=_env(), capture_output=True, text=True, timeout=180)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    report = json.loads((tmp_path / "b" / "preflight.json").read_text())
    check = next(c for c in report["checks"] if c["name"] == "test_no_leftover_training_processes")
    assert check["code"] in ("PREFLIGHT_RUN_IN_PROGRESS", "LEFTOVER_TRAINING_PROCESSES"), second.stdout[-2000:]
    assert f"kill {first.pid}" not in (check["remediation"] or "") and f" {first.pid} " not in (check["remediation"] or "")
    if check["code"] == "PREFLIGHT_RUN_IN_PROGRESS":
        assert "another preflight run is in progress" in check["summary"]
        assert f"pid {first.pid}: " in check["evidence"]["processes"]
