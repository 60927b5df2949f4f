"""The topology judge on real captures and on matrices built to show one fault each."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.judge.topology import (
    Layout,
    board_wires_nvlinks,
    classify,
    judge_affinity,
    judge_cross_check,
    judge_layout,
    judge_nvlink_balance,
    judge_nvlink_counts,
    nvlink_expectations,
)
from preflight.outcome import Status
from preflight.parse.topo import TopoMatrix, parse_topo_matrix
from preflight.probe.nvml import NOT_SUPPORTED
from preflight.probe.nvml_snapshot import GpuPair
from tests.fakes.nvml import walk_fake

A100_PAIRS = "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt"
L40S_4 = "4xL40S-NODE-SYS-2NICs-no-NVLink.txt"
H100_8 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"

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


# -- NVLink counts, through the real binding over the fake NVML (tests/fakes/nvml.py) ----------------


def test_nvlink_counts_all_equal_pass_with_version() -> None:
    verdict = judge_nvlink_counts(walk_fake("8x-h100-sxm").gpus[:4])
    assert verdict.status is Status.PASS
    assert verdict.summary == "4 GPUs, 18 active NVLinks each (NVLink 4.0)"


def test_nvlink_counts_gpu_with_no_links_fails_naming_it() -> None:
    verdict = judge_nvlink_counts(walk_fake("8x-h100-sxm", nvlinks_missing={3}).gpus)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU3 has no active NVLink (peers have 18)")
    assert "-i 3" in (verdict.remediation or "")


def test_nvlink_counts_gpu_with_fewer_links_fails_naming_each() -> None:
    down = {(1, 0), (1, 1), (3, 0), (3, 1), (3, 2), (3, 3)}
    verdict = judge_nvlink_counts(walk_fake("8x-a100-sxm", nvlink_down=down).gpus[:4])
    assert verdict.status is Status.FAIL
    assert "GPU1 has 10 of 12 NVLinks active" in verdict.summary
    assert "GPU3 has 8 of 12 NVLinks active" in verdict.summary
    assert "GPU0" not in verdict.summary and "GPU2" not in verdict.summary


def test_nvlink_counts_against_an_expectation() -> None:
    verdict = judge_nvlink_counts(walk_fake("8x-a100-sxm").gpus[:2], expected=18)
    assert verdict.status is Status.FAIL and "(expected 18)" in verdict.summary


def test_nvlink_counts_no_nvlink_or_one_gpu_skips() -> None:
    assert judge_nvlink_counts(walk_fake("8x-l40s").gpus).status is Status.SKIP
    assert judge_nvlink_counts(walk_fake("8x-h100-sxm").gpus[:1]).status is Status.SKIP


def test_an_nvswitch_node_with_every_link_down_fails() -> None:
    """SXM boards wire their links: all down is the fabric manager or the board, not a missing bridge."""
    verdict = judge_nvlink_counts(walk_fake("8x-h100-sxm", nvlinks_missing=set(range(8))).gpus)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_ALL_DOWN"
    assert "an SXM board wires its NVLinks" in verdict.summary


@pytest.mark.parametrize("profile", ["4x-a100-pcie-no-bridge", "2x-h100-pcie-no-bridge", "2x-mixed-a6000-h100"])
def test_bridge_less_nvlink_capable_pcie_cards_are_not_a_finding(profile: str, shared_fixtures: Path) -> None:
    """Issue 14 item 1: NVML lists every link of an A100/H100 PCIe card, each inactive, without a
    bridge (NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49). That is a PCIe node, not NOT READY."""
    gpus = walk_fake(profile).gpus
    assert any(g.nvlinks_present and not g.nvlinks_active for g in gpus)
    matrix = parse_topo_matrix((shared_fixtures / "topo" / "4xL40S-NODE-SYS-2NICs-no-NVLink.txt").read_text())
    for verdict in (judge_nvlink_counts(gpus), judge_nvlink_counts(gpus, matrix if len(gpus) == 4 else None)):
        assert verdict.status is Status.SKIP, verdict.summary
        assert "without NVLink bridges" in verdict.summary and "--expect-nvlinks" in verdict.summary


def test_bridge_less_cards_when_bridges_are_expected_fail() -> None:
    verdict = judge_nvlink_counts(walk_fake("4x-a100-pcie-no-bridge").gpus, expected=12)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU0 has no active NVLink; GPU1") and "(expected 12)" in verdict.summary


def test_healthy_bridged_pairs_pass(shared_fixtures: Path) -> None:
    matrix = parse_topo_matrix((shared_fixtures / "topo" / A100_PAIRS).read_text())
    verdict = judge_nvlink_counts(walk_fake("4x-a100-pcie-bridged").gpus, matrix)
    assert verdict.status is Status.PASS and verdict.summary == "4 GPUs, 12 active NVLinks each (NVLink 3.0)"


def test_a_bridged_pair_with_one_link_down_fails_naming_both_ends() -> None:
    """NVML's remote PCI info of the active links names the peer, so the pair is known to be bridged."""
    gpus = walk_fake("4x-a100-pcie-bridged", nvlink_down={(0, 5)}).gpus
    reasons = [s.reason for s in nvlink_expectations(gpus)]
    assert reasons == ["bridged to GPU1", "bridged to GPU0", "bridged to GPU3", "bridged to GPU2"]
    verdict = judge_nvlink_counts(gpus)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert "GPU0 has 11 of 12 NVLinks active; GPU1 has 11 of 12 NVLinks active (peers have 12)" in verdict.summary


def test_a_dead_bridge_is_known_from_topo_m_only(shared_fixtures: Path) -> None:
    """With every link of a bridge down NVML has no far end to name; topo -m's NV12 says it was there."""
    gpus = walk_fake("4x-a100-pcie-bridged", nvlinks_missing={0}).gpus
    matrix = parse_topo_matrix((shared_fixtures / "topo" / A100_PAIRS).read_text())
    failed = judge_nvlink_counts(gpus, matrix)
    assert failed.status is Status.FAIL and failed.summary.startswith("GPU0 has no active NVLink; GPU1 has no")
    unknown = judge_nvlink_counts(gpus)
    assert unknown.status is Status.PASS and unknown.summary.endswith("GPU0-1 without a bridge")


def test_an_ncv5_bridge_with_six_links_unused_by_design_passes() -> None:
    """Azure/azurehpc-health-checks#162: 12 of the 18 links of an H100 NVL pair are wired."""
    verdict = judge_nvlink_counts(walk_fake("2x-h100-nvl-bridged").gpus)
    assert verdict.status is Status.PASS and verdict.summary == "2 GPUs, 12 active NVLinks each (NVLink 4.0)"


def test_a_v100_cube_mesh_passes() -> None:
    verdict = judge_nvlink_counts(walk_fake("8x-v100-sxm2").gpus)
    assert verdict.status is Status.PASS and "6 active NVLinks each (NVLink 2.0)" in verdict.summary


def test_a_lost_gpu_makes_the_nvlink_judge_an_error() -> None:
    verdict = judge_nvlink_counts(walk_fake("8x-h100-sxm", gpu_lost={2}).gpus)
    assert verdict.status is Status.ERROR and verdict.code == "NVLINK_QUERY_FAILED"
    assert "GPU2" in verdict.summary and "GPU is lost" in verdict.summary


@pytest.mark.parametrize(("name", "wired"), [
    ("NVIDIA H100 80GB HBM3", True), ("NVIDIA A100-SXM4-80GB", True), ("Tesla V100-SXM2-16GB", True),
    ("NVIDIA H200", True), ("NVIDIA B200", True), ("NVIDIA H100 PCIe", False), ("NVIDIA H100 NVL", False),
    ("NVIDIA A100 80GB PCIe", False), ("NVIDIA A100-PCIE-40GB", False), ("NVIDIA H200 NVL", False),
    ("NVIDIA L40S", False), ("NVIDIA RTX A6000", False),
])
def test_which_skus_wire_their_nvlinks_on_the_board(name: str, wired: bool) -> None:
    assert board_wires_nvlinks(name) is wired


def _pair(a: int, b: int, nvlink: bool | None, level: int | None) -> GpuPair:
    return GpuPair(a=a, b=b, nvlink_p2p=NOT_SUPPORTED if nvlink is None else (0 if nvlink else 5), read_p2p=0,
                   common_ancestor=NOT_SUPPORTED if level is None else level)


def test_cross_check_agreement_and_each_kind_of_disagreement() -> None:
    smi = _matrix("X NV12 SYS\nNV12 X SYS\nSYS SYS X")
    agree = [_pair(0, 1, True, 10), _pair(0, 2, False, 50), _pair(1, 2, False, 50)]
    assert judge_cross_check(smi, agree, 3).status is Status.PASS
    differ = [_pair(0, 1, False, 10), _pair(0, 2, True, 50), _pair(1, 2, False, 40)]
    verdict = judge_cross_check(smi, differ, 3)
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_SOURCES_DISAGREE"
    assert "GPU0-GPU1: nvidia-smi NV12, NVML NVLink P2P not available" in verdict.summary
    assert "GPU0-GPU2: nvidia-smi SYS, NVML NVLink P2P available" in verdict.summary
    assert "GPU1-GPU2: nvidia-smi SYS, NVML common PCIe ancestor NODE" in verdict.summary
    unknown = [_pair(0, 1, None, None)]
    assert judge_cross_check(smi, unknown, 3).status is Status.PASS
    assert "NVML counts 2" in judge_cross_check(smi, [], 2).summary


def test_cross_check_of_the_fakes_against_their_captures(shared_fixtures: Path) -> None:
    for profile, capture in (("4x-a100-pcie-bridged", A100_PAIRS), ("4x-a100-pcie-no-bridge", L40S_4),
                             ("8x-h100-sxm", H100_8)):
        snapshot = walk_fake(profile)
        matrix = parse_topo_matrix((shared_fixtures / "topo" / capture).read_text())
        verdict = judge_cross_check(matrix, snapshot.pairs, len(snapshot.gpus))
        assert verdict.status is Status.PASS, f"{profile}: {verdict.summary}"


def test_cross_check_with_a_failed_pair_query_is_an_error() -> None:
    snapshot = walk_fake("8x-h100-sxm", gpu_lost={2})
    verdict = judge_cross_check(_matrix("X NV18\nNV18 X"), snapshot.pairs, len(snapshot.gpus))
    assert verdict.status is Status.ERROR and "GPU is lost" in verdict.summary


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
