"""The plugin through pytester: every kind of verdict, the terminal words, the JSON and the HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import validate_report

ALL_VERDICTS = '''
import pytest
from preflight.outcome import passed, warn, fail, skip, error

def test_pass(record):
    """A passing check"""
    record(passed("all good"))
    record.metric("busbw_peak", 231.5, "GB/s", run="default")

def test_warn(record):
    record(warn("SLOW_THING", "the thing is slow", "make it fast"))

def test_fail(record):
    record(fail("BROKEN_THING", "broken on gpu3", "replace gpu3"))

def test_skip(record):
    record(skip("no GPU visible: NVML library not found"))

def test_error(record):
    record(error("the probe crashed"))

def test_bare_assert():
    assert 1 == 2, "one is not two"

def test_crash():
    raise RuntimeError("boom")

@pytest.fixture
def broken():
    raise OSError("fixture broke")

def test_setup_error(broken):
    pass

def test_pytest_skip():
    pytest.skip("not applicable here")

def test_no_record():
    pass
'''

EXPECTED = {
    "test_pass": ("PASS", None),
    "test_warn": ("WARN", "SLOW_THING"),
    "test_fail": ("FAIL", "BROKEN_THING"),
    "test_skip": ("SKIP", None),
    "test_error": ("ERROR", "CHECK_ERROR"),
    "test_bare_assert": ("FAIL", "CHECK_ASSERTION"),
    "test_crash": ("ERROR", "CHECK_CRASHED"),
    "test_setup_error": ("ERROR", "CHECK_CRASHED"),
    "test_pytest_skip": ("SKIP", None),
    "test_no_record": ("PASS", None),
}


_ALL_VERDICTS_RUN: list[tuple[pytest.RunResult, Path]] = []


@pytest.fixture
def run_all(pytester: pytest.Pytester) -> tuple[pytest.RunResult, Path]:
    """One inline run of ALL_VERDICTS a process, shared by the tests that read it (its report directory
    outlives the test that made it: pytest keeps the session's temporary directories)."""
    if not _ALL_VERDICTS_RUN:
        pytester.makepyfile(test_checks=ALL_VERDICTS)
        report_dir = pytester.path / "out"
        result = pytester.runpytest("-v", f"--preflight-report-dir={report_dir}", "-p", "no:cacheprovider")
        _ALL_VERDICTS_RUN.append((result, report_dir))
    return _ALL_VERDICTS_RUN[0]


def test_every_verdict_lands_in_the_report_with_its_code(run_all: tuple[pytest.RunResult, Path]) -> None:
    result, report_dir = run_all
    report = json.loads((report_dir / "preflight.json").read_text())
    validate_report(report)
    got = {c["name"]: (c["status"], c["code"]) for c in report["checks"]}
    assert got == EXPECTED
    assert report["verdict"] == "NOT READY"
    assert report["run"]["exit_code"] == 1
    assert report["summary"] == {"PASS": 2, "SKIP": 2, "WARN": 1, "ERROR": 3, "FAIL": 2}
    passing = next(c for c in report["checks"] if c["name"] == "test_pass")
    assert passing["title"] == "A passing check"
    assert passing["metrics"] == [{"name": "busbw_peak", "value": 231.5, "unit": "GB/s", "labels": {"run": "default"}}]
    skipped = next(c for c in report["checks"] if c["name"] == "test_pytest_skip")
    assert skipped["summary"] == "not applicable here"


def test_pytest_outcomes_follow_the_verdicts(run_all: tuple[pytest.RunResult, Path]) -> None:
    result, _ = run_all
    outcomes = result.parseoutcomes()
    assert outcomes == {"passed": 2, "failed": 2, "skipped": 2, "errors": 3, "warned": 1}


def test_terminal_shows_warn_as_its_own_word_and_ends_with_the_verdict(run_all: tuple[pytest.RunResult, Path]) -> None:
    result, _ = run_all
    result.stdout.fnmatch_lines(["*test_warn WARN*", "*test_fail FAIL*", "*preflight: problems*",
                                 "*BROKEN_THING*", "*fix: replace gpu3*", "preflight: NOT READY"])


def test_the_line_log_has_one_record_per_check(run_all: tuple[pytest.RunResult, Path]) -> None:
    _, report_dir = run_all
    lines = [json.loads(line) for line in (report_dir / "preflight.jsonl").read_text().splitlines()]
    assert [line["type"] for line in lines].count("check") == len(EXPECTED)
    finish = lines[-1]
    assert finish["type"] == "finish" and finish["verdict"] == "NOT READY" and finish["interrupted"] is False
    assert 0 <= finish["report_write_s"] < 60


def test_html_is_self_contained_and_lists_problems_first(run_all: tuple[pytest.RunResult, Path]) -> None:
    _, report_dir = run_all
    html = (report_dir / "preflight.html").read_text()
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;', html)
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert html.index("BROKEN_THING") < html.index("All checks")
    assert "make it fast" in html


def test_a_warning_only_run_is_degraded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_checks='''
from preflight.outcome import warn, passed
def test_a(record):
    record(passed("fine"))
def test_b(record):
    record(warn("SLOW_THING", "slow", "speed it up"))
''')
    result = pytester.runpytest(f"--preflight-report-dir={pytester.path / 'out'}")
    assert result.ret == 0
    report = json.loads((pytester.path / "out" / "preflight.json").read_text())
    assert report["verdict"] == "DEGRADED" and report["run"]["exit_code"] == 0
    strict = pytester.runpytest(f"--preflight-report-dir={pytester.path / 'out2'}", "--preflight-strict")
    assert json.loads((pytester.path / "out2" / "preflight.json").read_text())["run"]["exit_code"] == 1
    assert strict.ret == 0


def test_without_a_report_dir_the_plugin_stays_out_of_ordinary_test_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain='''
import pytest
def test_ok():
    assert True is not False
@pytest.mark.xfail(strict=True)
def test_expected_failure():
    assert 0
''')
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1, xfailed=1)
    assert not (pytester.path / "reports").exists()


def test_bad_option_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--preflight-nproc=zero")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--preflight-nproc*expected a whole number*"])


def test_slow_checks_are_opt_in(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow='''
import pytest
@pytest.mark.slow
def test_jit(record):
    pass
''')
    out = pytester.path / "out"
    pytester.runpytest(f"--preflight-report-dir={out}").assert_outcomes(skipped=1)
    pytester.runpytest(f"--preflight-report-dir={out}", "--preflight-slow").assert_outcomes(passed=1)
