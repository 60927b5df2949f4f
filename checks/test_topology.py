"""How the GPUs are connected, whether every NVLink is up, and whether peer-to-peer copies work."""

from __future__ import annotations

import pytest

from preflight.judge.gpus import no_gpu_reason
from preflight.judge.host_session import pcie_evidence
from preflight.judge.p2p import judge_p2p, judge_p2p_launch
from preflight.judge.topology import judge_affinity, judge_cross_check, judge_layout, judge_nvlink_counts
from preflight.launch.outcome import PhaseResult
from preflight.outcome import Status, Verdict, error, skip
from preflight.probe.host_pcie import PcieFacts
from preflight.probe.nvml_snapshot import NvmlSnapshot
from preflight.probe.topology import SmiTopology
from preflight.recording import Recorder
from preflight.settings import Settings


def _no_matrix(smi: SmiTopology, inventory: NvmlSnapshot) -> Verdict:
    """SKIP on a node without GPUs or without nvidia-smi; ERROR when the GPUs' matrix cannot be read."""
    reason = no_gpu_reason(inventory)
    if reason is not None:
        return skip(reason)
    if smi.missing:
        return skip(f"{smi.problem}: no topology matrix (NVML sees {len(inventory.gpus)} GPUs)")
    evidence = {"nvidia-smi topo -m": smi.raw} if smi.raw else {}
    return error(f"GPUs are present but the topology could not be read: {smi.problem}", code="TOPOLOGY_UNREADABLE",
                 evidence=evidence)


def test_gpu_interconnect(record: Recorder, smi_topology: SmiTopology, gpu_inventory: NvmlSnapshot) -> None:
    """How are the GPUs linked, and what does that mean for FSDP/ZeRO-3?

    NVSwitch, NVLink pairs or PCIe."""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, gpu_inventory))
        return
    record(judge_layout(smi_topology.matrix).with_extra(evidence={"nvidia-smi topo -m": smi_topology.raw}))


def test_nvlinks_all_active(
    record: Recorder, smi_topology: SmiTopology, gpu_inventory: NvmlSnapshot, settings: Settings
) -> None:
    """Does every GPU have as many active NVLinks as its peers?"""
    reason = no_gpu_reason(gpu_inventory)
    expected = settings.option("expect_nvlinks")
    record(skip(reason) if reason else judge_nvlink_counts(gpu_inventory.gpus, smi_topology.matrix, expected))


def test_topology_sources_agree(record: Recorder, smi_topology: SmiTopology, gpu_inventory: NvmlSnapshot) -> None:
    """Do NVML and nvidia-smi topo -m describe the same links?"""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, gpu_inventory))
    elif gpu_inventory.error is not None:
        record(skip(f"NVML not available to cross-check: {gpu_inventory.error.cause}"))
    else:
        record(judge_cross_check(smi_topology.matrix, gpu_inventory.pairs, len(gpu_inventory.gpus)))


def test_gpu_cpu_affinity(record: Recorder, smi_topology: SmiTopology, gpu_inventory: NvmlSnapshot) -> None:
    """Which CPUs and NUMA node does each GPU sit next to?"""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, gpu_inventory))
        return
    record(judge_affinity(smi_topology.matrix))


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.rehearsal("p2p")
def test_p2p_copies(
    record: Recorder, p2p_launch: PhaseResult | None, smi_topology: SmiTopology, gpu_inventory: NvmlSnapshot,
    pcie_facts: PcieFacts,
) -> None:
    """Do peer-to-peer copies between every GPU pair arrive intact?"""
    if p2p_launch is None:
        record(skip("no NVIDIA GPU pair visible to CUDA: peer-to-peer copies need at least 2 GPUs"))
        return
    verdict = judge_p2p_launch(p2p_launch)
    if verdict is None:
        result = (p2p_launch.ranks[0].result or {}).get("result", {})
        by_bus = {g.pci_bus_id: f"GPU{g.index}" for g in gpu_inventory.gpus if isinstance(g.pci_bus_id, str)}
        devices = [d for d in result.get("devices", []) if d.get("pci_bus_id") in by_bus]
        names = {d["index"]: by_bus[d["pci_bus_id"]] for d in devices}
        verdict = judge_p2p(result, names=names, matrix=smi_topology.matrix)
    if verdict.status in (Status.FAIL, Status.WARN):
        verdict = verdict.with_extra(evidence=pcie_evidence(pcie_facts))
    record(verdict)
