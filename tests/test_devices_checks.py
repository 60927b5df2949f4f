"""checks/test_devices.py end to end: the plugin, the fake machines, every fault, and this CPU node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.locations import checks_dir
from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.nvml_profiles import HEALTHY_PROFILES, PROFILES

CHECKS = (REPO_ROOT / "checks" / "test_devices.py").read_text()
PER_GPU = (
    "test_gpu_responds",
    "test_gpu_not_busy",
    "test_gpu_ecc",
    "test_gpu_memory_repairs",
    "test_gpu_mig",
    "test_gpu_compute_mode",
    "test_gpu_persistence",
    "test_gpu_throttling",
)  # test_gpu_pcie_link reads a sample taken under the sweep's load: test_pcie_link_is_judged_under_load
NODE = (
    "test_nvidia_gpu_present",
    "test_nvml",
    "test_gpu_count",
    "test_devices_agree",
    "test_cuda_visible_devices",
    "test_cuda_device_order",
    "test_gpu_models",
)


def run_checks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], pytest.RunResult]:
    """Run the device checks in-process with the given arguments; the JSON report and the run."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(test_devices=CHECKS)
    out = pytester.path / "out"
    selection = () if "-k" in args or "-m" in args else ("-m", "not distributed")  # no launch unless asked for
    result = pytester.runpytest("-p", "no:cacheprovider", f"--preflight-report-dir={out}", *selection, *args)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report, result


def fake(profile: str, faults: dict[str, Any] | None = None, *extra: str) -> list[str]:
    return [
        "-p",
        "tests.fakes.nvml_plugin",
        f"--fake-nvml={profile}",
        f"--fake-nvml-faults={json.dumps(faults or {})}",
        *extra,
    ]


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


@pytest.mark.parametrize("profile", HEALTHY_PROFILES)
def test_healthy_machine_is_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    count = len(PROFILES[profile].gpus)
    report, _ = run_checks(pytester, monkeypatch, *fake(profile), f"--preflight-expect-gpus={count}")
    checks = by_name(report)
    assert report["verdict"] == "READY"
    assert {c["status"] for c in checks.values()} <= {"PASS", "SKIP"}
    for name in NODE:
        assert checks[name]["status"] == "PASS", checks[name]["summary"]
    for index in range(count):
        assert checks[f"test_gpu_ecc[gpu{index}]"]["status"] == "PASS"
    assert len(checks) == len(NODE) + len(PER_GPU) * count
    table = checks["test_nvml"]["views"][0]
    assert table["kind"] == "table" and len(table["data"]["rows"]) == count and table["data"]["highlight"] == []
    facts = report["node"]["gpus"]
    assert facts["backend"] == f"fake:{profile}" and len(facts["gpus"]) == count


FAULTS = [
    # (profile, faults, extra args, environment, check, status, code, gpu named)
    ("8x-h100-sxm", {"ecc_volatile": {"3": 2}}, [], {}, "test_gpu_ecc[gpu3]", "FAIL", "GPU_ECC_UNCORRECTABLE", 3),
    (
        "8x-a100-sxm",
        {"remap_pending": [6]},
        [],
        {},
        "test_gpu_memory_repairs[gpu6]",
        "FAIL",
        "GPU_ROW_REMAP_PENDING",
        6,
    ),
    ("8x-a100-sxm", {"remap_failed": [1]}, [], {}, "test_gpu_memory_repairs[gpu1]", "FAIL", "GPU_ROW_REMAP_FAILED", 1),
    (
        "8x-v100-sxm2",
        {"retired_pending": [5]},
        [],
        {},
        "test_gpu_memory_repairs[gpu5]",
        "FAIL",
        "GPU_RETIRED_PAGES_PENDING",
        5,
    ),
    ("8x-a100-sxm", {"mig_enabled": [4]}, [], {}, "test_gpu_mig[gpu4]", "FAIL", "GPU_MIG_IN_MULTI_GPU_JOB", 4),
    ("8x-h100-sxm", {"compute_mode": {"2": 2}}, [], {}, "test_gpu_compute_mode[gpu2]", "FAIL", "GPU_COMPUTE_PROHIBITED",
     2),
    ("8x-h100-sxm", {"compute_mode": {"1": 3}, "processes": {"1": [[4242, 500]]}}, [], {},
     "test_gpu_compute_mode[gpu1]", "FAIL", "GPU_EXCLUSIVE_BUSY", 1),
    ("8x-l40s", {"persistence_off": [2]}, [], {}, "test_gpu_persistence[gpu2]", "WARN", "GPU_PERSISTENCE_OFF", 2),
    (
        "8x-h100-sxm",
        {"clock_reasons": {"7": 64}},
        [],
        {},
        "test_gpu_throttling[gpu7]",
        "WARN",
        "GPU_THROTTLED_AT_IDLE",
        7,
    ),
    ("8x-h100-sxm", {"processes": {"1": [[4242, 30000]]}}, [], {}, "test_gpu_not_busy[gpu1]", "FAIL", "GPU_IN_USE", 1),
    (
        "1x-a10g",
        {"memory_used_mib": {"0": 20000}},
        [],
        {},
        "test_gpu_not_busy[gpu0]",
        "FAIL",
        "GPU_MEMORY_IN_USE_UNSEEN",
        0,
    ),
    ("8x-h100-sxm", {"gpu_lost": [2]}, [], {}, "test_gpu_responds[gpu2]", "FAIL", "GPU_LOST", 2),
    (
        "8x-h100-sxm",
        {"absent_gpus": [7]},
        ["--preflight-expect-gpus=8"],
        {},
        "test_gpu_count",
        "FAIL",
        "GPU_COUNT_MISMATCH",
        None,
    ),
    ("8x-h100-sxm", {}, ["--fake-torch-count=7"], {}, "test_devices_agree", "FAIL", "DEVICE_COUNT_DISAGREES", None),
    ("8x-h100-sxm", {}, ["--fake-torch-cpu"], {}, "test_devices_agree", "FAIL", "TORCH_CPU_BUILD", None),
    (
        "8x-h100-sxm",
        {},
        [],
        {"CUDA_VISIBLE_DEVICES": "0,2,-1,1"},
        "test_cuda_visible_devices",
        "FAIL",
        "CUDA_VISIBLE_DEVICES_MALFORMED",
        None,
    ),
    (
        "8x-h100-sxm",
        {},
        [],
        {"CUDA_VISIBLE_DEVICES": ""},
        "test_cuda_visible_devices",
        "FAIL",
        "CUDA_VISIBLE_DEVICES_EMPTY",
        None,
    ),
    (
        "2x-mixed-a6000-h100",
        {},
        [],
        {"CUDA_VISIBLE_DEVICES": "0"},
        "test_cuda_device_order",
        "WARN",
        "CUDA_DEVICE_ORDER_TRAP",
        1,
    ),
    (
        "8x-h100-sxm",
        {},
        [],
        {"CUDA_DEVICE_ORDER": "pci"},
        "test_cuda_device_order",
        "WARN",
        "CUDA_DEVICE_ORDER_INVALID",
        None,
    ),
    ("2x-mixed-a6000-h100", {}, [], {}, "test_gpu_models", "WARN", "MIXED_GPUS", None),
    ("8x-h100-sxm", {"init_error": "DRIVER_NOT_LOADED"}, [], {}, "test_nvml", "FAIL", "NVML_DRIVER_NOT_LOADED", None),
    (
        "8x-h100-sxm",
        {"init_error": "LIB_RM_VERSION_MISMATCH"},
        [],
        {},
        "test_nvml",
        "FAIL",
        "NVML_DRIVER_LIBRARY_MISMATCH",
        None,
    ),
]


@pytest.mark.parametrize(
    ("profile", "faults", "extra", "env", "check", "status", "code", "gpu"), FAULTS, ids=[f[6] for f in FAULTS]
)
def test_each_fault_gives_its_verdict(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
    faults: dict[str, Any],
    extra: list[str],
    env: dict[str, str],
    check: str,
    status: str,
    code: str,
    gpu: int | None,
) -> None:
    report, _ = run_checks(pytester, monkeypatch, *fake(profile, faults, *extra), env=env)
    found = by_name(report)[check]
    assert (found["status"], found["code"]) == (status, code), found["summary"]
    assert found["remediation"]
    if gpu is not None:
        assert f"GPU {gpu}" in found["summary"]
    assert report["verdict"] == ("NOT READY" if status == "FAIL" else "DEGRADED")


def test_the_gpu_table_highlights_the_bad_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    report, _ = run_checks(pytester, monkeypatch, *fake("8x-h100-sxm", {"ecc_volatile": {"3": 1}}))
    table = by_name(report)["test_nvml"]["views"][0]["data"]
    assert table["highlight"] == [3] and table["rows"][3][-1] == "GPU_ECC_UNCORRECTABLE"


def test_malformed_variable_limits_the_per_gpu_checks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, _ = run_checks(
        pytester,
        monkeypatch,
        *fake("8x-h100-sxm"),
        "--preflight-expect-gpus=8",
        env={"CUDA_VISIBLE_DEVICES": "0,2,-1,1"},
    )
    checks = by_name(report)
    assert sorted(n for n in checks if n.startswith("test_gpu_ecc")) == ["test_gpu_ecc[gpu0]", "test_gpu_ecc[gpu2]"]
    assert "CUDA will use 2 GPU(s)" in checks["test_cuda_visible_devices"]["summary"]
    assert checks["test_gpu_count"]["code"] == "GPU_COUNT_MISMATCH"


def test_order_trap_checks_the_gpu_cuda_will_really_use(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, _ = run_checks(pytester, monkeypatch, *fake("2x-mixed-a6000-h100"), env={"CUDA_VISIBLE_DEVICES": "0"})
    assert [n for n in by_name(report) if n.startswith("test_gpu_mig")] == ["test_gpu_mig[gpu1]"]


def test_k_selects_one_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # the PCIe link check reads the sweep under load (an 8-rank launch): test_pcie_link_is_judged_under_load
    report, _ = run_checks(pytester, monkeypatch, *fake("8x-h100-sxm"), "-k", "gpu3 and not pcie_link")
    assert sorted(by_name(report)) == sorted(f"{name}[gpu3]" for name in PER_GPU)


def test_mig_slices_among_full_gpus_are_not_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    report, _ = run_checks(pytester, monkeypatch, *fake("4x-a100-sxm-mixed-mig"))
    checks = by_name(report)
    assert [checks[f"test_gpu_mig[gpu{i}]"]["status"] for i in range(4)] == ["FAIL", "FAIL", "PASS", "PASS"]
    assert "among 2 full GPU(s)" in checks["test_gpu_mig[gpu0]"]["summary"]
    assert checks["test_gpu_models"]["status"] == "PASS"  # the physical GPUs are one model: MIG is its own finding
    assert report["verdict"] == "NOT READY"


def test_one_rank_on_a_mig_slice_is_fine(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES=MIG-<uuid>: the job is one rank on that slice (pytorch/pytorch#92315)."""
    from tests.fakes.nvml import walk_fake

    slice_ = walk_fake("4x-a100-sxm-mixed-mig").gpus[1].mig_devices
    assert isinstance(slice_, tuple)
    report, _ = run_checks(pytester, monkeypatch, *fake("4x-a100-sxm-mixed-mig"), env={"CUDA_VISIBLE_DEVICES": slice_[1]})
    checks = by_name(report)
    mig = checks["test_gpu_mig[gpu1]"]
    assert mig["status"] == "PASS" and "MIG 3g.40gb, 40,192 MiB" in mig["summary"], mig["summary"]
    assert report["verdict"] == "READY"


# -- this CPU machine ---------------------------------------------------------------------------------

GARBAGE = ["", "0,0", "GPU-zz, 1", "-1", "\u00e9,\u00e9\u00e9", "MIG-", "0-7", "99999999999999999999999"]


@pytest.mark.parametrize("raw", [None, *GARBAGE])
def test_cpu_machine_in_a_cpu_rehearsal_skips_and_stays_ready(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, raw: str | None
) -> None:
    report, _ = run_checks(pytester, monkeypatch, "--preflight-cpu",
                           env={} if raw is None else {"CUDA_VISIBLE_DEVICES": raw})
    checks = by_name(report)
    if report["node"]["gpus"]["backend"] != "pynvml" or report["node"]["gpus"]["error"] is None:
        pytest.skip("this machine has an NVIDIA driver")
    assert report["verdict"] == "READY" and report["run"]["cpu_rehearsal"] is True
    present = checks.pop("test_nvidia_gpu_present")
    assert present["status"] == "PASS" and "CPU rehearsal" in present["summary"]
    assert {c["status"] for c in checks.values()} == {"SKIP"}
    assert checks["test_nvml"]["summary"].startswith("no NVIDIA GPU visible: libnvidia-ml.so.1 not found")
    assert set(checks) | {"test_nvidia_gpu_present"} == {*NODE, *(f"{name}[nogpu]" for name in PER_GPU)}


def test_cpu_machine_without_a_cpu_rehearsal_is_not_ready_no_nvidia_gpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18.1: a container without the NVIDIA runtime must not be accepted as READY."""
    report, _ = run_checks(pytester, monkeypatch)
    if report["node"]["gpus"]["error"] is None or report["node"]["gpus"].get("on_pci_bus"):
        pytest.skip("this machine has an NVIDIA GPU")
    checks = by_name(report)
    present = checks.pop("test_nvidia_gpu_present")
    assert (present["status"], present["code"]) == ("FAIL", "NO_NVIDIA_GPU")
    assert "--cpu" in present["remediation"]
    assert {c["status"] for c in checks.values()} == {"SKIP"}
    assert report["verdict"] == "NOT READY"


def test_cpu_machine_expecting_gpus_is_not_ready(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    report, _ = run_checks(pytester, monkeypatch, "--preflight-expect-gpus=8")
    if report["node"]["gpus"]["error"] is None:
        pytest.skip("this machine has an NVIDIA driver")
    assert by_name(report)["test_nvml"]["code"] == "NVML_LIBRARY_NOT_FOUND"
    assert report["verdict"] == "NOT READY"


@pytest.mark.parametrize("value", ["eight", "0", "-3", "1.5", ""])
def test_garbage_expect_gpus_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_devices=CHECKS)
    result = pytester.runpytest(f"--preflight-expect-gpus={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "Traceback" not in result.stderr.str()


@pytest.mark.e2e
def test_preflight_command_on_this_cpu_machine(tmp_path: Path) -> None:
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"preflight.checks resolves to {checks_dir()}, another checkout")
    from tests.test_cli import preflight

    result = preflight("--cpu", "--report-dir", str(tmp_path), "-k", "devices", env={"CUDA_VISIBLE_DEVICES": "0,,x"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "preflight.json").read_text())
    if report["node"]["gpus"]["error"] is None:
        pytest.skip("this machine has an NVIDIA driver")
    assert report["verdict"] == "READY" and "Traceback" not in result.stdout + result.stderr


@pytest.mark.e2e  # -k pcie selects the sweep: a real launch of two ranks
def test_pcie_link_is_judged_under_load(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampled while the sweep runs (the fake's links train up under load; GPU1's slot gives Gen3 x16)."""
    faults = {"under_load": True, "pcie_current": {"1": [3, 16]}}
    report, _ = run_checks(pytester, monkeypatch, *fake("2x-h100-pcie-no-bridge", faults), "-k", "pcie",
                           "--preflight-profile", "quick")  # the short sweep: long enough to sample under load
    checks = by_name(report)
    assert checks["test_gpu_pcie_link[gpu0]"]["status"] == "PASS", checks["test_gpu_pcie_link[gpu0]"]
    assert "under load" in checks["test_gpu_pcie_link[gpu0]"]["summary"]
    degraded = checks["test_gpu_pcie_link[gpu1]"]
    assert degraded["status"] == "WARN" and degraded["code"] == "GPU_PCIE_LINK_DEGRADED", degraded
    assert "Gen3 x16" in degraded["summary"]
