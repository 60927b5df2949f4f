"""The topology checks end to end: pytest with the preflight plugin, a fake ``nvidia-smi`` on PATH
printing a real capture, and a fake NVML wired after the same capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, TEST_DATA

CHECKS = REPO_ROOT / "checks" / "test_topology.py"
H100 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"
A100_PAIRS = "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt"


def _fake_smi(bin_dir: Path, capture: Path | None, exit_code: int = 0) -> None:
    """An ``nvidia-smi`` that prints ``capture`` (or nothing) and exits with ``exit_code``."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    body = f"cat '{capture}'\n" if capture else "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n"
    script.write_text(f"#!/bin/sh\n{body}exit {exit_code}\n")
    script.chmod(0o755)


def run_checks(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, smi: Path | None,
               nvml: Path | None, faults: dict | None = None, smi_exit: int = 0,
               extra: tuple[str, ...] = ()) -> dict[str, dict]:
    """Run the shipped topology checks; return each check's entry of preflight.json by name."""
    bin_dir = pytester.path / "bin"
    if smi is not None or smi_exit:
        _fake_smi(bin_dir, smi, smi_exit)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = pytester.path / "out"
    args = [str(CHECKS), f"--preflight-report-dir={out}", "-p", "no:cacheprovider", "-p", "tests.fakes.topology_plugin",
            *extra]
    if nvml is not None:
        args += [f"--fake-topology={nvml}", f"--fake-topology-faults={json.dumps(faults or {})}"]
    pytester.runpytest(*args)
    report = json.loads((out / "preflight.json").read_text())
    html = (out / "preflight.html").read_text()
    return {c["name"]: c for c in report["checks"]} | {"_node": report["node"], "_html": html}


def test_healthy_nvswitch_node(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / H100
    checks = run_checks(pytester, monkeypatch, smi=capture, nvml=capture)
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "PASS"
    assert layout["summary"] == "8 GPUs, all pairs NV18 (NVSwitch): FSDP and ZeRO-3 will not be link-bound"
    assert layout["views"][0]["kind"] == "matrix" and layout["views"][0]["data"]["cells"][0][1] == "NV18"
    assert checks["test_nvlinks_all_active"]["summary"] == "8 GPUs, 18 active NVLinks each (NVLink 4.0)"
    assert checks["test_topology_sources_agree"]["status"] == "PASS"
    assert checks["test_gpu_cpu_affinity"]["summary"].startswith("GPU0-3: NUMA 0, CPUs 0-47,96-143")
    p2p = checks["test_p2p_copies"]
    assert p2p["status"] == "SKIP" and "no NVIDIA GPU pair visible to CUDA" in p2p["summary"]
    assert checks["_node"]["topology"]["gpus"][7] == "GPU7"
    assert checks["_html"].count('<td class="pfm-nv"') == 56


def test_one_gpu_missing_its_nvlinks_fails_naming_it(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / H100
    checks = run_checks(pytester, monkeypatch, smi=capture, nvml=capture, faults={"missing": [3]})
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL" and nvlinks["code"] == "NVLINK_LINKS_MISSING"
    assert nvlinks["summary"].startswith("GPU3 has no active NVLink (peers have 18)")
    assert "GPU0" not in nvlinks["summary"]
    agree = checks["test_topology_sources_agree"]
    assert agree["status"] == "WARN" and "GPU0-GPU3: nvidia-smi NV18, NVML NVLink P2P not available" in agree["summary"]


def test_one_link_down_and_an_expected_count(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / "8xA100-SXM4-80GB-NV12-10NICs-8NUMA-DGX.txt"
    checks = run_checks(pytester, monkeypatch, smi=capture, nvml=capture,
                        faults={"down": [[6, 11]], "links_per_gpu": 12}, extra=("--preflight-expect-nvlinks=12",))
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL" and nvlinks["summary"].startswith("GPU6 has 11 of 12 NVLinks active (expected 12)")


def test_bridge_pairs_warn_that_all_reduce_runs_at_pcie_speed(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / A100_PAIRS
    checks = run_checks(pytester, monkeypatch, smi=capture, nvml=capture, faults={"links_per_gpu": 12})
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "WARN" and layout["code"] == "TOPOLOGY_NVLINK_PAIRS_ONLY"
    assert "only within pairs (0-1, 2-3)" in layout["summary"]
    assert checks["test_nvlinks_all_active"]["status"] == "PASS"
    assert checks["test_topology_sources_agree"]["status"] == "PASS"


def test_a_node_without_gpus_skips_every_check_with_a_reason(pytester, monkeypatch):
    checks = run_checks(pytester, monkeypatch, smi=None, nvml=None)
    for name in ("test_gpu_interconnect", "test_topology_sources_agree", "test_gpu_cpu_affinity"):
        assert checks[name]["status"] == "SKIP"
        assert checks[name]["summary"] == "no NVIDIA GPU visible: nvidia-smi not found on PATH"
    assert checks["test_nvlinks_all_active"]["status"] == "SKIP"
    assert checks["test_p2p_copies"]["status"] == "SKIP"


def test_a_broken_driver_skips_with_nvidia_smi_and_nvml_reasons(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / H100
    checks = run_checks(pytester, monkeypatch, smi=None, smi_exit=9, nvml=capture,
                        faults={"unavailable": "the NVIDIA kernel driver is not loaded"})
    summary = checks["test_gpu_interconnect"]["summary"]
    assert checks["test_gpu_interconnect"]["status"] == "SKIP"
    assert "exit code 9" in summary and "the NVIDIA kernel driver is not loaded" in summary


def test_an_unreadable_matrix_on_a_gpu_node_is_an_error(pytester, monkeypatch, shared_fixtures):
    damaged = TEST_DATA / "topo" / "own" / "asymmetric.txt"
    checks = run_checks(pytester, monkeypatch, smi=damaged, nvml=shared_fixtures / "topo" / A100_PAIRS)
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "ERROR" and layout["code"] == "TOPOLOGY_UNREADABLE"
    assert "not symmetric" in layout["summary"] and "nvidia-smi topo -m" in layout["evidence"]


def test_an_nvml_query_failing_is_an_error(pytester, monkeypatch, shared_fixtures):
    capture = shared_fixtures / "topo" / H100
    checks = run_checks(pytester, monkeypatch, smi=capture, nvml=capture, faults={"failing": ["nvlink_state"]})
    assert checks["test_nvlinks_all_active"]["status"] == "ERROR"
    assert "nvlink_state: GPU is lost" in checks["test_nvlinks_all_active"]["summary"]
    assert checks["test_gpu_interconnect"]["status"] == "PASS"
