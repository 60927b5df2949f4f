"""The host and memory-fit checks end to end: pytest with the plugin, in a child process.

Fake machines come from the test-only plugin ``tests.fakes.fake_host``, which changes the machine only
through the run's transports (a filesystem root, its statvfs, an environment, recorded commands, the fake
NVML library); one run has no fakes and checks the verdicts against this machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight.locations import checks_dir
from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e

CHECKS = [str(REPO_ROOT / "checks" / "test_host.py"), str(REPO_ROOT / "checks" / "test_memory_fit.py")]
MiB = 2**20


def _default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def run_checks(tmp_path: Path, *options: str, fake: str | None = None) -> dict[str, Any]:
    """Run the host checks under pytest with the preflight plugin; return the JSON report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    plugins: list[str] = []
    if fake:
        env["PREFLIGHT_FAKE_HOST"] = fake
        # both fake machines are 8 x H100 SXM: the node model (ranks per GPU) sees them through the fake NVML
        plugins = ["-p", "tests.fakes.fake_host"]
    out = tmp_path / "reports"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugins, *CHECKS,
         f"--preflight-report-dir={out}", *options],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        # the SIGHUP disposition is the real process's (probe/host_session.py): a suite started under nohup
        # would pass it on and turn the fake session's SESSION_NOT_DETACHED into a PASS
        preexec_fn=_default_sighup,
    )
    assert (out / "preflight.json").exists(), result.stdout + result.stderr
    report: dict[str, Any] = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    report["_stdout"] = result.stdout
    return report


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def test_healthy_8xh100_is_ready_except_plain_ddp(tmp_path: Path) -> None:
    report = run_checks(tmp_path, "--preflight-model-params=7B", fake="healthy-8xh100")
    checks = by_name(report)
    fit = checks.pop("test_memory_fit")
    assert {name: c["status"] for name, c in checks.items()} == {
        "test_shared_memory": "PASS", "test_locked_memory_limit": "PASS", "test_checkpoint_disk": "PASS",
        "test_session_survives_disconnect": "PASS", "test_no_leftover_training_processes": "PASS",
        "test_rendezvous_port_free": "PASS", "test_environment_hygiene": "PASS", "test_cpu_and_ram_per_rank": "PASS",
        "test_iommu_and_acs": "PASS"}
    assert (fit["status"], fit["code"]) == ("WARN", "MEMORY_FIT_NEEDS_SHARDING")
    assert "ZeRO-1 fits" in fit["summary"] and "8 x Fake NVIDIA H100 80GB HBM3" in fit["summary"]
    assert "24 cores and 256.0 GiB per rank" in checks["test_cpu_and_ram_per_rank"]["summary"]
    assert "room for 102 checkpoints of 98.00 GB" in checks["test_checkpoint_disk"]["summary"]
    assert report["verdict"] == "DEGRADED"


def test_healthy_8xh100_small_model_is_ready(tmp_path: Path) -> None:
    report = run_checks(tmp_path, "--preflight-model-params=1B", fake="healthy-8xh100")
    assert by_name(report)["test_memory_fit"]["status"] == "PASS"
    assert report["verdict"] == "READY"


def test_troubled_docker_reports_every_problem(tmp_path: Path) -> None:
    report = run_checks(tmp_path, "--preflight-model-params=7B", fake="troubled-docker")
    codes = {name: (c["status"], c["code"]) for name, c in by_name(report).items()}
    assert codes == {
        "test_shared_memory": ("WARN", "SHM_SMALL"),
        "test_locked_memory_limit": ("WARN", "MEMLOCK_LOW"),
        "test_checkpoint_disk": ("FAIL", "CHECKPOINT_DISK_TOO_SMALL"),
        "test_session_survives_disconnect": ("WARN", "SESSION_NOT_DETACHED"),
        "test_no_leftover_training_processes": ("WARN", "LEFTOVER_TRAINING_PROCESSES"),
        "test_rendezvous_port_free": ("PASS", None),  # taken, but torchrun --standalone picks a free port
        "test_environment_hygiene": ("WARN", "ENV_HYGIENE"),
        "test_cpu_and_ram_per_rank": ("WARN", "HOST_RESOURCES_PER_RANK_LOW"),
        "test_iommu_and_acs": ("PASS", None),
        "test_memory_fit": ("FAIL", "MEMORY_FIT_NONE"),
    }
    checks = by_name(report)
    assert "--ipc=host" in checks["test_shared_memory"]["remediation"]
    assert "GPU 3" in checks["test_memory_fit"]["summary"]
    # the recorded lspci -vvv: the AMD GPP bridge redirects, the PLX switch does not
    assert "ACS redirect enabled on 1 of 2" in checks["test_iommu_and_acs"]["summary"]
    assert report["verdict"] == "NOT READY"


def test_memory_fit_options_reach_the_check(tmp_path: Path) -> None:
    report = run_checks(tmp_path, "--preflight-model-params=7B", "--preflight-headroom=0%",
                        "--preflight-bytes-per-param=8", "--preflight-largest-layer-params=100M",
                        fake="healthy-8xh100")
    fit = by_name(report)["test_memory_fit"]
    assert fit["status"] == "PASS"  # 8 bytes x 7B = 56 GB fits in 85.5 GB with no headroom
    assert "56.00 GB" in json.dumps(fit)


def test_bad_model_size_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *CHECKS,
                             "--preflight-model-params=seven"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 4  # pytest's usage-error code; the preflight CLI maps it to 2
    assert "model size 'seven' is not a number" in result.stderr


def test_without_model_params_memory_fit_skips_and_disk_is_only_checked_for_space(tmp_path: Path) -> None:
    report = run_checks(tmp_path, fake="healthy-8xh100")
    checks = by_name(report)
    assert checks["test_memory_fit"]["status"] == "SKIP"
    assert "--model-params" in checks["test_memory_fit"]["summary"]
    assert "pass --model-params" in checks["test_checkpoint_disk"]["summary"]


def test_real_machine_verdicts(tmp_path: Path) -> None:
    """No fakes: the verdicts must match what this machine really is."""
    report = run_checks(tmp_path, f"--preflight-checkpoint-dir={tmp_path}")
    checks = by_name(report)
    stats = os.statvfs("/dev/shm")
    shm_total, shm_free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    expected_shm = "WARN" if shm_total < 512 * MiB or shm_free < 512 * MiB else "PASS"
    assert checks["test_shared_memory"]["status"] == expected_shm
    assert checks["test_checkpoint_disk"]["status"] in ("PASS", "WARN")  # tmp_path is writable
    assert checks["test_checkpoint_disk"]["code"] in (None, "DISK_LOW")
    assert checks["test_rendezvous_port_free"]["status"] in ("PASS", "WARN", "SKIP")
    assert checks["test_no_leftover_training_processes"]["code"] in (None, "LEFTOVER_TRAINING_PROCESSES",
                                                                      "PREFLIGHT_RUN_IN_PROGRESS")
    # a child of pytest with captured output has no terminal to hang up
    assert checks["test_session_survives_disconnect"]["status"] == "PASS"
    assert checks["test_iommu_and_acs"]["status"] in ("PASS", "SKIP")
    if not Path("/sys/class/infiniband").is_dir():
        assert checks["test_locked_memory_limit"]["status"] == "PASS"
    assert checks["test_memory_fit"]["status"] == "SKIP"
    assert 1 <= report["node"]["host"]["cpus"] <= len(os.sched_getaffinity(0))


def test_preflight_cli_runs_the_memory_fit(tmp_path: Path) -> None:
    """``preflight --model-params 7B``: only when the installed checks are this checkout's."""
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"the installed preflight.checks is another checkout ({checks_dir()})")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "preflight", "-k", "memory_fit or checkpoint", "--model-params", "7B",
                             "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    report = json.loads((tmp_path / "r" / "preflight.json").read_text())
    assert {c["name"] for c in report["checks"]} == {"test_memory_fit", "test_checkpoint_disk"}


@pytest.mark.parametrize(
    "cli",
    [["--model-params", "7B"], ["--bytes-per-param", "16"], ["--bytes-per-param", "weights=2,gradients=2"],
     ["--largest-layer-params", "131072000"], ["--headroom", "12.5%"], ["--headroom", "10GiB"],
     ["--checkpoint-dir", "/data/ckpt"]],
)
def test_cli_hands_host_options_to_the_plugin_as_parsed(cli: list[str]) -> None:
    """The CLI parses once; the settings it hands the plugin hold the converted value, and pytest's command
    line carries no ``--preflight-*`` copy of it to parse again."""
    from preflight.cli import build_parser, pytest_argv, settings_from
    from preflight.settings import OPTIONS

    args = build_parser().parse_args(cli)
    settings = settings_from(args)
    option = next(o for o in OPTIONS if f"--{o.name}" == cli[0])
    assert getattr(settings, option.attribute) == (option.type(cli[1]) if option.type else cli[1])
    assert not [a for a in pytest_argv(args, settings, []) if a.split("=", 1)[0] in {o.pytest_flag for o in OPTIONS}]
