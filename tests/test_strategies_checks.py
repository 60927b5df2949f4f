"""The strategy checks end to end: pytest with the plugin in a child process, and ``preflight
--strategy all`` itself. DDP, FSDP2 and ZeRO-1/2/3 run for real on gloo CPU ranks (ZeRO with the
real DeepSpeed of the test extras, on its CPU accelerator, its ops built ahead of the launch in
preflight's own cache: the first test on a machine compiles them, the others load them).

Two runs answer the strategy tests: ``--strategy all`` under pytest with the plugin, and one
``preflight --strategy fsdp,zero2`` whose FSDP2 rank 1 diverges (a module fixture): what the command
line selects runs, what it does not is skipped, and the diverging rank is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from preflight.locations import checks_dir
from preflight.report.ownership import LOGS
from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e

CHECKS = [str(REPO_ROOT / "checks" / "test_ddp_step.py"), str(REPO_ROOT / "checks" / "test_strategies.py")]
BUILD_BUDGET = ["--preflight-op-build-timeout=1500", "--preflight-timeout=2400"]  # a cold build on a loaded machine


def _numpy_usable() -> bool:
    try:
        torch.zeros(1).numpy()
    except RuntimeError:
        return False
    return True


def run_checks(tmp_path: Path, *options: str) -> dict[str, Any]:
    """Run the DDP and strategy checks under pytest with the plugin; return the JSON report."""
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    out = tmp_path / "reports"
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *CHECKS, "-rs",
                             f"--preflight-report-dir={out}", "--preflight-cpu", *options], capture_output=True, text=True,
                            env=full_env, cwd=tmp_path, timeout=2500)
    assert (out / "preflight.json").exists(), result.stdout + result.stderr
    report: dict[str, Any] = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def _fsdp2_runs_here() -> bool:
    from preflight.judge.strategies import FSDP2_CPU_MIN_TORCH

    return torch.cuda.device_count() > 0 or tuple(int(p) for p in torch.__version__.split(".")[:2]) >= \
        FSDP2_CPU_MIN_TORCH


def test_all_strategies_run_for_real_zero_included(tmp_path: Path) -> None:
    report = run_checks(tmp_path, "--preflight-strategy=all", *BUILD_BUDGET)
    checks = by_name(report)
    assert checks["test_ddp_step"]["status"] == "PASS"
    fsdp = checks["test_strategy_step[fsdp]"]
    if not _fsdp2_runs_here():
        assert fsdp["status"] == "SKIP" and "cannot run FSDP2 on CPU ranks" in fsdp["summary"], fsdp["summary"]
    elif _numpy_usable():
        assert fsdp["status"] == "PASS" and "loaded back exactly" in fsdp["summary"], fsdp["summary"]
    else:
        assert (fsdp["status"], fsdp["code"]) == ("WARN", "FSDP_CHECKPOINT_NEEDS_NUMPY"), fsdp["summary"]
    ops = checks["test_deepspeed_ops"]
    assert ops["status"] == "PASS" and "fused_adam (CPU, c++)" in ops["summary"], ops["summary"]
    assert "deepspeed_shm_comm (CPU, c++)" in ops["summary"], ops["summary"]  # built, loaded or verified
    loads = json.loads((tmp_path / "reports" / LOGS / "rehearsal" / "rank0.deepspeed_ops.json").read_text())
    assert [op["from"] for op in loads["result"]["ops"]] == ["manifest", "manifest"], loads  # no ninja in a rank
    for stage in ("zero1", "zero2", "zero3"):
        zero = checks[f"test_strategy_step[{stage}]"]
        assert zero["status"] == "PASS", zero["summary"]
        assert "loaded back exactly" in zero["summary"] and "DeepSpeed's cpu accelerator" in zero["summary"]
        metrics = {(m["name"], m["labels"].get("rank")) for m in zero["metrics"]}
        assert {("step_time", "0"), ("step_time", "1"), ("checkpoint_save_time", None)} <= metrics
    assert report["node"]["strategies"]["deepspeed"] == "0.19.8"  # found by metadata, not import


@dataclass(frozen=True)
class SelectedRun:
    """``preflight --strategy fsdp,zero2`` with rank 1's FSDP2 parameters diverging: its exit and its report."""

    result: subprocess.CompletedProcess[str]
    report: dict[str, Any]

    def check(self, name: str) -> dict[str, Any]:
        return by_name(self.report)[name]


@pytest.fixture(scope="module")
def selected_run(tmp_path_factory: pytest.TempPathFactory) -> SelectedRun:
    """One ``preflight --cpu --strategy fsdp,zero2`` of the strategy checks, FSDP2's phase swapped for one whose
    rank 1 diverges (``-p tests.fakes.faulty_strategies`` after ``--``): one launch runs FSDP2, the op load and
    ZeRO-2. Only when the installed checks are this checkout's."""
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"the installed preflight.checks is another checkout ({checks_dir()})")
    tmp = tmp_path_factory.mktemp("selected")
    env = {**os.environ, "PREFLIGHT_TEST_FAULT": "diverge:1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--strategy", "fsdp,zero2", "-k",
                             "strateg or deepspeed_ops", "--op-build-timeout", "1500", "--timeout", "2400",
                             "--report-dir", str(tmp / "r"), "--", "-p", "tests.fakes.faulty_strategies"],
                            capture_output=True, text=True, env=env, cwd=tmp, timeout=2500)
    report_file = tmp / "r" / "preflight.json"
    assert report_file.exists(), result.stdout + result.stderr
    report: dict[str, Any] = json.loads(report_file.read_text())
    validate_report(report)
    return SelectedRun(result, report)


def test_only_the_selected_strategy_runs(selected_run: SelectedRun) -> None:
    zero1 = selected_run.check("test_strategy_step[zero1]")
    assert zero1["status"] == "SKIP" and zero1["summary"].startswith("strategy zero1 not selected (--strategy")
    import importlib.metadata

    assert selected_run.report["node"]["strategies"] == {"selected": ["fsdp", "zero2"], "explicit": True,
                                                         "deepspeed": importlib.metadata.version("deepspeed")}


def test_a_diverging_rank_makes_the_node_not_ready_and_is_named(selected_run: SelectedRun) -> None:
    fsdp = selected_run.check("test_strategy_step[fsdp]")
    assert (fsdp["status"], fsdp["code"]) == ("FAIL", "FSDP_RANKS_DIVERGED")
    assert "rank 1" in fsdp["summary"] and selected_run.report["verdict"] == "NOT READY"
    assert selected_run.result.returncode == 1, selected_run.result.stdout + selected_run.result.stderr


def test_preflight_strategy_zero2_on_the_command_line(selected_run: SelectedRun) -> None:
    """``preflight --strategy fsdp,zero2``: ZeRO-2 runs, and its op load, whatever FSDP2's verdict (exit 1:
    the diverging rank above makes the run NOT READY)."""
    zero2 = selected_run.check("test_strategy_step[zero2]")
    assert zero2["status"] == "PASS", zero2["summary"]
    assert selected_run.check("test_deepspeed_ops")["status"] == "PASS"
    assert selected_run.check("test_strategy_step[zero1]")["status"] == "SKIP"  # not selected
    assert selected_run.check("test_strategy_step[zero3]")["status"] == "SKIP"  # not selected
    assert selected_run.result.returncode == 1, selected_run.result.stdout + selected_run.result.stderr


def test_an_unknown_strategy_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "preflight", "--strategy", "zero4"], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("preflight: error: argument --strategy: unknown strategy 'zero4'; expected ddp, "
                                     "fsdp, zero1, zero2, zero3, all")


def test_without_a_gpu_and_without_cpu_nothing_is_built_and_the_verdict_comes_in_seconds(tmp_path: Path) -> None:
    """No rehearsal runs (no GPU for the job, no --cpu), so no phase loads DeepSpeed's ops: none is built
    (issue 27: 172 s of silent compiling for a NO_NVIDIA_GPU known after 4 s)."""
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"the installed preflight.checks is another checkout ({checks_dir()})")
    extensions = tmp_path / "extensions"  # empty: a build would have to start from nothing
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
           "PREFLIGHT_TORCH_EXTENSIONS_DIR": str(extensions)}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(tmp_path / "r")],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    took = time.monotonic() - started
    report = json.loads((tmp_path / "r" / "preflight.json").read_text())
    if report["node"]["job"]["on_gpu"]:
        pytest.skip("this machine has a GPU for the job")
    assert result.returncode == 1 and report["verdict"] == "NOT READY", result.stdout + result.stderr
    ops = by_name(report)["test_deepspeed_ops"]
    assert ops["status"] == "SKIP" and "no NVIDIA GPU for the job" in ops["summary"], ops
    assert not extensions.exists() or not any(p.is_dir() for p in extensions.iterdir())
    lines = result.stdout.splitlines()
    assert lines[0].startswith("preflight ") and lines[-1].startswith("NOT READY")
    # a build takes minutes; issue 27's bound is 15 s on a quiet machine (5-8 s here, 20 s at a load of 10)
    assert took < 60, f"{took:.1f} s"
