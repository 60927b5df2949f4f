"""How the GPUs are connected, whether every NVLink is up, and whether peer-to-peer copies work."""

from __future__ import annotations

import pytest

from preflight.judge.host_session import pcie_evidence
from preflight.judge.p2p_copies import judge_p2p_phase
from preflight.judge.topology import (
    LinkCost,
    judge_interconnect,
    judge_job_affinity,
    judge_nvlink_counts,
    judge_topology_sources,
)
from preflight.launch.outcome import PhaseResult
from preflight.node import Node
from preflight.node.fabric import JobTopology
from preflight.probe.host_pcie import PcieFacts
from preflight.recording import Recorder
from preflight.settings import Settings


def test_gpu_interconnect(record: Recorder, job_topology: JobTopology, link_cost_of_plan: LinkCost | None) -> None:
    """How are the GPUs linked, and what does that mean for FSDP/ZeRO-3?

    NVSwitch, NVLink pairs or PCIe."""
    record(judge_interconnect(job_topology, link_cost_of_plan))


def test_nvlinks_all_active(record: Recorder, job_topology: JobTopology, settings: Settings, node: Node) -> None:
    """Does every GPU have as many active NVLinks as its peers?"""
    record(judge_nvlink_counts(job_topology, settings.expect_nvlinks, node.cuda.driver.version))


def test_topology_sources_agree(record: Recorder, job_topology: JobTopology) -> None:
    """Do NVML and nvidia-smi topo -m describe the same links?"""
    record(judge_topology_sources(job_topology))


def test_gpu_cpu_affinity(record: Recorder, job_topology: JobTopology) -> None:
    """Which CPUs and NUMA node does each GPU sit next to?"""
    record(judge_job_affinity(job_topology))


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.rehearsal("p2p")
def test_p2p_copies(record: Recorder, p2p_launch: PhaseResult | None, job_topology: JobTopology, node: Node,
                    pcie_facts: PcieFacts) -> None:
    """Do peer-to-peer copies between every GPU pair arrive intact?"""
    record(judge_p2p_phase(p2p_launch, node.nvml.gpus, job_topology.smi_all, pcie_evidence(pcie_facts)))
