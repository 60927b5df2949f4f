"""``preflight --oneline`` and ``--prometheus`` through the real command, in a child process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.report.document import Report
from preflight.report.oneline import format_oneline
from tests.test_cli import preflight as run_preflight

pytestmark = pytest.mark.e2e


def test_oneline_is_the_last_line_and_names_the_failing_check(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = run_preflight("--report-dir", str(out), "--oneline", "--expect-gpus", "8", "-k", "test_devices",
                       "--prometheus", str(tmp_path / "node.prom"))
    report = json.loads((out / "preflight.json").read_text())
    assert result.returncode == 1 and report["verdict"] == "NOT READY", result.stdout + result.stderr
    last = result.stdout.rstrip("\n").splitlines()[-1]
    code = next(c["code"] for c in report["checks"] if c["status"] == "FAIL")
    assert last == format_oneline(Report.from_json(report)) and last.startswith(f"NOT READY: {code}") and len(last) <= 80
    assert 'preflight_check_problem_info{check="test_devices.py::' in (tmp_path / "node.prom").read_text()


def test_a_prometheus_path_that_is_not_a_prom_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run_preflight("--prometheus", str(tmp_path / "node.txt"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("preflight: error: argument --prometheus: node_exporter's textfile "
                                            "collector only reads *.prom files")
