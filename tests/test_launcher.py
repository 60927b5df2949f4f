"""The launcher on real torchrun with gloo ranks: a clean run, a crash, a signal death, a hang."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from preflight.judge.ddp import judge_ddp_step
from preflight.outcome import Status

from tests.conftest import REPO_ROOT
from tests.launching import launch_phase

pytestmark = pytest.mark.subprocess


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks must import tests.workers.faulty."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))




def test_two_gloo_ranks_finish_a_ddp_step_with_identical_parameters(tmp_path):
    result = launch_phase("preflight.workers.ddp:run", nproc=2, run_dir=tmp_path)
    assert result.ok, result.describe() + result.launcher_tail
    digests = {r.result["result"]["param_sha256"] for r in result.ranks}
    assert len(digests) == 1
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.PASS
    assert (tmp_path / "rank0.log").exists() and (tmp_path / "rank1.log").exists()
    assert (tmp_path / "rank0.log").stat().st_mode & 0o077 == 0  # logs are as private as the reports


def test_a_crashing_rank_is_named_with_its_error(tmp_path):
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["crash", "1"], run_dir=tmp_path)
    assert not result.ok and not result.timed_out
    assert result.root_cause() == 1
    assert "injected crash on rank 1" in result.describe()
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.FAIL and verdict.code == "DDP_RANK_CRASHED"
    assert "rank 1" in verdict.summary
    assert any("injected crash" in text for text in verdict.evidence.values())


def test_a_rank_killed_by_a_signal_is_named_with_the_signal(tmp_path):
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["sigkill", "0"], run_dir=tmp_path)
    assert result.root_cause() == 0
    assert "SIGKILL" in result.describe()
    assert result.ranks[1].state in ("stopped", "crashed")


def test_a_hung_rank_ends_at_the_deadline_and_leaves_no_process(tmp_path):
    started = time.monotonic()
    # The phase's budget counts from the last rank's entry into it, so torch's import (10 s on a loaded
    # 2-core machine) is not part of it; the launch's deadline is only the backstop.
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["hang", "1"], run_dir=tmp_path, budget_s=15)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert elapsed < 60 + 15 + 12, f"launch outlived its budget: {elapsed:.1f} s"
    assert result.ranks_in("hung") == [0, 1]
    assert result.stuck_ranks() == [1]
    assert "rank 1 got the least far" in result.describe()
    pids = [json.loads(p.read_text())["pid"] for p in tmp_path.glob("rank*.pid")]
    assert pids and not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.FAIL and verdict.code == "DDP_RANK_HUNG"
    assert "rank 1" in verdict.summary
