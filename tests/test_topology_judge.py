"""The topology judge on real captures and on matrices built to show one fault each."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.judge.topology import (
    Layout,
    classify,
    judge_affinity,
    judge_cross_check,
    judge_layout,
    judge_nvlink_balance,
    judge_nvlink_counts,
)
from preflight.outcome import Status
from preflight.parse.topo import TopoMatrix, parse_topo_matrix
from preflight.probe.topology import GpuNvlinks, NvmlPair

# capture -> (layout, layout verdict status, code, words the summary must contain)
CAPTURES = {
    "1xGPU-single-sglang-check_env-with-legend": (Layout.SINGLE, Status.PASS, None, ["1 GPU"]),
    "2xRTX3090-NVLink-bridge-NV4-legend": (Layout.NVLINK_ALL, Status.PASS, None, ["2 GPUs", "NV4"]),
    "4xA100-SXM-64GB-JUWELS-Booster-NV4-4NICs-legend": (Layout.NVLINK_ALL, Status.PASS, None, ["no NVSwitch", "NV4"]),
    "4xH100-SXM-Lambda-NV18-PHB-NIC-header-7-leading-spaces": (
        Layout.NVSWITCH, Status.PASS, None, ["4 GPUs, all pairs NV18 (NVSwitch)", "will not be link-bound"]),
    "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend": (
        Layout.NVSWITCH, Status.PASS, None,
        ["8 GPUs, all pairs NV18 (NVSwitch): FSDP and ZeRO-3 will not be link-bound"]),
    "8xA100-HGX-NV12-single-mlx5_0-column-old-format": (Layout.NVSWITCH, Status.PASS, None, ["NV12 (NVSwitch)"]),
    "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads": (
        Layout.NVLINK_PAIRS, Status.WARN, "TOPOLOGY_NVLINK_PAIRS_ONLY",
        ["4 GPUs", "only within pairs (0-1, 2-3)", "across CPU sockets (SYS)", "PCIe speed"]),
    "8xA100-PCIe-NV12-bridge-pairs-NODE-SYS": (
        Layout.NVLINK_PAIRS, Status.WARN, "TOPOLOGY_NVLINK_PAIRS_ONLY", ["(0-1, 2-3, 4-5, 6-7)", "(SYS)"]),
    "4xA100-SXM4-40GB-NV12-NV10-pairs-NODE-trimmed": (
        Layout.NVLINK_PAIRS, Status.WARN, "TOPOLOGY_NVLINK_PAIRS_ONLY", ["one socket (NODE)"]),
    "4xL40S-NODE-SYS-2NICs-no-NVLink": (Layout.PCIE, Status.WARN, "TOPOLOGY_PCIE_ONLY", ["no NVLink", "(SYS)"]),
    "8xGPU-PCIe-PIX-PHB-SYS-no-NIC": (Layout.PCIE, Status.WARN, "TOPOLOGY_PCIE_ONLY", ["link-bound"]),
    "8xV100-SXM2-16GB-hybrid-cube-mesh-TABS-old-legend-wording-2019": (
        Layout.MIXED, Status.PASS, None, ["16 of 28 pairs over NVLink", "rings can stay on NVLink"]),
}


def _matrix(rows: str) -> TopoMatrix:
    """A matrix from space-separated rows of codes."""
    links = tuple(tuple(line.split()) for line in rows.strip().splitlines())
    return TopoMatrix(gpus=tuple(f"GPU{i}" for i in range(len(links))), links=links)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_layout_of_real_captures(shared_fixtures: Path, name: str) -> None:
    layout, status, code, words = CAPTURES[name]
    matrix = parse_topo_matrix((shared_fixtures / "topo" / f"{name}.txt").read_text())
    assert classify(matrix).layout is layout
    verdict = judge_layout(matrix)
    assert (verdict.status, verdict.code) == (status, code)
    for word in words:
        assert word in verdict.summary
    (view,) = verdict.views
    assert view.kind == "matrix"
    assert view.data["cells"] == [list(row) for row in matrix.links]


def test_pairs_with_a_ring_that_needs_only_one_socket_hop_names_node() -> None:
    matrix = _matrix("""
        X NV4 PIX NODE
        NV4 X NODE PIX
        PIX NODE X NV4
        NODE PIX NV4 X""")
    facts = classify(matrix)
    assert facts.layout is Layout.NVLINK_PAIRS
    assert facts.ring_on_nvlink is False
    assert facts.ring_worst_pcie == "PIX"  # 0-1 NV, 1-3 PIX, 3-2 NV, 2-0 PIX
    assert facts.worst_pcie == "NODE"
    assert "single PCIe switch (PIX)" in facts.summary


def test_mixed_without_nvlink_ring_warns() -> None:
    # a triangle of NVLink plus one GPU reached only over SYS
    matrix = _matrix("""
        X NV2 NV2 SYS
        NV2 X NV2 SYS
        NV2 NV2 X SYS
        SYS SYS SYS X""")
    verdict = judge_layout(matrix)
    assert classify(matrix).layout is Layout.MIXED
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_RING_CROSSES_PCIE"
    assert "across CPU sockets (SYS)" in verdict.summary


def test_three_gpus_with_equal_nvlink_are_direct_when_the_links_fit_one_gpu() -> None:
    assert classify(_matrix("X NV6 NV6\nNV6 X NV6\nNV6 NV6 X")).layout is Layout.NVLINK_ALL
    assert classify(_matrix("X NV12 NV12\nNV12 X NV12\nNV12 NV12 X")).layout is Layout.NVSWITCH


def test_old_soc_code_counts_as_cross_socket() -> None:
    facts = classify(_matrix("X SOC\nSOC X"))
    assert facts.layout is Layout.PCIE and facts.worst_pcie == "SYS"


def test_nvlink_balance_names_the_gpus_with_fewer_links(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "4xA100-SXM4-40GB-NV12-NV10-pairs-NODE-trimmed.txt").read_text()
    verdict = judge_nvlink_balance(parse_topo_matrix(text))
    assert verdict.status is Status.WARN and verdict.code == "NVLINK_UNEVEN"
    assert verdict.summary.startswith("GPU2 and GPU3 show fewer NVLinks")


def test_nvlink_balance_on_a_switch_with_one_weak_gpu() -> None:
    rows = [["X" if i == j else ("NV12" if 3 in (i, j) else "NV18") for j in range(4)] for i in range(4)]
    matrix = TopoMatrix(gpus=tuple(f"GPU{i}" for i in range(4)), links=tuple(tuple(r) for r in rows))
    verdict = judge_nvlink_balance(matrix)
    assert verdict.status is Status.WARN
    assert "GPU3" in verdict.summary and "GPU0" not in verdict.summary.split("(")[0]


def test_nvlink_balance_even_mesh_passes_and_pcie_skips(shared_fixtures: Path) -> None:
    nersc = shared_fixtures / "topo" / "8xV100-SXM2-NERSC-cgpu-mlx4-mlx5-columns-decommented.txt"
    mesh = parse_topo_matrix(nersc.read_text())
    assert judge_nvlink_balance(mesh).status is Status.PASS
    assert judge_nvlink_balance(_matrix("X PIX\nPIX X")).status is Status.SKIP


def _states(*active: int, present: int = 18, version: int | None = 6) -> list[GpuNvlinks]:
    return [GpuNvlinks(gpu=i, active=a, present=present, version=version) for i, a in enumerate(active)]


def test_nvlink_counts_all_equal_pass_with_version() -> None:
    verdict = judge_nvlink_counts(_states(18, 18, 18, 18))
    assert verdict.status is Status.PASS
    assert verdict.summary == "4 GPUs, 18 active NVLinks each (NVLink 4.0)"


def test_nvlink_counts_gpu_with_no_links_fails_naming_it() -> None:
    verdict = judge_nvlink_counts(_states(18, 18, 18, 0, 18, 18, 18, 18))
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU3 has no active NVLink (peers have 18)")
    assert "-i 3" in (verdict.remediation or "")


def test_nvlink_counts_gpu_with_fewer_links_fails_naming_each() -> None:
    verdict = judge_nvlink_counts(_states(12, 10, 12, 8))
    assert verdict.status is Status.FAIL
    assert "GPU1 has 10 of 12 NVLinks active" in verdict.summary
    assert "GPU3 has 8 of 12 NVLinks active" in verdict.summary
    assert "GPU0" not in verdict.summary and "GPU2" not in verdict.summary


def test_nvlink_counts_against_an_expectation() -> None:
    verdict = judge_nvlink_counts(_states(12, 12), expected=18)
    assert verdict.status is Status.FAIL and "(expected 18)" in verdict.summary


def test_nvlink_counts_no_nvlink_skips_and_all_down_fails() -> None:
    assert judge_nvlink_counts(_states(0, 0, present=0)).status is Status.SKIP
    assert judge_nvlink_counts(_states(18)).status is Status.SKIP
    down = judge_nvlink_counts(_states(0, 0, 0, 0))
    assert down.status is Status.FAIL and down.code == "NVLINK_ALL_DOWN"


def test_cross_check_agreement_and_each_kind_of_disagreement() -> None:
    smi = _matrix("X NV12 SYS\nNV12 X SYS\nSYS SYS X")
    agree = [NvmlPair(0, 1, True, "PIX"), NvmlPair(0, 2, False, "SYS"), NvmlPair(1, 2, False, "SYSTEM")]
    assert judge_cross_check(smi, agree, 3).status is Status.PASS
    differ = [NvmlPair(0, 1, False, "PIX"), NvmlPair(0, 2, True, "SYS"), NvmlPair(1, 2, False, "NODE")]
    verdict = judge_cross_check(smi, differ, 3)
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_SOURCES_DISAGREE"
    assert "GPU0-GPU1: nvidia-smi NV12, NVML NVLink P2P not available" in verdict.summary
    assert "GPU0-GPU2: nvidia-smi SYS, NVML NVLink P2P available" in verdict.summary
    assert "GPU1-GPU2: nvidia-smi SYS, NVML common PCIe ancestor NODE" in verdict.summary
    unknown = [NvmlPair(0, 1, None, None)]
    assert judge_cross_check(smi, unknown, 3).status is Status.PASS
    assert "NVML counts 2" in judge_cross_check(smi, [], 2).summary


def test_affinity_groups_gpus_and_shows_a_table(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "8xA100-SXM4-80GB-NV12-10NICs-8NUMA-DGX.txt").read_text()
    verdict = judge_affinity(parse_topo_matrix(text))
    assert verdict.status is Status.PASS
    assert verdict.summary.startswith("GPU0-1: NUMA 3, CPUs 48-63,176-191; GPU2-3: NUMA 1")
    (view,) = verdict.views
    assert view.data["columns"] == ["GPU", "CPU affinity", "NUMA affinity", "GPU NUMA ID"]
    assert view.data["rows"][7] == ["GPU7", "80-95,208-223", "5", "N/A"]


def test_affinity_says_when_cells_were_unreadable(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "8xH800-NV18-10NICs-affinity-column-overflow.txt").read_text()
    verdict = judge_affinity(parse_topo_matrix(text))
    assert "4 row(s) of affinity could not be read" in verdict.summary
    assert "0-45,92-1370" in verdict.evidence["notes"]


def test_affinity_absent_skips() -> None:
    assert judge_affinity(_matrix("X NV4\nNV4 X")).status is Status.SKIP
