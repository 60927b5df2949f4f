"""The topology checks end to end: pytest with the preflight plugin, a fake ``nvidia-smi`` on PATH
printing a real capture, and the fake NVML machine of the same shape (tests/fakes/nvml_plugin.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, TEST_DATA, validate_report

CHECKS = (REPO_ROOT / "checks" / "test_topology.py").read_text()
H100 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"
A100_SXM = "8xA100-SXM4-80GB-NV12-10NICs-8NUMA-DGX.txt"
A100_PAIRS = "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt"
L40S_4 = "4xL40S-NODE-SYS-2NICs-no-NVLink.txt"


def _fake_smi(bin_dir: Path, capture: Path | None, exit_code: int) -> None:
    """An ``nvidia-smi`` that prints ``capture`` (or a driver failure) and exits with ``exit_code``."""
    bin_dir.mkdir(exist_ok=True)
    failure = "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."
    body = f"cat '{capture}'\n" if capture else f"echo '{failure}'\n"
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}exit {exit_code}\n")
    script.chmod(0o755)


def run_checks(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, smi: Path | None,
               profile: str | None, faults: dict[str, Any] | None = None, smi_exit: int = 0,
               extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the shipped topology checks in-process; each check's report entry by name, plus node facts and HTML."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    bin_dir = pytester.path / "bin"
    if smi is not None or smi_exit:
        _fake_smi(bin_dir, smi, smi_exit)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    pytester.makepyfile(test_topology=CHECKS)
    out = pytester.path / "out"
    args = ["-p", "no:cacheprovider", f"--preflight-report-dir={out}", *extra]
    if profile is not None and "-k" not in extra:
        args += ["-k", "not p2p_copies"]  # a fake GPU node's P2P copy would run on 8 CPU ranks here
    if profile is not None:
        args += ["-p", "tests.fakes.nvml_plugin", f"--fake-nvml={profile}",
                 f"--fake-nvml-faults={json.dumps(faults or {})}"]
    result = pytester.runpytest(*args)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    checks: dict[str, Any] = {c["name"]: c for c in report["checks"]}
    return checks | {"_node": report["node"], "_html": (out / "preflight.html").read_text()}


def test_healthy_nvswitch_node(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / H100, profile="8x-h100-sxm")
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "PASS"
    assert layout["summary"] == "8 GPUs, all pairs NV18 (NVSwitch): FSDP and ZeRO-3 will not be link-bound"
    assert layout["views"][0]["kind"] == "matrix" and layout["views"][0]["data"]["cells"][0][1] == "NV18"
    assert checks["test_nvlinks_all_active"]["summary"] == "8 GPUs, 18 active NVLinks each (NVLink 4.0)"
    assert checks["test_topology_sources_agree"]["status"] == "PASS"
    assert checks["test_gpu_cpu_affinity"]["summary"].startswith("GPU0-3: NUMA 0, CPUs 0-47,96-143")
    assert "test_p2p_copies" not in checks  # deselected: on a fake GPU node it would launch 8 CPU ranks
    assert checks["_node"]["topology"]["gpus"][7] == "GPU7"
    # the 56 NVLink cells twice: the interconnect check's matrix and the node's Links fact, shown as a matrix too
    assert checks["_html"].count('<td class="pfm-nv"') == 2 * 56


def test_one_gpu_missing_its_nvlinks_fails_naming_it(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / H100, profile="8x-h100-sxm",
                        faults={"nvlinks_missing": [3]})
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL" and nvlinks["code"] == "NVLINK_LINKS_MISSING"
    assert nvlinks["summary"].startswith("GPU3 has no active NVLink (peers have 18; it is registered with an NVSwitch")
    assert "GPU0" not in nvlinks["summary"]
    agree = checks["test_topology_sources_agree"]  # one fault, one finding: GPU3's pairs are the NVLink check's
    assert agree["status"] == "PASS" and "GPU3 left out: NVLinks down" in agree["summary"], agree["summary"]


def test_one_link_down_against_an_expected_count(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / A100_SXM, profile="8x-a100-sxm",
                        faults={"nvlink_down": [[6, 11]]}, extra=("--preflight-expect-nvlinks=12",))
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL"
    assert nvlinks["summary"].startswith("GPU6 has 11 of 12 NVLinks active (expected 12)")


def test_bridge_pairs_are_a_pass_that_says_what_they_mean(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    """Issue 24 item 4: a healthy bridged-pair node with no plan is READY; the layout is a fact."""
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / A100_PAIRS,
                        profile="4x-a100-pcie-bridged")
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "PASS" and layout["code"] is None
    assert "only within pairs (0-1, 2-3)" in layout["summary"] and "training works either way" in layout["summary"]
    assert checks["test_nvlinks_all_active"]["status"] == "PASS"
    assert checks["test_topology_sources_agree"]["status"] == "PASS"


def test_this_cpu_node_skips_every_check_with_a_reason(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = run_checks(pytester, monkeypatch, smi=None, profile=None)
    for name in ("test_gpu_interconnect", "test_nvlinks_all_active", "test_topology_sources_agree",
                 "test_gpu_cpu_affinity", "test_p2p_copies"):
        assert checks[name]["status"] == "SKIP", name
        assert checks[name]["summary"].startswith("no NVIDIA GPU"), checks[name]["summary"]


def test_a_broken_driver_skips_with_the_nvml_cause(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = run_checks(pytester, monkeypatch, smi=None, smi_exit=9, profile="8x-h100-sxm",
                        faults={"init_error": "DRIVER_NOT_LOADED"})
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "SKIP" and "the NVIDIA kernel driver is not loaded" in layout["summary"]


def test_gpus_without_nvidia_smi_are_judged_from_nvml(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = run_checks(pytester, monkeypatch, smi=None, profile="8x-h100-sxm")
    assert checks["test_gpu_interconnect"]["summary"].startswith("8 GPUs, all pairs NV18 (NVSwitch)")
    assert checks["test_nvlinks_all_active"]["status"] == "PASS"
    assert checks["test_topology_sources_agree"]["summary"].startswith("nvidia-smi not found on PATH")


def test_an_unreadable_matrix_on_a_gpu_node_is_an_error_of_the_cross_check(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    damaged = TEST_DATA / "topo" / "own" / "asymmetric.txt"
    checks = run_checks(pytester, monkeypatch, smi=damaged, profile="4x-a100-pcie-bridged")
    assert checks["test_gpu_interconnect"]["status"] == "PASS"  # NVML names every pair's link
    agree = checks["test_topology_sources_agree"]
    assert agree["status"] == "ERROR" and agree["code"] == "TOPOLOGY_UNREADABLE"
    assert "not symmetric" in agree["summary"] and "nvidia-smi topo -m" in agree["evidence"]


def test_a_lost_gpu_is_named_not_counted(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    """Issue 24 item 5: the lost GPU is test_gpu_responds' one finding; the topology checks name it."""
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / H100, profile="8x-h100-sxm",
                        faults={"gpu_lost": [2]})
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "PASS" and "GPU 2 is lost" in nvlinks["summary"], nvlinks["summary"]
    assert checks["test_gpu_interconnect"]["status"] == "PASS"
    assert checks["test_topology_sources_agree"]["status"] == "SKIP"


def test_a_bridge_less_a100_pcie_node_is_a_pcie_node_not_a_failure(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    """Issue 14 item 1: 4x A100 80GB PCIe without bridges; NVML lists 12 inactive links per GPU
    (NVIDIA/NVSentinel#1481). The node is PCIe: the layout is a PASS saying so, nothing FAILs."""
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / L40S_4, profile="4x-a100-pcie-no-bridge")
    layout = checks["test_gpu_interconnect"]
    assert layout["status"] == "PASS" and "no NVLink" in layout["summary"]
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "SKIP" and "without NVLink bridges" in nvlinks["summary"], nvlinks["summary"]
    assert checks["test_topology_sources_agree"]["status"] == "PASS"
    assert not [name for name, c in checks.items() if not name.startswith("_") and c["status"] == "FAIL"]


def test_a_bridge_less_node_fails_when_the_user_expects_bridges(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / L40S_4, profile="4x-a100-pcie-no-bridge",
                        extra=("--preflight-expect-nvlinks=12",))
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL" and nvlinks["code"] == "NVLINK_LINKS_MISSING"


def test_a_bridged_pair_with_one_link_down_still_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_fixtures: Path) -> None:
    checks = run_checks(pytester, monkeypatch, smi=shared_fixtures / "topo" / A100_PAIRS,
                        profile="4x-a100-pcie-bridged", faults={"nvlink_down": [[1, 7]]})
    nvlinks = checks["test_nvlinks_all_active"]
    assert nvlinks["status"] == "FAIL" and nvlinks["code"] == "NVLINK_LINKS_MISSING"
    assert nvlinks["summary"].startswith("GPU0 has 11 of 12 NVLinks active; GPU1 has 11 of 12")
