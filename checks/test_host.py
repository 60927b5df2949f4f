"""Will the node keep a long job alive: shared memory, locked memory, disk, session, leftovers, environment."""

from __future__ import annotations

from collections.abc import Mapping

from preflight.judge.host import judge_checkpoint_disk, judge_cpu_memory, judge_memlock, judge_shm
from preflight.judge.host_session import (
    default_port_user,
    judge_environment_per_rank,
    judge_leftover_processes,
    judge_pcie_evidence,
    judge_rendezvous_port,
    judge_session,
)
from preflight.parse.launch_command import LaunchCommand
from preflight.probe.host import ContainerFacts, CpuMemoryFacts, DiskFacts, MemlockFacts, ShmFacts
from preflight.probe.host_pcie import PcieFacts
from preflight.probe.host_processes import PortFacts, TrainingProcess
from preflight.probe.host_session import SessionFacts
from preflight.recording import Recorder
from preflight.node import Node


def test_shared_memory(record: Recorder, shm_facts: ShmFacts, container_facts: ContainerFacts) -> None:
    """Is /dev/shm large enough for NCCL and DataLoader workers?"""
    record(judge_shm(shm_facts, container_facts))


def test_locked_memory_limit(record: Recorder, memlock_facts: MemlockFacts, container_facts: ContainerFacts) -> None:
    """Does the locked-memory limit (ulimit -l) allow RDMA registration?"""
    record(judge_memlock(memlock_facts, container_facts))


def test_checkpoint_disk(record: Recorder, checkpoint_disk_facts: DiskFacts, checkpoint_size: int | None) -> None:
    """Is the checkpoint directory writable, with room for checkpoints?"""
    record(judge_checkpoint_disk(checkpoint_disk_facts, checkpoint_size))


def test_session_survives_disconnect(record: Recorder, session_facts: SessionFacts) -> None:
    """Does a job started from this shell survive a dropped SSH connection?"""
    record(judge_session(session_facts))


def test_no_leftover_training_processes(record: Recorder, leftover_processes: list[TrainingProcess]) -> None:
    """Is the node free of earlier training runs?"""
    record(judge_leftover_processes(leftover_processes))


def test_rendezvous_port_free(
    record: Recorder,
    rendezvous_port_facts: PortFacts,
    host_env: Mapping[str, str],
    launch_command: LaunchCommand | None,
) -> None:
    """Is the default rendezvous port 29500 free for the job?

    Or the job does not use it."""
    user = default_port_user(rendezvous_port_facts.port, host_env, launch_command)
    record(judge_rendezvous_port(rendezvous_port_facts, user))


def test_environment_hygiene(
    record: Recorder, host_env: Mapping[str, str], node: Node, cpu_memory_facts: CpuMemoryFacts
) -> None:
    """Is the environment free of variables that slow or break the job?"""
    record(judge_environment_per_rank(host_env, node.job.ranks, cpu_memory_facts))


def test_cpu_and_ram_per_rank(record: Recorder, cpu_memory_facts: CpuMemoryFacts, node: Node) -> None:
    """Are there enough CPU cores and host RAM per rank for data loading?"""
    record(judge_cpu_memory(cpu_memory_facts, node.job.ranks).with_extra(evidence={"ranks": node.job.source}))


def test_iommu_and_acs(record: Recorder, pcie_facts: PcieFacts) -> None:
    """How are IOMMU and PCIe ACS set?

    Evidence for peer-to-peer problems."""
    record(judge_pcie_evidence(pcie_facts))
