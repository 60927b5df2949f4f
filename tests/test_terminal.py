"""preflight's own terminal output, the recorded selection and what a partial or interrupted run says.

The formatting functions are tested directly; two runs of the real command (a fast one without
launches, one DDP launch on gloo) check the output's shape at 80 columns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import RankProgress, launch_status
from preflight.outcome import fail, skip, warn
from preflight.report.html import render_html
from preflight.report.live import live_text, phase_line
from preflight.report.model import headline
from preflight.report.oneline import format_oneline
from preflight.report.selection import Selection
from preflight.report.terminal import (
    check_line,
    check_title,
    skip_lines,
    title_column,
    verdict_block,
)
from preflight.report.validate import first_problem
from preflight.workers.common import STARTUP
from tests.conftest import REPO_ROOT, validate_report
from tests.fleet_reports import ddp_check, make_report, slow_p2p

RULE = "=" * 80


def partial(report: dict, selected: int, collected: int, keyword: str | None = "ddp") -> dict:
    """``report`` as a run that selected ``selected`` of ``collected`` checks with ``-k keyword``."""
    selection = Selection(keyword=keyword, collected=collected, deselected=collected - selected)
    report["run"]["selection"] = selection.as_dict()
    return report


# -- the selection in the report --------------------------------------------------------------------


def test_the_selection_is_in_the_run_section_and_the_schemas_describe_it():
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    validate_report(report)
    assert first_problem(report) is None
    assert report["run"]["selection"] == {"keyword": "ddp", "markexpr": None, "profile": "full", "strategy": None,
                                          "slow": False, "collected": 45, "selected": 1, "deselected": 44,
                                          "partial": True}


def test_the_strict_reader_refuses_a_selection_it_does_not_know():
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    report["run"]["selection"]["picked_by"] = "someone"
    assert first_problem(report) == "run.selection.picked_by is not allowed"
    del report["run"]["selection"]["picked_by"], report["run"]["selection"]["selected"]
    assert first_problem(report) == "run.selection has no 'selected'"


def test_a_partial_run_says_how_much_it_covered_everywhere():
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    assert headline(report) == "READY: 1 of 45 checks selected"
    assert format_oneline(report) == "READY: 1 of 45 checks selected"
    assert "<h1>READY: 1 of 45 checks selected</h1>" in render_html(report)
    block = verdict_block(report, written=[], width=80)
    assert block[-1] == "READY: 1 of 45 checks selected (-k ddp)"


def test_a_whole_run_reads_as_before():
    report = partial(make_report("n1", [ddp_check()]), 45, 45, keyword=None)
    assert headline(report) == format_oneline(report) == "READY"
    assert "<h1>READY</h1>" in render_html(report)


def test_a_partial_run_with_a_problem_keeps_the_code_first():
    report = partial(make_report("n1", [ddp_check(), slow_p2p()]), 2, 45)
    assert format_oneline(report).startswith("DEGRADED: NCCL_P2P_SLOW (2 of 45 checks selected) - P2P")


def test_an_interrupted_run_names_the_interruption_not_a_warning_and_counts_what_did_not_run():
    report = make_report("n1", [ddp_check(), slow_p2p()], interrupted="interrupted by the user (Ctrl-C)")
    report["not_run"] = [f"test_x.py::test_{n}" for n in range(12)]
    line = format_oneline(report)
    assert line == "NOT READY: RUN_INTERRUPTED (+1 more) - 12 checks did not run (interrupted by..."
    assert "NCCL_P2P_SLOW" not in line and len(line) <= 80
    block = verdict_block(report, written=[], width=80)
    assert "not run: 12 checks (interrupted by the user (Ctrl-C))" in block and block[-1] == "NOT READY"


# -- formatting ---------------------------------------------------------------------------------------


def test_titles_are_the_docstring_without_its_aside_and_keep_the_parameter():
    assert check_title("There is an NVIDIA GPU for the job (or a CPU rehearsal)\n\nmore", "test_gpu") == \
        "There is an NVIDIA GPU for the job"
    assert check_title("ECC counters are clean.", "test_gpu_ecc[gpu3]") == "ECC counters are clean [gpu3]"
    assert check_title(None, "test_gpu_ecc") == "gpu ecc"


@pytest.mark.parametrize("width", [40, 80, 132])
def test_a_check_line_fits_the_width_and_keeps_the_status_word_first(width):
    titles = ["A job started from this shell survives a dropped SSH connection", "Short"]
    column = title_column(titles, width)
    line = check_line("PASS", titles[0], "a job started from this shell survives " * 4, title_width=column,
                      width=width)
    assert len(line) <= width and line.startswith("PASS  A job") and line.endswith("...")
    assert check_line("SKIP", "Short", "", title_width=column, width=width) == "SKIP  Short"
    zero1 = check_line("SKIP", "A few training steps and a checkpoint round trip [zero1]", "not selected",
                       title_width=30, width=width)
    assert "... [zero1]" in zero1 and len(zero1) <= width  # the parameter survives a cut


def test_identical_skips_become_one_line_with_a_count():
    groups = {"no NVIDIA GPU visible: libnvidia-ml.so.1 not found": [f"check {n}" for n in range(30)],
              "no DeepSpeed config given": ["The DeepSpeed config's batch arithmetic holds"]}
    lines = skip_lines(groups, title_width=30, width=80)
    assert lines[0] == "SKIP  30 checks: no NVIDIA GPU visible: libnvidia-ml.so.1 not found"
    assert lines[1].startswith("SKIP  The DeepSpeed config's...") and "no DeepSpeed config given" in lines[1]


def test_the_verdict_block_lists_each_problem_with_its_fix_and_ends_with_the_verdict_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # report paths inside the working directory are shown relative to it
    long_fix = "Stop them (`kill 1784`, then `kill -9` after a minute) and check nvidia-smi " * 3
    report = make_report("n1", [ddp_check(), ("leftover", warn("LEFTOVER_TRAINING_PROCESSES", "1 process left",
                                                              long_fix)),
                                ("ddp_hang", fail("DDP_RANK_HUNG", "rank 3 hung", "Re-run with NCCL_DEBUG=INFO")),
                                ("ecc", skip("no GPU"))])
    block = verdict_block(report, written=[tmp_path / "preflight.json"], width=80)
    assert block[0] == RULE and block[-1] == "NOT READY"
    assert all(len(line) <= 80 for line in block)
    text = "\n".join(block)
    assert text.index("FAIL  DDP_RANK_HUNG") < text.index("WARN  LEFTOVER_TRAINING_PROCESSES")
    assert "      fix: Re-run with NCCL_DEBUG=INFO" in block
    assert "checks: 1 PASS, 1 SKIP, 1 WARN, 1 FAIL" in block and "reports: preflight.json" in block
    assert sum("NOT READY" in line for line in block) == 1
    quiet = verdict_block(report, written=[], width=80, quiet=True)
    assert not any(line.strip().startswith("fix:") for line in quiet)


def _plan() -> LaunchPlan:
    return LaunchPlan("rehearsal", (Phase("ddp", "preflight.workers.ddp:run", budget_s=60.0),
                                    Phase("p2p", "preflight.workers.p2p:run", budget_s=30.0)), nproc=2)


def _mark(phase: str, label: str, started: float, completed: tuple[str, ...] = ()) -> RankProgress:
    return RankProgress(phase, label, 3, started + 1, started, completed, False)


def test_the_live_line_shows_the_slowest_ranks_phase_its_progress_and_the_clocks():
    now = 1000.0
    marks = [_mark("p2p", "sweep", now - 2, ("ddp",)), _mark("ddp", "forward, backward and step", now - 5)]
    status = launch_status(_plan(), marks, now, now - 20, deadline_s=280.0)
    assert (status.phase, status.ranks_done, status.nproc) == ("ddp", 1, 2)
    text = live_text(status, 80)
    assert text == "  > rehearsal ddp: 1/2 ranks done, 5/60 s, launch 20/280 s  forward, backwar..."
    assert len(text) < 80 and live_text(status, 120).endswith("  forward, backward and step")
    assert phase_line(status, 80) == "  > rehearsal: ddp (2 ranks, budget 60 s) at 20 s"


def test_before_any_rank_reports_the_launch_is_starting_up():
    status = launch_status(_plan(), [None, None], 1003.0, 1000.0, deadline_s=280.0)
    assert status.phase == STARTUP and status.ranks_done == 0 and status.phase_elapsed_s == 3.0
    assert live_text(status, 80).startswith("  > rehearsal start-up: 0/2 ranks done, 3/60 s"[:30])


# -- the real command ---------------------------------------------------------------------------------


def run_preflight(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "preflight", "--cpu", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def assert_shape(result: subprocess.CompletedProcess[str], report: dict) -> list[str]:
    """The output's shape: within 80 columns, no pytest artefacts, one verdict block ending in the verdict."""
    lines = result.stdout.rstrip("\n").splitlines()
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert not any("::" in line or "site-packages" in line or " passed in " in line for line in lines), lines
    assert lines.count(RULE) == 1 and lines[-1].startswith(report["verdict"])
    after = lines[lines.index(RULE):]
    assert sum(report["verdict"] in line for line in lines) == 1
    assert any(line.startswith("checks: ") for line in after) and "reports: reports/preflight.json" in after
    return lines


@pytest.mark.subprocess
def test_a_run_without_launches_prints_titles_grouped_skips_and_one_verdict(tmp_path):
    result = run_preflight(tmp_path, "-m", "not distributed")
    report = json.loads((tmp_path / "reports" / "preflight.json").read_text())
    lines = assert_shape(result, report)
    selection = report["run"]["selection"]
    assert selection["markexpr"] == "not distributed" and selection["partial"]
    assert lines[-1].startswith(f"{report['verdict']} (CPU rehearsal): {selection['selected']} of "
                                f"{selection['collected']} checks selected (-m 'not distributed')")
    grouped = [line for line in lines if line.startswith("SKIP  ") and " checks: no NVIDIA GPU visible" in line]
    assert len(grouped) == 1  # every per-GPU check skips for the same reason on this machine
    skipped = sum(1 for c in report["checks"] if c["status"] == "SKIP")
    assert sum(1 for line in lines if line.startswith("SKIP  ")) < skipped
    assert any(line.startswith("PASS  /dev/shm is large enough") for line in lines)


@pytest.mark.subprocess
def test_a_launch_shows_its_phases_then_the_check_and_the_verdict(tmp_path):
    result = run_preflight(tmp_path, "-k", "test_ddp_step")
    report = json.loads((tmp_path / "reports" / "preflight.json").read_text())
    lines = assert_shape(result, report)
    phases = [line for line in lines if line.startswith("  > rehearsal: ")]
    assert phases and phases[-1].startswith("  > rehearsal: ddp (2 ranks, budget")  # not a TTY: one line a phase
    assert len(phases) == len(set(line.split(" at ")[0] for line in phases))
    assert any(line.startswith("PASS  One DDP step on every rank") for line in lines)
    assert lines[-1] == (f"READY (CPU rehearsal): 1 of {report['run']['selection']['collected']} checks selected "
                         "(-k test_ddp_step)")


@pytest.mark.subprocess
def test_verbose_keeps_pytests_reporter_and_says_the_verdict_once(tmp_path):
    result = run_preflight(tmp_path, "-v", "-k", "test_shared_memory")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::test_shared_memory" in result.stdout and " passed" in result.stdout
    assert sum("READY (CPU rehearsal)" in line for line in result.stdout.splitlines()) == 1
