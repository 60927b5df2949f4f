"""Test-only pytest plugin (``-p tests.fakes.fake_host``): the host checks see a made-up machine.

``PREFLIGHT_FAKE_HOST`` names the machine: ``healthy-8xh100`` (bare metal, tmux, everything
right) or ``troubled-docker`` (a container with every host problem at once). It never ships.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from preflight.parse.lspci_acs import AcsControl, AcsReport
from preflight.probe.gpu_memory import GpuMemory, GpuMemorySource
from preflight.probe.host import ContainerFacts, CpuMemoryFacts, DiskFacts, MemlockFacts, ShmFacts
from preflight.probe.host_pcie import PcieFacts, kernel_parameters
from preflight.probe.host_processes import PortFacts, ProcessInfo, TrainingProcess
from preflight.probe.host_session import SessionFacts

MiB, GiB, GB = 2**20, 2**30, 10**9
H100 = "NVIDIA H100 80GB HBM3"


def _healthy() -> dict[str, object]:
    return {
        "host_env": {"OMP_NUM_THREADS": "24", "NCCL_DEBUG": "WARN", "TMUX": "/tmp/tmux-1000/default,77,0"},
        "container_facts": ContainerFacts(False, None, ()),
        "shm_facts": ShmFacts("/dev/shm", 1024 * GiB, 1024 * GiB),
        "memlock_facts": MemlockFacts(None, None, ("mlx5_0", "mlx5_1")),
        "checkpoint_disk_facts": DiskFacts("/data/ckpt", True, "/data/ckpt", 10_000 * GB, 30_000 * GB, True),
        "cpu_memory_facts": CpuMemoryFacts(192, 192, None, 2048 * GiB, 2000 * GiB, None),
        "session_facts": SessionFacts({"SSH_CONNECTION": "x", "TMUX": "/tmp/t"},
                                      (ProcessInfo(70, 60, "bash", ("bash",)), ProcessInfo(60, 1, "tmux: server", ())),
                                      False, True),
        "leftover_processes": [],
        "rendezvous_port_facts": PortFacts(29500, "free"),
        "pcie_facts": PcieFacts("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt",
                                kernel_parameters("intel_iommu=on iommu=pt"), 120, None, "lspci: not found on PATH", ""),
        "gpu_memory": GpuMemorySource(tuple(GpuMemory(i, H100, 81559 * MiB, 1 * MiB) for i in range(8)), "fake"),
    }


def _troubled() -> dict[str, object]:
    bridge = AcsControl("40:01.1", "PCI bridge: AMD GPP Bridge", {"SrcValid": True, "ReqRedir": True, "CmpltRedir": True},
                        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-")
    cards = [GpuMemory(i, H100, 81559 * MiB, 1 * MiB) for i in range(8)]
    cards[3] = GpuMemory(3, H100, 81559 * MiB, 70 * GiB)
    leftover = ProcessInfo(4242, 1, "torchrun", ("/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"), "bob")
    return {
        "host_env": {"CUDA_LAUNCH_BLOCKING": "1", "NCCL_DEBUG": "INFO", "SSH_CONNECTION": "x"},
        "container_facts": ContainerFacts(True, "docker", ("/.dockerenv exists",)),
        "shm_facts": ShmFacts("/dev/shm", 64 * MiB, 64 * MiB),
        "memlock_facts": MemlockFacts(64 * 1024, 64 * 1024, ("mlx5_0",)),
        "checkpoint_disk_facts": DiskFacts("/workspace", True, "/workspace", 50 * GB, 100 * GB, True),
        "cpu_memory_facts": CpuMemoryFacts(8, 8, None, 32 * GiB, 30 * GiB, None),
        "session_facts": SessionFacts({"SSH_CONNECTION": "x"},
                                      (ProcessInfo(70, 60, "bash", ("bash",)), ProcessInfo(60, 1, "sshd", ())),
                                      False, True),
        "leftover_processes": [TrainingProcess(leftover, "torchrun launcher")],
        "rendezvous_port_facts": PortFacts(29500, "listening", (4242,), "0: 00000000:733C 00000000:0000 0A"),
        "pcie_facts": PcieFacts("BOOT_IMAGE=/vmlinuz amd_iommu=on", kernel_parameters("amd_iommu=on"), 60,
                                AcsReport(12, (bridge,), 0), None, f"{bridge.address} {bridge.description}\n    {bridge.line}"),
        "gpu_memory": GpuMemorySource(tuple(cards), "fake"),
    }


MACHINES = {"healthy-8xh100": _healthy, "troubled-docker": _troubled}


def _machine() -> dict[str, object]:
    name = os.environ.get("PREFLIGHT_FAKE_HOST", "healthy-8xh100")
    if name not in MACHINES:
        raise pytest.UsageError(f"PREFLIGHT_FAKE_HOST={name!r}: expected one of {', '.join(MACHINES)}")
    return MACHINES[name]()


class _FakeHost:
    @pytest.fixture(scope="session")
    @classmethod
    def host_env(cls) -> Mapping[str, str]:
        return _machine()["host_env"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def container_facts(cls) -> ContainerFacts:
        return _machine()["container_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def shm_facts(cls) -> ShmFacts:
        return _machine()["shm_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def memlock_facts(cls) -> MemlockFacts:
        return _machine()["memlock_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def checkpoint_disk_facts(cls) -> DiskFacts:
        return _machine()["checkpoint_disk_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def cpu_memory_facts(cls) -> CpuMemoryFacts:
        return _machine()["cpu_memory_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def session_facts(cls) -> SessionFacts:
        return _machine()["session_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def leftover_processes(cls) -> list[TrainingProcess]:
        return _machine()["leftover_processes"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def rendezvous_port_facts(cls) -> PortFacts:
        return _machine()["rendezvous_port_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def pcie_facts(cls) -> PcieFacts:
        return _machine()["pcie_facts"]  # type: ignore[return-value]

    @pytest.fixture(scope="session")
    @classmethod
    def gpu_memory(cls) -> GpuMemorySource:
        return _machine()["gpu_memory"]  # type: ignore[return-value]


def pytest_configure(config: pytest.Config) -> None:
    # Registered after preflight's plugin, so these fixture definitions win.
    config.pluginmanager.register(_FakeHost(), "preflight-test-fake-host")
