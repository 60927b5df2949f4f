"""How the GPUs are connected, whether every NVLink is up, and whether peer-to-peer copies work."""

from __future__ import annotations

import pytest

from preflight.judge.p2p import judge_p2p, judge_p2p_launch
from preflight.judge.topology import judge_affinity, judge_cross_check, judge_layout, judge_nvlink_counts
from preflight.outcome import Verdict, error, skip
from preflight.probe.topology import NvmlTopology, SmiTopology


def _no_matrix(smi: SmiTopology, nvml: NvmlTopology) -> Verdict:
    """SKIP on a node without GPUs; ERROR when GPUs are there but the matrix could not be read."""
    if smi.missing:
        return skip(f"no NVIDIA GPU visible: {smi.problem}")
    if not nvml.started:
        return skip(f"no NVIDIA GPU visible: {smi.problem}; {nvml.error}")
    if nvml.gpu_count == 0:
        return skip(f"no NVIDIA GPU visible: NVML lists no GPU ({smi.problem})")
    evidence = {"nvidia-smi topo -m": smi.raw} if smi.raw else {}
    return error(f"GPUs are present but the topology could not be read: {smi.problem}", code="TOPOLOGY_UNREADABLE",
                 evidence=evidence)


def test_gpu_interconnect(record, smi_topology, nvml_topology):
    """How the GPUs are linked (NVSwitch, NVLink pairs, PCIe) and what that means for FSDP/ZeRO-3"""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, nvml_topology))
        return
    record(judge_layout(smi_topology.matrix).with_extra(evidence={"nvidia-smi topo -m": smi_topology.raw}))


def test_nvlinks_all_active(record, nvml_topology, settings):
    """Every GPU has as many active NVLinks as its peers"""
    if not nvml_topology.started or nvml_topology.gpu_count == 0:
        record(skip(f"no NVIDIA GPU visible: {nvml_topology.error or 'NVML lists no GPU'}"))
    elif nvml_topology.error and len(nvml_topology.nvlinks) < nvml_topology.gpu_count:
        record(error(f"NVML NVLink query failed: {nvml_topology.error}", code="NVLINK_QUERY_FAILED"))
    else:
        record(judge_nvlink_counts(nvml_topology.nvlinks, expected=settings.option("expect_nvlinks")))


def test_topology_sources_agree(record, smi_topology, nvml_topology):
    """NVML and nvidia-smi topo -m describe the same links"""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, nvml_topology))
    elif not nvml_topology.started:
        record(skip(f"NVML not available to cross-check: {nvml_topology.error}"))
    elif nvml_topology.error:
        record(error(f"NVML pair query failed: {nvml_topology.error}", code="NVLINK_QUERY_FAILED"))
    else:
        record(judge_cross_check(smi_topology.matrix, nvml_topology.pairs, nvml_topology.gpu_count))


def test_gpu_cpu_affinity(record, smi_topology, nvml_topology):
    """Which CPUs and NUMA node each GPU sits next to"""
    if smi_topology.matrix is None:
        record(_no_matrix(smi_topology, nvml_topology))
        return
    record(judge_affinity(smi_topology.matrix))


@pytest.mark.gpu
@pytest.mark.distributed
def test_p2p_copies(record, p2p_launch, smi_topology, nvml_topology):
    """Peer-to-peer copies between every GPU pair arrive intact"""
    if p2p_launch is None:
        record(skip("no NVIDIA GPU pair visible to CUDA: peer-to-peer copies need at least 2 GPUs"))
        return
    failed = judge_p2p_launch(p2p_launch)
    if failed is not None:
        record(failed)
        return
    result = (p2p_launch.ranks[0].result or {}).get("result", {})
    by_bus = {bus: f"GPU{index}" for index, bus in enumerate(nvml_topology.bus_ids)}
    names = {d["index"]: by_bus[d["pci_bus_id"]] for d in result.get("devices", []) if d.get("pci_bus_id") in by_bus}
    record(judge_p2p(result, names=names, matrix=smi_topology.matrix))
