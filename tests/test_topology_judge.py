"""The topology judge on real captures and on matrices built to show one fault each."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.judge.busbw_reference import Expectation
from preflight.judge.topology import (
    classify,
    judge_affinity,
    judge_interconnect,
    judge_layout,
    judge_nvlink_balance,
    judge_nvlink_counts,
    judge_topology_sources,
    link_cost,
    nvlink_expectations,
)
from preflight.node.fabric import JobTopology, Layout, fabric_from, job_topology
from preflight.outcome import Status
from preflight.parse.topo import TopoMatrix, parse_topo_matrix
from preflight.probe.nvml import NOT_SUPPORTED
from preflight.probe.nvml_snapshot import GpuPair, NvmlSnapshot
from tests.fakes.nvml import walk_fake
from tests.fakes.nvml_profiles import PROFILES

A100_PAIRS = "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt"
L40S_4 = "4xL40S-NODE-SYS-2NICs-no-NVLink.txt"
H100_8 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"

# capture -> (layout, status without a plan, code with a link-bound plan (None: never WARNs), summary words)
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
        Layout.NVLINK_PAIRS, Status.PASS, "TOPOLOGY_NVLINK_PAIRS_ONLY",
        ["4 GPUs", "only within pairs (0-1, 2-3)", "across CPU sockets (SYS)", "PCIe speed"]),
    "8xA100-PCIe-NV12-bridge-pairs-NODE-SYS": (
        Layout.NVLINK_PAIRS, Status.PASS, "TOPOLOGY_NVLINK_PAIRS_ONLY", ["(0-1, 2-3, 4-5, 6-7)", "(SYS)"]),
    "4xA100-SXM4-40GB-NV12-NV10-pairs-NODE-trimmed": (
        Layout.NVLINK_PAIRS, Status.PASS, "TOPOLOGY_NVLINK_PAIRS_ONLY", ["one socket (NODE)"]),
    "4xL40S-NODE-SYS-2NICs-no-NVLink": (Layout.PCIE, Status.PASS, "TOPOLOGY_PCIE_ONLY", ["no NVLink", "(SYS)"]),
    "8xGPU-PCIe-PIX-PHB-SYS-no-NIC": (Layout.PCIE, Status.PASS, "TOPOLOGY_PCIE_ONLY", ["link-bound"]),
    "8xV100-SXM2-16GB-hybrid-cube-mesh-TABS-old-legend-wording-2019": (
        Layout.MIXED, Status.PASS, None, ["16 of 28 pairs over NVLink", "rings can stay on NVLink"]),
}


PCIE_GEN4 = Expectation(15.0, "PCIe Gen4 hosts reach ~15-25 GB/s busbw", "4x A100 PCIe over PCIe Gen4")
COST_4X = link_cost(params=7_000_000_000, bytes_per_param=2.0, recommended="fsdp", explicit=(), ranks=4,
                    expectation=PCIE_GEN4)


def topology(profile: str, job: list[int] | None = None, smi: TopoMatrix | None = None,
             **faults: object) -> JobTopology:
    """The job's topology on a fake machine as the node model builds it (the real binding over the fake)."""
    snapshot: NvmlSnapshot = walk_fake(profile, **faults)
    spec = PROFILES[profile]
    fabric = fabric_from(snapshot, len(spec.nvswitch_bus_ids) if spec.nvswitch_on_pci else 0)
    gpus = snapshot.gpus if job is None else tuple(snapshot.gpus[i] for i in job)
    return job_topology(fabric, gpus, snapshot.gpus, smi, no_gpu=snapshot.unavailable)


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
    assert (verdict.status, verdict.code) == (status, None)  # issue 24 item 4: a healthy layout costs nothing
    for word in words:
        assert word in verdict.summary
    if status is Status.PASS and code is not None:
        assert "training works either way" in verdict.summary
    (view,) = verdict.views
    assert view.kind == "matrix"
    assert view.data["cells"] == [list(row) for row in matrix.links]
    bound = judge_layout(matrix, COST_4X)
    assert (bound.status, bound.code) == ((Status.WARN, code) if code else (Status.PASS, None))
    if code:
        assert "about 2.100 s per step on the link" in bound.summary, bound.summary


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
    verdict = judge_layout(matrix, COST_4X)
    assert classify(matrix).layout is Layout.MIXED
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_RING_CROSSES_PCIE"
    assert "across CPU sockets (SYS)" in verdict.summary
    assert judge_layout(matrix).status is Status.PASS


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
    verdict = judge_nvlink_counts(topology("8x-h100-sxm", job=[0, 1, 2, 3]))
    assert verdict.status is Status.PASS and verdict.summary == "4 GPUs, 18 active NVLinks each (NVLink 4.0)"


def test_nvlink_counts_gpu_with_no_links_fails_naming_it() -> None:
    verdict = judge_nvlink_counts(topology("8x-h100-sxm", nvlinks_missing={3}))
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU3 has no active NVLink (peers have 18")


def test_nvlink_counts_gpu_with_fewer_links_fails_naming_each() -> None:
    down = {(1, 0), (1, 1), (3, 0), (3, 1), (3, 2), (3, 3)}
    verdict = judge_nvlink_counts(topology("8x-a100-sxm", job=[0, 1, 2, 3], nvlink_down=down))
    assert verdict.status is Status.FAIL
    assert "GPU1 has 10 of 12 NVLinks active" in verdict.summary
    assert "GPU3 has 8 of 12 NVLinks active" in verdict.summary
    assert "GPU0" not in verdict.summary and "GPU2" not in verdict.summary


def test_nvlink_counts_against_an_expectation() -> None:
    verdict = judge_nvlink_counts(topology("8x-a100-sxm", job=[0, 1]), expected=18)
    assert verdict.status is Status.FAIL and "(expected 18)" in verdict.summary


def test_nvlink_counts_no_nvlink_or_one_gpu_skips() -> None:
    """Issue 24 item 1: a 1-GPU job gets no topology warning."""
    assert judge_nvlink_counts(topology("8x-l40s")).status is Status.SKIP
    one = judge_nvlink_counts(topology("8x-h100-sxm", job=[0], nvlinks_missing={5}))
    assert one.status is Status.SKIP and "GPU5 has 0 of 18 NVLinks up; not used by this job" in one.summary


def test_a_fault_outside_the_job_is_a_fact_not_a_finding() -> None:
    """Issue 24 row 3: 8x H100, GPU5's links down, job on CUDA_VISIBLE_DEVICES=0,1,2,3."""
    verdict = judge_nvlink_counts(topology("8x-h100-sxm", job=[0, 1, 2, 3], nvlinks_missing={5}))
    assert verdict.status is Status.PASS
    assert verdict.summary == ("4 GPUs, 18 active NVLinks each (NVLink 4.0); GPU5 has 0 of 18 NVLinks up; not used "
                               "by this job")


def test_an_nvswitch_node_with_every_link_down_fails() -> None:
    """The links reach NVSwitches (remote device type) on a fabric board: all down is not a missing bridge."""
    verdict = judge_nvlink_counts(topology("8x-a100-sxm", nvlinks_missing=set(range(8))))
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_ALL_DOWN"
    assert "NVSwitch(es) on the PCI bus" in verdict.summary


@pytest.mark.parametrize("profile", ["8x-h800-hgx", "8x-h20-hgx", "8x-h200-hgx", "8x-b200-hgx", "8x-unknown-nvswitch"])
def test_gpu3_down_on_any_nvswitch_board_fails_naming_it(profile: str) -> None:
    """Issue 24 row 2 and item 2: the fabric decides, not the name ('NVIDIA H800' has no 'SXM')."""
    verdict = judge_nvlink_counts(topology(profile, nvlinks_missing={3}))
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU3 has no active NVLink") and "GPU0" not in verdict.summary


@pytest.mark.parametrize("profile", ["8x-h800-hgx", "8x-h20-hgx", "8x-h200-hgx", "8x-b200-hgx", "8x-unknown-nvswitch"])
def test_fabric_manager_down_is_not_ready_with_the_fix(profile: str) -> None:
    """Issue 24 row 1: fabric state In Progress (FM guide via siderolabs/extensions#717; NVIDIA/NVSentinel#889)."""
    topo = topology(profile, fabric_manager_down=True)
    verdict = judge_nvlink_counts(topo, driver="525.105.17")
    assert verdict.status is Status.FAIL and verdict.code == "FABRIC_NOT_READY"
    assert "fabric registration In Progress" in verdict.summary
    assert "systemctl status nvidia-fabricmanager" in (verdict.remediation or "")
    assert "driver 525.105.17" in (verdict.remediation or "")
    for other in (judge_interconnect(topo), judge_topology_sources(topo)):
        assert other.status is Status.SKIP and "fabric is not up" in other.summary  # one failure, one finding


def test_a_fabric_fault_outside_the_job_is_a_fact() -> None:
    snapshot = walk_fake("8x-h100-sxm")
    down = walk_fake("8x-h100-sxm", fabric_manager_down=True)
    gpus = snapshot.gpus[:4] + down.gpus[4:]  # the second half's fabric never registered
    mixed = NvmlSnapshot(label="fake", driver_version="550.54.15", gpus=gpus, pairs=snapshot.pairs)
    topo = job_topology(fabric_from(mixed, 4), gpus[:4], gpus, None)
    verdict = judge_nvlink_counts(topo)
    assert verdict.status is Status.PASS
    assert "GPU4: fabric registration In Progress; not used by this job" in verdict.summary


@pytest.mark.parametrize("profile", ["4x-a100-pcie-no-bridge", "2x-h100-pcie-no-bridge", "2x-mixed-a6000-h100"])
def test_bridge_less_nvlink_capable_pcie_cards_are_not_a_finding(profile: str, shared_fixtures: Path) -> None:
    """Issue 14 item 1: NVML lists every link of an A100/H100 PCIe card, each inactive, without a
    bridge (NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49). That is a PCIe node, not NOT READY."""
    topo = topology(profile)
    assert any(g.listed and not g.up for g in topo.fabric.gpus)
    matrix = parse_topo_matrix((shared_fixtures / "topo" / "4xL40S-NODE-SYS-2NICs-no-NVLink.txt").read_text())
    for verdict in (judge_nvlink_counts(topo),
                    judge_nvlink_counts(topology(profile, smi=matrix if len(topo.job) == 4 else None))):
        assert verdict.status is Status.SKIP, verdict.summary
        assert "without NVLink bridges" in verdict.summary and "--expect-nvlinks" in verdict.summary


def test_bridge_less_cards_when_bridges_are_expected_fail() -> None:
    verdict = judge_nvlink_counts(topology("4x-a100-pcie-no-bridge"), expected=12)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert verdict.summary.startswith("GPU0 has no active NVLink; GPU1") and "(expected 12)" in verdict.summary


def test_healthy_bridged_pairs_pass(shared_fixtures: Path) -> None:
    matrix = parse_topo_matrix((shared_fixtures / "topo" / A100_PAIRS).read_text())
    verdict = judge_nvlink_counts(topology("4x-a100-pcie-bridged", smi=matrix))
    assert verdict.status is Status.PASS and verdict.summary == "4 GPUs, 12 active NVLinks each (NVLink 3.0)"


def test_a_bridged_pair_with_one_link_down_fails_naming_both_ends() -> None:
    """NVML's remote device type and PCI info of the active links name the peer GPU: the pair is bridged."""
    topo = topology("4x-a100-pcie-bridged", nvlink_down={(0, 5)})
    reasons = [s.reason for s in nvlink_expectations(topo, topo.job)]
    assert reasons == ["bridged to GPU1", "bridged to GPU0", "bridged to GPU3", "bridged to GPU2"]
    verdict = judge_nvlink_counts(topo)
    assert verdict.status is Status.FAIL and verdict.code == "NVLINK_LINKS_MISSING"
    assert "GPU0 has 11 of 12 NVLinks active; GPU1 has 11 of 12 NVLinks active (peers have 12" in verdict.summary


def test_a_dead_bridge_is_known_from_topo_m_only(shared_fixtures: Path) -> None:
    """With every link of a bridge down NVML has no far end to name; topo -m's NV12 says it was there."""
    matrix = parse_topo_matrix((shared_fixtures / "topo" / A100_PAIRS).read_text())
    failed = judge_nvlink_counts(topology("4x-a100-pcie-bridged", smi=matrix, nvlinks_missing={0}))
    assert failed.status is Status.FAIL and failed.summary.startswith("GPU0 has no active NVLink; GPU1 has no")
    unknown = judge_nvlink_counts(topology("4x-a100-pcie-bridged", nvlinks_missing={0}))
    assert unknown.status is Status.PASS and unknown.summary.endswith("GPU0-1 without a bridge")


def test_an_ncv5_bridge_with_six_links_unused_by_design_passes() -> None:
    """Azure/azurehpc-health-checks#162: 12 of the 18 links of an H100 NVL pair are wired."""
    verdict = judge_nvlink_counts(topology("2x-h100-nvl-bridged"))
    assert verdict.status is Status.PASS and verdict.summary == "2 GPUs, 12 active NVLinks each (NVLink 4.0)"


def test_a_v100_cube_mesh_passes() -> None:
    """Driver 418 lacks the remote device type (R470): the remote PCI bus ids name the peers."""
    verdict = judge_nvlink_counts(topology("8x-v100-sxm2"))
    assert verdict.status is Status.PASS and "6 active NVLinks each (NVLink 2.0)" in verdict.summary


def test_a_lost_gpu_is_left_out_and_named() -> None:
    verdict = judge_nvlink_counts(topology("8x-h100-sxm", gpu_lost={2}))
    assert verdict.status is Status.PASS and "7 GPUs, 18 active NVLinks each" in verdict.summary
    assert "GPU 2 is lost" in verdict.summary


def _pair(a: int, b: int, nvlink: bool | None, level: int | None) -> GpuPair:
    return GpuPair(a=a, b=b, nvlink_p2p=NOT_SUPPORTED if nvlink is None else (0 if nvlink else 5), read_p2p=0,
                   common_ancestor=NOT_SUPPORTED if level is None else level)


def _sources(smi: TopoMatrix, pairs: list[GpuPair], gpus: int = 3) -> JobTopology:
    snapshot = walk_fake("8x-l40s")
    listed = NvmlSnapshot(label="fake", gpus=snapshot.gpus[:gpus], pairs=tuple(pairs))
    return job_topology(fabric_from(listed), listed.gpus, listed.gpus, smi)


def test_cross_check_agreement_and_each_kind_of_disagreement() -> None:
    smi = _matrix("X NV12 SYS\nNV12 X SYS\nSYS SYS X")
    agree = [_pair(0, 1, True, 10), _pair(0, 2, False, 50), _pair(1, 2, False, 50)]
    assert judge_topology_sources(_sources(smi, agree)).status is Status.PASS
    differ = [_pair(0, 1, False, 10), _pair(0, 2, True, 50), _pair(1, 2, False, 40)]
    verdict = judge_topology_sources(_sources(smi, differ))
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_SOURCES_DISAGREE"
    assert "GPU0-GPU1: nvidia-smi NV12, NVML NVLink P2P not available" in verdict.summary
    assert "GPU0-GPU2: nvidia-smi SYS, NVML NVLink P2P available" in verdict.summary
    assert "GPU1-GPU2: nvidia-smi SYS, NVML common PCIe ancestor NODE" in verdict.summary
    unknown = [_pair(0, 1, None, None)]
    assert judge_topology_sources(_sources(smi, unknown)).status is Status.PASS
    assert "NVML counts 2" in judge_topology_sources(_sources(smi, [], gpus=2)).summary


def test_cross_check_of_the_fakes_against_their_captures(shared_fixtures: Path) -> None:
    for profile, capture in (("4x-a100-pcie-bridged", A100_PAIRS), ("4x-a100-pcie-no-bridge", L40S_4),
                             ("8x-h100-sxm", H100_8)):
        matrix = parse_topo_matrix((shared_fixtures / "topo" / capture).read_text())
        verdict = judge_topology_sources(topology(profile, smi=matrix))
        assert verdict.status is Status.PASS, f"{profile}: {verdict.summary}"


def test_cross_check_skips_a_lost_gpu(shared_fixtures: Path) -> None:
    matrix = parse_topo_matrix((shared_fixtures / "topo" / H100_8).read_text())
    verdict = judge_topology_sources(topology("8x-h100-sxm", smi=matrix, gpu_lost={2}))
    assert verdict.status is Status.SKIP and "GPU 2 is lost" in verdict.summary


def test_cross_check_judges_the_jobs_pairs_only(shared_fixtures: Path) -> None:
    matrix = parse_topo_matrix((shared_fixtures / "topo" / H100_8).read_text())
    verdict = judge_topology_sources(topology("8x-h100-sxm", job=[0, 1, 2, 3], smi=matrix, nvlinks_missing={5}))
    assert verdict.status is Status.PASS and "all 6 GPU pairs of the job" in verdict.summary
    assert "pair(s) outside the job differ" in verdict.summary


# -- the interconnect of the job -------------------------------------------------------------------


@pytest.mark.parametrize(("profile", "layout"), [
    ("2x-l4", Layout.PCIE), ("4x-a100-pcie-no-bridge", Layout.PCIE), ("4x-h100-nvl-bridged-pairs", Layout.NVLINK_PAIRS),
    ("8x-h800-hgx", Layout.NVSWITCH), ("8x-h20-hgx", Layout.NVSWITCH), ("8x-h200-hgx", Layout.NVSWITCH),
    ("8x-b200-hgx", Layout.NVSWITCH), ("8x-unknown-nvswitch", Layout.NVSWITCH), ("2x-h100-nvl-bridged", Layout.NVLINK_ALL),
])
def test_healthy_layouts_are_a_pass_without_a_plan(profile: str, layout: Layout) -> None:
    """Issue 24 item 4 and its done-when: PCIe-only, NVLink-pair and NVSwitch nodes are READY with no plan."""
    topo = topology(profile)
    assert topo.layout is layout
    verdict = judge_interconnect(topo)
    assert verdict.status is Status.PASS and verdict.code is None, verdict.summary


def test_a_link_bound_plan_on_pcie_costs_seconds_per_step() -> None:
    topo = topology("4x-a100-pcie-no-bridge")
    verdict = judge_interconnect(topo, COST_4X)
    assert verdict.status is Status.WARN and verdict.code == "TOPOLOGY_PCIE_ONLY"
    assert "7.0B parameters fit only sharded (FSDP)" in verdict.summary
    assert "about 2.100 s per step on the link at 15 GB/s busbw" in verdict.summary
    assert any(m.name == "link_seconds_per_step" and m.value == 2.1 for m in verdict.metrics)
    assert judge_interconnect(topology("8x-h100-sxm"), COST_4X).status is Status.PASS  # NVSwitch: no cost to name


def test_no_link_bound_plan_without_sharding() -> None:
    assert link_cost(params=1_000_000_000, bytes_per_param=2.0, recommended="ddp", explicit=(), ranks=4,
                     expectation=PCIE_GEN4) is None
    assert link_cost(params=None, bytes_per_param=2.0, recommended="fsdp", explicit=(), ranks=4,
                     expectation=PCIE_GEN4) is None
    explicit = link_cost(params=1_000_000_000, bytes_per_param=2.0, recommended="ddp", explicit=("zero3",), ranks=2,
                         expectation=PCIE_GEN4)
    assert explicit is not None and explicit.model.strategy == "zero3"


def test_a_one_gpu_job_gets_no_topology_warning() -> None:
    verdict = judge_interconnect(topology("8x-h100-sxm", job=[2]), COST_4X)
    assert verdict.status is Status.PASS and verdict.summary.startswith("1 GPU in the job: no GPU-to-GPU traffic")


def test_the_job_layout_is_judged_on_the_jobs_gpus() -> None:
    """Two GPUs of one bridged pair are a bridged pair, whatever the other pair does."""
    topo = topology("4x-h100-nvl-bridged-pairs", job=[2, 3], nvlinks_missing={0})
    assert topo.layout is Layout.NVLINK_ALL
    verdict = judge_interconnect(topo)
    assert verdict.status is Status.PASS and "2 GPUs joined by NVLink (NV12)" in verdict.summary
    assert "GPU0-1 not used by this job" in verdict.summary


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
