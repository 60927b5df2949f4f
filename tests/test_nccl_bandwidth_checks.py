"""The bandwidth checks end to end: real torchrun launches on gloo, with a worker that misbehaves
only when P2P is enabled (``tests.workers.p2p_faulty``) standing in for a host with broken P2P."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e

CHECKS = str(REPO_ROOT / "checks" / "test_nccl_bandwidth.py")
HANG_BUDGET_S = 10  # a phase's budget counts from the last rank's entry: a slow start on a loaded machine is not in it


def run_checks(tmp_path: Path, *args: str, env: dict[str, str] | None = None, fake: bool = True) -> dict[str, Any]:
    """Run the bandwidth checks in a child pytest and return the report's checks by name."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "PREFLIGHT_TEST_"))}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    plugin = ["-p", "tests.fakes.fake_p2p"] if fake else ["--preflight-cpu"]  # the real gloo sweep: a CPU rehearsal
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", CHECKS, *plugin,
               "--preflight-report-dir", str(tmp_path), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=full_env, cwd=REPO_ROOT, timeout=240)
    report_path = tmp_path / "preflight.json"
    assert report_path.exists(), result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    validate_report(report)
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, float]:
    """One real gloo sweep (a CPU rehearsal; the full profile, whose largest sizes are large enough to judge)
    against an expected 1000 GB/s: the measurement, its views and the expectation's verdict come from the same
    run. Its checks, report directory and wall seconds."""
    out = tmp_path_factory.mktemp("gloo")
    started = time.monotonic()
    checks = run_checks(out, "--preflight-expect-busbw", "1000", fake=False)
    return checks, out, time.monotonic() - started


def test_cpu_node_measures_gloo_and_skips_the_p2p_comparison(gloo_run: tuple[dict[str, Any], Path, float]) -> None:
    checks, out, elapsed = gloo_run
    bandwidth = checks["test_allreduce_bandwidth"]
    assert "(gloo)" in bandwidth["summary"], bandwidth
    assert any(m["name"] == "busbw_peak" and m["value"] > 0 for m in bandwidth["metrics"])
    assert {v["kind"] for v in bandwidth["views"]} == {"chart", "table"}
    p2p = checks["test_nccl_p2p"]
    assert p2p["status"] == "SKIP" and "no NVIDIA GPU visible" in p2p["summary"]
    html = (out / "preflight.html").read_text()
    assert "<svg" in html and "<polyline" in html and "<script" not in html
    assert elapsed < 90


def test_expected_figure_far_above_the_measurement_fails(gloo_run: tuple[dict[str, Any], Path, float]) -> None:
    bandwidth = gloo_run[0]["test_allreduce_bandwidth"]
    assert bandwidth["status"] == "FAIL" and bandwidth["code"] == "NCCL_BUSBW_LOW"
    assert "of the 1000 GB/s expected" in bandwidth["summary"]


def test_hang_only_with_p2p_is_p2p_broken(tmp_path: Path) -> None:
    started = time.monotonic()
    checks = run_checks(tmp_path, "--preflight-launch-timeout", str(HANG_BUDGET_S), env={"PREFLIGHT_TEST_P2P": "hang"})
    elapsed = time.monotonic() - started  # the hung run is called hung at the phase budget
    p2p = checks["test_nccl_p2p"]
    assert p2p["status"] == "FAIL" and p2p["code"] == "NCCL_P2P_BROKEN", p2p
    assert "hung (ranks" in p2p["summary"] and "NCCL_P2P_DISABLE=1 worked" in p2p["summary"]
    assert "iommu=pt" in p2p["remediation"] and "ACS" in p2p["remediation"]
    assert "rank 1" in json.dumps(p2p["evidence"])
    bandwidth = checks["test_allreduce_bandwidth"]
    assert "measured with NCCL_P2P_DISABLE=1" in bandwidth["summary"]
    assert elapsed < HANG_BUDGET_S + 90


def test_p2p_slower_than_shared_memory_warns(tmp_path: Path) -> None:
    checks = run_checks(tmp_path, env={"PREFLIGHT_TEST_P2P": "slow"})
    p2p = checks["test_nccl_p2p"]
    assert p2p["status"] == "WARN" and p2p["code"] == "NCCL_P2P_SLOWER_THAN_SHM", p2p
    assert "export NCCL_P2P_DISABLE=1" in p2p["remediation"]


def test_both_runs_failing_names_what_each_rank_logged(tmp_path: Path) -> None:
    checks = run_checks(tmp_path, env={"PREFLIGHT_TEST_P2P": "crash-always"})
    p2p = checks["test_nccl_p2p"]
    assert p2p["status"] == "FAIL" and p2p["code"] == "NCCL_ALLREDUCE_FAILED", p2p
    evidence = json.dumps(p2p["evidence"])
    assert "injected failure in every run" in evidence and "NCCL_P2P_DISABLE=1" in evidence


def test_inherited_p2p_disable_that_costs_speed_warns(tmp_path: Path) -> None:
    checks = run_checks(tmp_path, env={"PREFLIGHT_TEST_P2P": "slow-off", "NCCL_P2P_DISABLE": "1"})
    env_check = checks["test_nccl_environment"]
    assert env_check["status"] == "WARN" and env_check["code"] == "NCCL_ENV_COSTS_SPEED", env_check
    assert "NCCL_P2P_DISABLE=1" in env_check["summary"] and "costs" in env_check["summary"]
    assert checks["test_nccl_p2p"]["status"] == "PASS"


def test_expected_figure_comes_from_the_fake_machine(tmp_path: Path) -> None:
    checks = run_checks(tmp_path, "-p", "tests.fakes.nvml_plugin", "--fake-nvml=8x-h100-sxm", "-k", "bandwidth",
                        env={"CUDA_VISIBLE_DEVICES": "0,1"})
    bandwidth = checks["test_allreduce_bandwidth"]
    assert bandwidth["status"] == "PASS", bandwidth
    assert "too small to compare with the 365 GB/s reference" in bandwidth["summary"]
    assert "2x H100 SXM over NVSwitch" in json.dumps(bandwidth["evidence"])
