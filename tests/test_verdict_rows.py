"""Issue 24's table, row by row, end to end: the shipped device, topology and memory-fit checks under the
preflight plugin, the real nvidia-ml-py binding over the fake NVML C library (tests/fakes/nvml.py), the
fake machine's sysfs as the filesystem root, no launch (``-m "not distributed"``). Each row's machine is
a profile of tests/fakes/nvml_profiles.py plus faults, each citing its source there. The hung-driver row
is tests/test_nvml_timeout_e2e.py (a child process: the NVML child must be killed).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.nvml_profiles import ROWS

CHECK_FILES = {name: (REPO_ROOT / "checks" / f"{name}.py").read_text()
               for name in ("test_devices", "test_topology", "test_memory_fit")}


def run_row(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, profile: str, faults: dict[str, Any] | None = None,
            *args: str, env: dict[str, str] | None = None) -> tuple[str, dict[str, dict[str, Any]]]:
    """The GPU-side verdict of a fake machine, and each check's report entry by name."""
    row = ROWS.get(profile)
    if row is not None:  # a row of issue 24's table: its machine, faults and environment
        profile, faults, env = row.profile, {**row.faults, **(faults or {})}, {**row.environ, **(env or {})}
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", "/nonexistent-bin")  # no nvidia-smi: NVML alone decides
    pytester.makepyfile(**CHECK_FILES)
    out = pytester.path / "out"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--preflight-report-dir={out}", "-m", "not distributed",
                                "-p", "tests.fakes.nvml_plugin", f"--fake-nvml={profile}",
                                f"--fake-nvml-faults={json.dumps(faults or {})}", *args)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report["verdict"], {check["name"]: check for check in report["checks"]}


def problems(checks: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Every check that is not PASS or SKIP: name -> (status, code)."""
    return {name: (c["status"], c["code"]) for name, c in checks.items() if c["status"] not in ("PASS", "SKIP")}


def test_h800_fabric_manager_not_running_is_not_ready_with_the_fix(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 1: HGX H800 (no "SXM" in its name), fabric manager down: one finding, with the fix."""
    verdict, checks = run_row(pytester, monkeypatch, "h800-fabric-manager-down")
    assert verdict == "NOT READY"
    assert problems(checks) == {"test_nvlinks_all_active": ("FAIL", "FABRIC_NOT_READY")}
    nvlinks = checks["test_nvlinks_all_active"]
    assert "GPU0-7" in nvlinks["summary"] and "In Progress" in nvlinks["summary"]
    assert "systemctl status nvidia-fabricmanager" in nvlinks["remediation"]
    assert "driver 525.105.17" in nvlinks["remediation"]
    assert "without NVLink bridges" not in json.dumps(checks)
    assert checks["test_gpu_interconnect"]["status"] == "SKIP"


def test_h800_gpu3_links_down_is_not_ready_naming_gpu3(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 2."""
    verdict, checks = run_row(pytester, monkeypatch, "h800-gpu3-links-down")
    assert verdict == "NOT READY"
    assert problems(checks) == {"test_nvlinks_all_active": ("FAIL", "NVLINK_LINKS_MISSING")}
    summary = checks["test_nvlinks_all_active"]["summary"]
    assert summary.startswith("GPU3 has no active NVLink (peers have 8") and "GPU0" not in summary


def test_a_gpu_outside_the_job_does_not_change_the_verdict(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 3: 8x H100, GPU5's links down, CUDA_VISIBLE_DEVICES=0,1,2,3: READY, GPU5 named in one line."""
    verdict, checks = run_row(pytester, monkeypatch, "h100-gpu5-links-down-job-0-3")
    assert verdict == "READY", problems(checks)
    assert checks["test_nvlinks_all_active"]["summary"] == (
        "4 GPUs, 18 active NVLinks each (NVLink 4.0); GPU5 has 0 of 18 NVLinks up; not used by this job")
    assert checks["test_gpu_interconnect"]["summary"].startswith("4 GPUs, all pairs NV18 (NVSwitch)")


@pytest.mark.parametrize("faults", [
    {"ecc_volatile": {"5": 3}, "compute_mode": {"5": 2}, "mig_enabled": [5], "clock_reasons": {"5": 64},
     "processes": {"5": [[4242, 30000]]}, "remap_pending": [5]},
    {"lost_at_handle": [5]},
], ids=["every-fault", "lost"])
def test_no_fault_outside_cuda_visible_devices_changes_the_verdict(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, faults: dict[str, Any]) -> None:
    verdict, checks = run_row(pytester, monkeypatch, "8x-h100-sxm", faults, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert verdict == "READY", problems(checks)
    assert not [name for name in checks if name.endswith("[gpu5]")]
    if "lost_at_handle" in faults:
        assert "GPU 5 is lost (fell off the bus); not used by this job" in checks["test_nvml"]["summary"]


def test_a_mig_slice_among_full_gpus_is_not_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 4: 8x A100, MIG on GPU0 only; the memory fit sizes GPU0 at its slice, the models are one."""
    verdict, checks = run_row(pytester, monkeypatch, "a100-mig-on-gpu0", None, "--preflight-model-params=7B")
    assert verdict == "NOT READY"
    assert problems(checks)["test_gpu_mig[gpu0]"] == ("FAIL", "GPU_MIG_IN_MULTI_GPU_JOB")
    assert "among 7 full GPU(s)" in checks["test_gpu_mig[gpu0]"]["summary"]
    assert checks["test_gpu_models"]["status"] == "PASS" and "MIXED_GPUS" not in json.dumps(checks)
    fit = checks["test_memory_fit"]
    assert "GPU 0 (3g.40gb slice)" in fit["evidence"]["gpu memory source"]
    assert "MIG 3g.40gb" in json.dumps(fit["details"]) or "MIG 3g.40gb" in fit["summary"], fit["summary"]


def test_compute_mode_prohibited_on_one_gpu_is_not_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 5: PROHIBITED on GPU2, EXCLUSIVE_PROCESS on the rest (one rank per GPU: fine)."""
    verdict, checks = run_row(pytester, monkeypatch, "h100-compute-prohibited-gpu2")
    assert verdict == "NOT READY"
    assert problems(checks) == {"test_gpu_compute_mode[gpu2]": ("FAIL", "GPU_COMPUTE_PROHIBITED")}
    assert "one process per GPU" in checks["test_gpu_compute_mode[gpu0]"]["summary"]


@pytest.mark.parametrize("profile", ["l4-pair", "a100-pcie-no-bridges", "h100-nvl-bridged-pairs", "8x-h800-hgx",
                                     "8x-b200-hgx", "8x-unknown-nvswitch"])
def test_healthy_pcie_pair_and_nvswitch_nodes_are_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    """Row 6 and the done-when: PCIe is what these SKUs are; READY, the interconnect a PASS saying what it means."""
    verdict, checks = run_row(pytester, monkeypatch, profile)
    assert verdict == "READY", problems(checks)
    assert checks["test_gpu_interconnect"]["status"] == "PASS"


def test_a_link_bound_plan_on_pcie_is_degraded_with_its_seconds_per_step(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done-when: with a link-bound plan (--model-params, FSDP) on PCIe the verdict is DEGRADED, with the cost."""
    verdict, checks = run_row(pytester, monkeypatch, "a100-pcie-no-bridges", None, "--preflight-model-params=1B",
                              "--preflight-strategy=fsdp")
    assert verdict == "DEGRADED"
    assert problems(checks) == {"test_gpu_interconnect": ("WARN", "TOPOLOGY_PCIE_ONLY")}
    summary = checks["test_gpu_interconnect"]["summary"]
    # 1e9 parameters x 2 B x 3 (all-gather x2 + reduce-scatter) x 3/4 / 25 GB/s (the 4x A100 PCIe row of the table)
    assert "--strategy fsdp with 1.0B parameters" in summary and "about 0.180 s per step on the link" in summary
    assert "at 25 GB/s busbw" in summary


def test_two_gpus_off_the_bus_are_two_findings(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 7: one FAIL per lost GPU; every check that depends on them SKIPs saying so; no model mix."""
    verdict, checks = run_row(pytester, monkeypatch, "two-gpus-off-the-bus", None, "--preflight-expect-gpus=8")
    assert verdict == "NOT READY"
    assert problems(checks) == {"test_gpu_responds[gpu3]": ("FAIL", "GPU_LOST"),
                                "test_gpu_responds[gpu6]": ("FAIL", "GPU_LOST")}
    assert "nvidia-smi -q -i 3" in checks["test_gpu_responds[gpu3]"]["remediation"]
    for name in ("test_gpu_ecc[gpu3]", "test_gpu_mig[gpu6]", "test_gpu_compute_mode[gpu3]"):
        assert checks[name]["status"] == "SKIP" and "is lost" in checks[name]["summary"]
    assert "GPU 3 is lost: not compared" in checks["test_gpu_models"]["summary"]
    assert checks["test_gpu_count"]["status"] == "SKIP"
