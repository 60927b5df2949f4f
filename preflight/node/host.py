"""The host the job runs on, each fact probed once through the run's transports.

Everything is read under the filesystem root (``/proc``, ``/sys``, ``/dev/shm``, ``/etc``), sized through
its ``statvfs``, asked through the command runner (``lspci``), taken from the environment the job
inherits or named by the transports' ``hostname``, so a test changes the machine only there
(tests/fakes/fake_host.py, tests/fakes/hostile_node.py).
"""

from __future__ import annotations

from functools import cached_property

from preflight.node.environment import JobEnvironment
from preflight.node.transports import Transports
from preflight.probe.host import (
    ContainerFacts,
    CpuMemoryFacts,
    DiskFacts,
    MemlockFacts,
    ShmFacts,
    allowed_cpus,
    limits_of,
    online_cpus,
    probe_container,
    probe_cpu_memory,
    probe_disk,
    probe_memlock,
    probe_shm,
)
from preflight.probe.host_pcie import PcieFacts, probe_pcie
from preflight.probe.host_processes import (
    DEFAULT_RENDEZVOUS_PORT,
    PortFacts,
    ProcessInfo,
    TrainingProcess,
    list_processes,
    probe_port,
    training_processes,
)
from preflight.probe.host_session import SessionFacts, probe_session
from preflight.probe.node import HostIdentity, probe_identity


class HostFacts:
    """The host's facts (its identity, shared memory, container, locked memory, CPUs and RAM, processes,
    session, the rendezvous port, IOMMU/ACS, disk), each probed on first use."""

    def __init__(self, transports: Transports, env: JobEnvironment) -> None:
        self.transports = transports
        self.env = env
        self.root = transports.root

    @cached_property
    def identity(self) -> HostIdentity:
        """Hostname, OS, kernel, CPU, memory and Python: the report's ``node`` headline."""
        return probe_identity(self.root, self.transports.hostname)

    @cached_property
    def container(self) -> ContainerFacts:
        """Are we in a container, which kind, and why we think so."""
        return probe_container(self.root, self.env)

    @cached_property
    def shm(self) -> ShmFacts:
        """Size and free space of /dev/shm."""
        facts = probe_shm(str(self.root / "dev/shm"), self.transports.statvfs)
        return ShmFacts("/dev/shm", facts.total_bytes, facts.free_bytes, facts.problem)

    @cached_property
    def memlock(self) -> MemlockFacts:
        """``ulimit -l`` (this process's ``/proc/self/limits``) and the RDMA devices present."""
        return probe_memlock(limits_of(self.root / "proc/self/limits"), self.root / "sys/class/infiniband")

    @cached_property
    def cpu_memory(self) -> CpuMemoryFacts:
        """CPUs and RAM this process may use, with cgroup limits."""
        return probe_cpu_memory(self.root, cpu_count=lambda: online_cpus(self.root),
                                affinity=lambda: allowed_cpus(self.root))

    @cached_property
    def processes(self) -> tuple[ProcessInfo, ...]:
        """Every process ``/proc`` lists, read once."""
        return tuple(list_processes(self.root))

    @cached_property
    def session(self) -> SessionFacts:
        """How this shell is attached: SSH, tmux/screen, nohup, scheduler."""
        return probe_session(env=self.env, processes=lambda: self.processes,
                             proc_root=self.root / "proc")

    @cached_property
    def leftovers(self) -> tuple[TrainingProcess, ...]:
        """Training-looking processes that are not ours."""
        return tuple(training_processes(self.processes))

    @cached_property
    def rendezvous_port(self) -> PortFacts:
        """Who listens on the default rendezvous port 29500."""
        return probe_port(DEFAULT_RENDEZVOUS_PORT, self.root / "proc/net")

    @cached_property
    def pcie(self) -> PcieFacts:
        """Kernel IOMMU parameters, IOMMU groups and lspci ACS state."""
        return probe_pcie(self.root, self.transports.run)

    def disk(self, path: str) -> DiskFacts:
        """Free space and writability of ``path`` (a real directory: the write test writes there)."""
        return probe_disk(path, self.transports.statvfs)
