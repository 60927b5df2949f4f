"""The strategy checks end to end: pytest with the plugin in a child process, and ``preflight
--strategy all`` itself. DDP and FSDP2 run for real on gloo CPU ranks; ZeRO SKIPs here (no
DeepSpeed, no GPU), or runs against the DeepSpeed stand-in when a test plugin says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from preflight.locations import checks_dir
from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.subprocess

CHECKS = [str(REPO_ROOT / "checks" / "test_ddp_step.py"), str(REPO_ROOT / "checks" / "test_strategies.py")]
DEEPSPEED_STUB = REPO_ROOT / "tests" / "fakes" / "deepspeed_stub"


def _numpy_usable() -> bool:
    try:
        torch.zeros(1).numpy()
    except RuntimeError:
        return False
    return True


def run_checks(tmp_path: Path, *options: str, plugins: tuple[str, ...] = (), env: dict[str, str] | None = None,
               stub: bool = False) -> dict[str, Any]:
    """Run the DDP and strategy checks under pytest with the plugin; return the JSON report."""
    paths = [str(REPO_ROOT), str(DEEPSPEED_STUB) if stub else None, os.environ.get("PYTHONPATH")]
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    out = tmp_path / "reports"
    loads = [arg for plugin in plugins for arg in ("-p", plugin)]
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *loads, *CHECKS, "-rs",
                             f"--preflight-report-dir={out}", *options], capture_output=True, text=True,
                            env=full_env, cwd=tmp_path, timeout=400)
    assert (out / "preflight.json").exists(), result.stdout + result.stderr
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def test_all_strategies_run_ddp_and_fsdp_for_real_and_skip_zero_with_the_reason(tmp_path):
    checks = by_name(run_checks(tmp_path, "--preflight-strategy=all"))
    assert checks["test_ddp_step"]["status"] == "PASS"
    fsdp = checks["test_strategy_step[fsdp]"]
    if _numpy_usable():
        assert fsdp["status"] == "PASS" and "loaded back exactly" in fsdp["summary"], fsdp["summary"]
    else:
        assert (fsdp["status"], fsdp["code"]) == ("WARN", "FSDP_CHECKPOINT_NEEDS_NUMPY"), fsdp["summary"]
    metrics = {(m["name"], m["labels"].get("rank")) for m in fsdp["metrics"]}
    assert {("step_time", "0"), ("step_time", "1"), ("peak_memory", "0"), ("peak_memory", "1")} <= metrics
    for stage in ("zero1", "zero2", "zero3"):
        zero = checks[f"test_strategy_step[{stage}]"]
        assert zero["status"] == "SKIP" and "not rehearsed" in zero["summary"], zero["summary"]
        assert "DeepSpeed" in zero["summary"]


def test_only_the_selected_strategy_runs(tmp_path):
    report = run_checks(tmp_path, "--preflight-strategy=fsdp", "-k", "zero1")
    zero1 = by_name(report)["test_strategy_step[zero1]"]
    assert zero1["status"] == "SKIP" and zero1["summary"].startswith("strategy zero1 not selected (--strategy")
    assert report["node"]["strategies"] == {"selected": ["fsdp"], "explicit": True, "deepspeed": None}


def test_a_diverging_rank_makes_the_node_not_ready_and_is_named(tmp_path):
    report = run_checks(tmp_path, "--preflight-strategy=fsdp", "-k", "fsdp", plugins=("tests.fakes.faulty_strategies",),
                        env={"PREFLIGHT_TEST_FAULT": "diverge:1"})
    fsdp = by_name(report)["test_strategy_step[fsdp]"]
    assert (fsdp["status"], fsdp["code"]) == ("FAIL", "FSDP_RANKS_DIVERGED")
    assert "rank 1" in fsdp["summary"] and report["verdict"] == "NOT READY"


@pytest.mark.skip(reason="the DeepSpeed stand-in cannot unblock ZeRO on CPU ranks through the phase hooks; real "
                  "DeepSpeed 0.19.8 on CPU replaces it (issue 14.7, branch deepspeed)")
def test_zero_runs_end_to_end_against_the_deepspeed_stand_in(tmp_path):
    report = run_checks(tmp_path, "--preflight-strategy=zero2", "-k", "zero2", plugins=("tests.fakes.fake_deepspeed",),
                        stub=True)
    zero = by_name(report)["test_strategy_step[zero2]"]
    assert zero["status"] == "PASS" and "ZeRO-2" in zero["summary"], zero["summary"]
    assert report["node"]["strategies"]["deepspeed"] == "0.0.0+preflight.fake"  # found by metadata, not import


def test_preflight_strategy_all_on_the_command_line(tmp_path):
    """``preflight --strategy all``: only when the installed checks are this checkout's."""
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"the installed preflight.checks is another checkout ({checks_dir()})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "preflight", "--strategy", "all", "-k", "ddp or strategy",
                             "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = by_name(json.loads((tmp_path / "r" / "preflight.json").read_text()))
    assert {name: c["status"] for name, c in checks.items() if "zero" in name} == {
        f"test_strategy_step[zero{n}]": "SKIP" for n in (1, 2, 3)}
    assert checks["test_ddp_step"]["status"] == "PASS"
    assert checks["test_strategy_step[fsdp]"]["status"] in ("PASS", "WARN")


def test_an_unknown_strategy_is_a_usage_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "preflight", "--strategy", "zero4"], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("preflight: error: argument --strategy: unknown strategy 'zero4'; expected ddp, "
                                     "fsdp, zero1, zero2, zero3, all")
