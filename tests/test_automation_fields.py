"""What a machine reads from a run: the structured ``gpu`` field of per-GPU checks in the JSON and a
JUnit file whose WARNs and fixes a CI view shows (fake GPUs under the real plugin, in-process)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.test_devices_checks import CHECKS, fake


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str,
        env: dict[str, str] | None = None) -> tuple[dict[str, Any], ET.Element]:
    """The device checks (no launch) with ``args``: the JSON report and the JUnit XML's root."""
    import json

    from tests.conftest import validate_report

    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(test_devices=CHECKS)
    out = pytester.path / "out"
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--preflight-report-dir={out}", f"--junitxml={junit}",
                                "-m", "not distributed", *args)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report, ET.parse(junit).getroot()


def test_per_gpu_checks_name_their_gpu_in_fields(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    report, _ = run(pytester, monkeypatch, *fake("8x-h100-sxm"), env={"CUDA_VISIBLE_DEVICES": "3,1"})
    checks = {c["id"].split("::")[-1]: c for c in report["checks"]}
    ecc3, ecc1 = checks["test_gpu_ecc[gpu3]"]["gpu"], checks["test_gpu_ecc[gpu1]"]["gpu"]
    nvml = {g["index"]: g for g in report["node"]["gpus"]["gpus"]}
    assert ecc3["index"] == 3 and ecc3["cuda_index"] == 0 and ecc1["cuda_index"] == 1
    assert ecc3["pci_bus_id"] == nvml[3]["pci_bus_id"] and ecc3["uuid"] == nvml[3]["uuid"]
    assert ecc3["uuid"].startswith("GPU-") and ecc3["serial"] == nvml[3]["serial"]
    assert len(ecc3["serial"]) == 13 and ecc3["serial"].isdigit() and ecc3["serial"] != ecc1["serial"]
    assert ecc3["name"] == nvml[3]["name"]
    assert checks["test_gpu_count"]["gpu"] is None and checks["test_nvml"]["gpu"] is None


def test_a_serial_nvml_does_not_report_is_said(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Boards without an inforom answer NVML_ERROR_NOT_SUPPORTED (nvml.h, nvmlDeviceGetSerial)."""
    report, _ = run(pytester, monkeypatch, *fake("1x-a10g", {"not_supported": ["nvmlDeviceGetSerial"]}))
    gpu = next(c for c in report["checks"] if c["id"].endswith("test_gpu_ecc[gpu0]"))["gpu"]
    assert gpu["serial"] == "not supported" and gpu["index"] == 0


def test_junit_shows_warnings_and_fixes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _, root = run(pytester, monkeypatch, *fake("8x-l40s", {"persistence_off": [2], "ecc_volatile": {"3": 2}}))
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None and suite.get("name") == "preflight"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    warned = cases["WARN test_gpu_persistence[gpu2]"]
    assert warned.find("failure") is None and warned.find("skipped") is None  # a pass, as the exit code says
    props = {p.get("name"): p.get("value") for p in warned.iter("property")}
    assert props["preflight.verdict"] == "WARN" and props["preflight.code"] == "GPU_PERSISTENCE_OFF"
    assert "nvidia-persistenced" in (props["preflight.remediation"] or "")
    assert "test_gpu_persistence[gpu1]" in cases  # healthy GPUs keep their names
    failure = cases["test_gpu_ecc[gpu3]"].find("failure")
    assert failure is not None and failure.text is not None
    assert failure.text.startswith("[GPU_ECC_UNCORRECTABLE] ") and "\nFix: Do not run on GPU 3" in failure.text


def test_junit_suite_name_the_user_chose_stays(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _, root = run(pytester, monkeypatch, *fake("1x-a10g"), "-o", "junit_suite_name=node-a")
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None and suite.get("name") == "node-a"
