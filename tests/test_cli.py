"""The ``preflight`` command end to end, in a child process: exit codes, reports, bad input, a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from preflight.report.ownership import LOGS
from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e


def preflight(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``python -m preflight`` with the repo importable (so test-only plugins can load)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "preflight", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


@dataclass(frozen=True)
class HealthyRun:
    """The run of a healthy CPU node, started in a folder of its own without ``--report-dir``."""

    result: subprocess.CompletedProcess[str]
    cwd: Path
    elapsed_s: float


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory: pytest.TempPathFactory) -> HealthyRun:
    """One CPU rehearsal for the module: its launch serves every test of a healthy node's run."""
    cwd = tmp_path_factory.mktemp("healthy")
    started = time.monotonic()
    # DDP and FSDP2 only: with DeepSpeed installed (the test extras) the default adds ZeRO-1/2/3 and the
    # build of their ops, which tests/test_strategies_checks.py covers
    result = preflight("--cpu", "--strategy", "ddp,fsdp", cwd=cwd)
    return HealthyRun(result, cwd, time.monotonic() - started)


def test_a_healthy_cpu_node_is_ready_and_writes_every_report(healthy_run: HealthyRun) -> None:
    result, out = healthy_run.result, healthy_run.cwd / "reports"
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(("READY", "DEGRADED")) and "reports/preflight.json" in result.stdout
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    assert report["verdict"] in ("READY", "DEGRADED")
    ddp = next(c for c in report["checks"] if c["name"] == "test_ddp_step")
    assert ddp["status"] == "PASS" and "identical parameters" in ddp["summary"]
    assert (out / "preflight.html").read_text().startswith("<!DOCTYPE html>")
    assert (out / "preflight-junit.xml").exists()
    assert healthy_run.elapsed_s < 240  # the rehearsal (DDP, the all-reduce sweep, FSDP2) on 2 cores


def test_reports_default_to_reports_in_the_current_directory(healthy_run: HealthyRun) -> None:
    """The healthy run was given no --report-dir."""
    assert healthy_run.result.returncode == 0, healthy_run.result.stderr
    assert (healthy_run.cwd / "reports" / "preflight.json").exists()
    assert sorted(p.name for p in healthy_run.cwd.iterdir()) == ["reports"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "two"], "expected a whole number"),
        (["--expect-gpus", "-1"], "expected a number >= 1"),
        (["--timeout", "nan"], "finite number"),
        (["--profile", "fast"], "invalid choice"),
        (["--no-such-option"], "unrecognized arguments"),
        (["--report-dir", "/proc/preflight-cannot-write-here"], "cannot write reports"),
        (["-k", "no_check_has_this_name"], "no check matches"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = preflight(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight: error:") and message in lines[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_help_lists_every_option() -> None:
    result = preflight("--help")
    assert result.returncode == 0
    for flag in ("--report-dir", "--profile", "--nproc", "--expect-gpus", "--timeout", "--strict", "-k", "-m"):
        assert flag in result.stdout


def test_help_shows_the_sub_commands_first_then_the_options_in_groups() -> None:
    from preflight.cli import build_parser, subcommands

    text = build_parser().format_help()
    heads = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert heads == ["commands:", "options:", "run:", "the job's plan:", "reports:", "fleet:", "advanced:"]
    assert all(f"\n  {name} " in text for name in subcommands())
    order = ["commands:", "  rehearse ", "run:", "--cpu", "the job's plan:", "--model-params", "--ds-config",
             "reports:", "--report-dir", "--junitxml", "fleet:", "--oneline", "advanced:", "--nvml-timeout"]
    assert [text.index(part) for part in order] == sorted(text.index(part) for part in order)


@pytest.mark.parametrize(("argv", "hint"), [
    (["--nprocs", "3"], "unrecognized arguments: --nprocs 3; did you mean --nproc?"),
    (["--repor-dir=out"], "did you mean --report-dir?"),
    (["rehers", "--", "train.py"], "did you mean rehearse?"),
    (["--zzzzzz"], "unrecognized arguments: --zzzzzz"),
])
def test_an_unknown_option_or_command_gets_the_closest_one(capsys: pytest.CaptureFixture[str], argv: list[str], hint: str) -> None:
    from preflight.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(hint), err  # nothing close: no suggestion


def test_a_preflight_option_after_the_separator_is_refused_not_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    from preflight.cli import main

    assert main(["--", "-p", "no:cacheprovider", "--preflight-cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--preflight-cpu after -- is not read" in err and "give --cpu before --" in err, err


def test_a_hung_rank_makes_the_node_not_ready_at_the_deadline_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    started = time.monotonic()
    result = preflight("--cpu", "--report-dir", str(out), "--launch-timeout", "10", "-k", "ddp", "--", "-p",
                       "tests.fakes.faulty_ddp", env={"PREFLIGHT_TEST_FAULT": "hang:1"})
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("NOT READY")
    # the 10 s budget starts when both ranks are in the phase: start-up and the kill grace come on top,
    # and a loaded 2-core machine is slow to start
    assert elapsed < 10 + 60, f"preflight took {elapsed:.0f} s with a 10 s phase budget"
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    ddp = next(c for c in report["checks"] if c["name"] == "test_ddp_step")
    assert ddp["code"] == "DDP_RANK_HUNG" and "rank 1 got the least far" in ddp["summary"]
    rank_pids = [json.loads(p.read_text())["pid"] for p in (out / LOGS / "rehearsal").glob("rank*.pid")]
    assert len(rank_pids) == 2
    alive = [pid for pid in rank_pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"worker processes left running: {alive}"


def test_a_crashed_rank_is_named_in_the_terminal_summary(tmp_path: Path) -> None:
    result = preflight("--cpu", "--report-dir", str(tmp_path), "-k", "ddp", "--", "-p", "tests.fakes.faulty_ddp",
                       env={"PREFLIGHT_TEST_FAULT": "crash:1"})
    assert result.returncode == 1
    assert "DDP_RANK_CRASHED" in result.stdout and "rank 1 failed first" in result.stdout
