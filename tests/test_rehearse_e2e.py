"""``preflight rehearse`` for real on CPU: torchrun, gloo ranks, the user's scripts in
tests/data/rehearse/, one verdict per failure kind, the reports, and nothing left running."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from preflight.report.ownership import LOGS
from tests.conftest import REPO_ROOT, TEST_DATA, validate_report

pytestmark = pytest.mark.subprocess
SCRIPTS = TEST_DATA / "rehearse"
SEED = str(SCRIPTS / "ddp_seed.py")
SHORT = ("--warmup", "1", "--steps", "4", "--no-sweep")
LEFTOVER_WAIT_S = 10.0


def rehearse(cwd: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``preflight rehearse ARGS`` in ``cwd``; its result and the JSON report (None when absent)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    result = subprocess.run([sys.executable, "-m", "preflight", "rehearse", *args], capture_output=True, text=True,
                            cwd=cwd, env=full_env, timeout=timeout)
    path = cwd / "reports" / "preflight.json"
    report = json.loads(path.read_text()) if path.exists() else None
    if report is not None:
        validate_report(report)
    return result, report


def size(report: dict[str, Any], ranks: int) -> dict[str, Any]:
    return next(s for s in report["rehearsal"]["sizes"] if s["ranks"] == ranks)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def _ours(proc: psutil.Process, cwd: Path, pids: set[int]) -> bool:
    try:
        if proc.pid in pids:
            return True
        return str(cwd) in " ".join(proc.cmdline()) or proc.cwd().startswith(str(cwd))
    except (psutil.Error, OSError):
        return False


def assert_nothing_left(cwd: Path) -> None:
    """No torchrun, rank or child of a rank that ran in ``cwd`` is still alive."""
    pids = {int(json.loads(p.read_text())["pid"]) for p in cwd.glob(f"reports/{LOGS}/*/rank*.pid")}
    until = time.monotonic() + LEFTOVER_WAIT_S
    while True:
        alive = [p for p in psutil.process_iter() if p.pid != os.getpid() and _ours(p, cwd, pids)]
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > until:
            break
        time.sleep(0.2)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


def fake_report(tmp_path: Path, busbw: float = 2.5) -> str:
    """A preflight report whose bandwidth check measured ``busbw`` (what --from-report reads)."""
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"checks": [{"id": "test_nccl_bandwidth.py::test_allreduce_bandwidth",
                                            "metrics": [{"name": "busbw_peak", "value": busbw, "unit": "GB/s"}]}]}))
    return str(path)


def test_a_seed_style_ddp_script_on_one_and_two_gloo_ranks(tmp_path):
    result, report = rehearse(tmp_path, "--warmup", "2", "--steps", "6", "--price-per-hour", "98", "--",
                              SEED, "--checkpoint", "ckpt.pt")
    assert report is not None, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] in ("READY", "DEGRADED")  # DEGRADED when two gloo ranks share two busy cores
    section = report["rehearsal"]
    assert [s["ranks"] for s in section["sizes"]] == [1, 2]
    assert size(report, 1)["status"] == size(report, 2)["status"] == "PASS"
    assert size(report, 1)["steps_reached"] == [8] and size(report, 2)["steps_reached"] == [8, 8]
    assert size(report, 2)["measured_steps"] == 6 and size(report, 2)["memory_kind"] == "RSS"
    assert size(report, 1)["scaling"] == 1.0 and size(report, 2)["scaling"] > 0
    comm = section["communication"]
    assert comm["strategy"] == "ddp" and comm["params"] == 32 * 64 + 64 + 64 + 1
    assert "all-reduce sweep on 2 gloo ranks" in comm["busbw_source"]
    assert size(report, 2)["comm_per_step_s"] > 0 and size(report, 2)["cost_per_1k_steps_usd"] > 0
    out = result.stdout
    assert "Rehearsal of " in out and "ranks  first step" in out and "* batches/s = per-rank batch" in out
    assert out.strip().splitlines()[-1].startswith(report["verdict"])
    html = (tmp_path / "reports" / "preflight.html").read_text()
    assert "<svg" in html and "<script" not in html and "Throughput by rank count" in html
    junit = (tmp_path / "reports" / "preflight-junit.xml").read_text()
    assert "test_rehearsal_size" in junit and "test_rehearsal_scaling" in junit
    assert (tmp_path / "ckpt.pt").exists()  # the script ran in the working directory, with its arguments
    logs = tmp_path / "reports" / LOGS
    assert (logs / "rehearse-2ranks" / "rank0.log").exists() and (logs / "rehearse-2ranks" / "rank1.log").exists()
    assert_nothing_left(tmp_path)


def test_a_crash_at_step_3_on_rank_1_names_rank_1_and_its_error(tmp_path):
    result, report = rehearse(tmp_path, "--nproc", "2", *SHORT, "--", SEED, "--crash-at-step", "3", "--fault-rank", "1")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    assert report["verdict"] == "NOT READY"
    crash = check(report, "test_rehearsal_size[ranks2]")
    assert crash["code"] == "REHEARSAL_CRASHED"
    assert "rank 1 crashed (RuntimeError: injected failure in the training loop at step 3)" in crash["summary"]
    assert "after step 3" in crash["summary"]
    assert "injected failure" in crash["evidence"]["rank 1 traceback (tail)"]
    assert check(report, "test_rehearsal_scaling")["status"] == "SKIP"
    assert "2 ranks FAIL REHEARSAL_CRASHED" in result.stdout
    assert_nothing_left(tmp_path)


def test_a_hang_at_step_2_on_rank_0_names_rank_0_and_where_it_stopped(tmp_path):
    result, report = rehearse(tmp_path, "--nproc", "2", *SHORT, "--stall-timeout", "8", "--timeout", "150", "--",
                              SEED, "--hang-at-step", "2", "--fault-rank", "0")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    hang = check(report, "test_rehearsal_size[ranks2]")
    assert hang["code"] == "REHEARSAL_HUNG", hang["summary"]
    assert hang["summary"].startswith("2 ranks hung after step 2: rank 0 stopped in ddp_seed.py:")
    assert "time.sleep(3600)" in hang["summary"]
    # rank 1 is either still waiting, or already raised from gloo when the watchdog ended rank 0
    assert "rank 1 waits in backward" in hang["summary"] or "rank 1 lost its peer" in hang["summary"], hang["summary"]
    assert hang["details"]["ranks_behind"] == [0]
    assert_nothing_left(tmp_path)


def test_a_script_that_never_steps_is_named_at_the_deadline(tmp_path):
    result, report = rehearse(tmp_path, "--nproc", "1", *SHORT, "--timeout", "40", "--",
                              SEED, "--no-step", "--epochs", "100000000")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    verdict = check(report, "test_rehearsal_size[ranks1]")
    assert verdict["code"] == "REHEARSAL_NO_STEP" and "no optimizer step in 40 s" in verdict["summary"]
    assert "ddp_seed.py" in verdict["summary"]  # where it was at the deadline
    assert_nothing_left(tmp_path)


def test_a_script_that_ends_early_is_measured_on_what_it_ran(tmp_path):
    result, report = rehearse(tmp_path, "--nproc", "1", "--warmup", "1", "--steps", "8", "--no-sweep", "--",
                              SEED, "--max-steps", "5")
    assert report is not None and result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] == "DEGRADED"
    early = check(report, "test_rehearsal_size[ranks1]")
    assert early["code"] == "REHEARSAL_ENDED_EARLY" and "ended after 5 of 9 steps" in early["summary"]
    assert size(report, 1)["steps_reached"] == [5] and size(report, 1)["steps_per_s"] > 0
    assert_nothing_left(tmp_path)


def test_an_allocation_failure_is_called_an_oom(tmp_path):
    result, report = rehearse(tmp_path, "--nproc", "1", *SHORT, "--", SEED, "--oom-at-step", "2")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    oom = check(report, "test_rehearsal_size[ranks1]")
    assert oom["code"] == "REHEARSAL_OOM" and "ran out of memory" in oom["summary"]
    assert "can't allocate memory" in oom["summary"] and "after step 2" in oom["summary"]
    assert_nothing_left(tmp_path)


def test_an_fsdp2_script_on_one_and_two_ranks(tmp_path):
    result, report = rehearse(tmp_path, *SHORT, "--from-report", fake_report(tmp_path), "--",
                              str(SCRIPTS / "fsdp2_train.py"))
    assert report is not None and result.returncode == 0, result.stdout + result.stderr
    assert size(report, 1)["status"] == size(report, 2)["status"] == "PASS"
    assert size(report, 2)["steps_reached"] == [5, 5]
    comm = report["rehearsal"]["communication"]
    assert comm["strategy"] == "fsdp"  # DTensor parameters seen by the optimizer
    assert comm["params"] == 2 * (32 * 32 + 32) + 32 + 1 and comm["busbw_gbps"] == 2.5
    assert_nothing_left(tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_a_zero2_script_with_deepspeed_counts_one_step_per_iteration(tmp_path):
    # On CPU, deepspeed.init_distributed JIT-builds its shared-memory comm op (minutes the first
    # time); a cache of our own keeps later runs fast.
    default = Path.home() / ".cache" / "preflight-tests" / "torch_extensions"
    cache = os.environ.get("TORCH_EXTENSIONS_DIR") or str(default)
    result, report = rehearse(tmp_path, *SHORT, "--timeout", "900", "--from-report", fake_report(tmp_path), "--",
                              str(SCRIPTS / "zero2_train.py"), env={"TORCH_EXTENSIONS_DIR": cache}, timeout=2100)
    assert report is not None and result.returncode == 0, result.stdout + result.stderr
    assert size(report, 1)["status"] == size(report, 2)["status"] == "PASS"
    assert size(report, 1)["steps_reached"] == [5] and size(report, 2)["steps_reached"] == [5, 5]
    comm = report["rehearsal"]["communication"]
    assert comm["strategy"] == "zero2"
    assert 2177 <= comm["params"] <= 2177 + 8  # ZeRO's flat partitions, padded for alignment
    assert_nothing_left(tmp_path)


def test_sigkill_of_preflight_leaves_no_rank_behind(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "rehearse", "--nproc", "2", *SHORT, "--timeout", "300",
                             "--", SEED, "--no-step", "--epochs", "100000000"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "reports" / LOGS / "rehearse-2ranks"
    until = time.monotonic() + 180
    while not all((run_dir / f"rank{r}.rehearsal.json").exists() for r in (0, 1)):
        assert proc.poll() is None and time.monotonic() < until, "the ranks never started"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert_nothing_left(tmp_path)
    record = json.loads((run_dir / "rank0.rehearsal.json").read_text())
    assert record["ended"] == "parent_gone"
