"""How the node's GPUs are linked, from what the driver reports, never from a GPU's name.

Per GPU (:class:`GpuLinks`): the NVLinks NVML lists, how many are up, where each active link goes
(``nvmlDeviceGetNvLinkRemoteDeviceType``: a GPU, an NVSwitch; its remote PCI bus id names the peer
GPU), and its NVSwitch fabric registration (``nvmlDeviceGetGpuFabricInfo[V]``: state and status, on
Hopper and newer). Per node (:class:`Fabric`): the NVSwitches the kernel lists on the PCI bus
(:mod:`preflight.probe.pci`), which GPUs' links should be up and why, and the layout of any set of
GPUs (the job's, in CUDA order). What the driver cannot say stays "not known": a link's far end on a
driver before R470 is read from its PCI bus id alone, a GPU without fabric registration is judged by
its links.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from preflight.parse.topo import TopologyParseError, TopoMatrix
from preflight.probe.nvml import (
    FABRIC_COMPLETED,
    FABRIC_IN_PROGRESS,
    FABRIC_NOT_STARTED,
    NVLINK_REMOTE_GPU,
    NVLINK_REMOTE_SWITCH,
    Absent,
    FabricInfo,
)
from preflight.probe.nvml_snapshot import GpuInfo, GpuPair, NvmlSnapshot


class Layout(str, enum.Enum):
    """How a set of GPUs is connected."""

    SINGLE = "single-gpu"
    NVSWITCH = "nvswitch"
    NVLINK_ALL = "nvlink-all-pairs"
    NVLINK_PAIRS = "nvlink-pairs"
    MIXED = "mixed"
    PCIE = "pcie-only"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """One GPU's NVLinks as NVML reports them, and its fabric registration."""

    index: int
    device_id: str | None  # ``10de:2324``: GPUs of one model on one board are wired alike
    listed: int  # links NVML lists, up or down
    up: int
    to_switch: int  # active links whose far end is an NVSwitch
    peers: Mapping[int, int] = field(default_factory=dict)  # peer GPU (NVML index) -> active links to it
    version: int | None = None  # NVML_NVLINK_VERSION_* of the active links (None: none up, or mixed)
    fabric: FabricInfo | Absent = Absent.NOT_SUPPORTED
    lost: bool = False
    query_error: str | None = None  # the NVLink query failed (a lost GPU: see ``lost``)

    @property
    def fabric_member(self) -> bool:
        """True when the GPU is registered (or registering) with an NVSwitch fabric manager."""
        return isinstance(self.fabric, FabricInfo) and self.fabric.member


def gpu_links(gpu: GpuInfo, by_bus: Mapping[str, int]) -> GpuLinks:
    """Count ``gpu``'s links by where they go. The remote device type decides; a driver without it
    (before R470) leaves the remote PCI bus id: a GPU of this node is a peer, anything else a switch."""
    if isinstance(gpu.nvlinks, Absent):
        return GpuLinks(gpu.index, gpu.device_id, 0, 0, 0, fabric=gpu.fabric, lost=gpu.gpu_lost,
                        query_error=gpu.query_errors.get("nvlinks", str(gpu.nvlinks)))
    peers: dict[int, int] = {}
    to_switch = 0
    versions: set[int] = set()
    for link in gpu.nvlinks:
        if not link.active:
            continue
        if isinstance(link.version, int):
            versions.add(link.version)
        bus = link.remote_bus_id if isinstance(link.remote_bus_id, str) else None
        peer = by_bus.get(bus.upper()) if bus else None
        kind = link.remote_type if isinstance(link.remote_type, int) else None
        if kind == NVLINK_REMOTE_SWITCH or (kind is None and bus is not None and peer is None):
            to_switch += 1
        elif peer is not None and peer != gpu.index and kind in (None, NVLINK_REMOTE_GPU):
            peers[peer] = peers.get(peer, 0) + 1
    return GpuLinks(gpu.index, gpu.device_id, len(gpu.nvlinks), gpu.nvlinks_active, to_switch, peers,
                    next(iter(versions)) if len(versions) == 1 else None, gpu.fabric, gpu.gpu_lost)


@dataclass(frozen=True, slots=True)
class Fabric:
    """The node's GPU links (every GPU NVML lists) and NVSwitches; questions about any set of GPUs."""

    gpus: tuple[GpuLinks, ...]
    pairs: tuple[GpuPair, ...] = ()
    nvswitches_on_pci: int = 0

    def gpu(self, index: int) -> GpuLinks | None:
        """The GPU at NVML ``index``."""
        return next((g for g in self.gpus if g.index == index), None)

    def pair(self, a: int, b: int) -> GpuPair | None:
        """NVML's facts of the pair ``{a, b}``."""
        low, high = min(a, b), max(a, b)
        return next((p for p in self.pairs if (p.a, p.b) == (low, high)), None)

    @property
    def switched(self) -> bool:
        """True on an NVSwitch board: a link reaches a switch, a GPU has a fabric, or the bus lists switches."""
        return self.nvswitches_on_pci > 0 or any(g.to_switch or g.fabric_member for g in self.gpus)

    def expectation(self, index: int) -> str | None:
        """Why the GPU's NVLinks should be up, or None when nothing NVML or the bus says wires them (a
        PCIe card without a bridge lists its links, all inactive: NVIDIA/NVSentinel#1481)."""
        gpu = self.gpu(index)
        if gpu is None or not gpu.listed:
            return None
        if gpu.fabric_member:
            assert isinstance(gpu.fabric, FabricInfo)
            return f"it is registered with an NVSwitch fabric (fabric state {gpu.fabric.state_name})"
        if gpu.to_switch:
            return "its links reach NVSwitches"
        bridged = sorted(set(gpu.peers) | {g.index for g in self.gpus if index in g.peers})
        if bridged:
            return "bridged to " + ", ".join(f"GPU{p}" for p in bridged)
        same = [g.index for g in self.gpus if g.to_switch and gpu.device_id and g.device_id == gpu.device_id]
        if same:
            return f"GPUs of the same model on this board reach NVSwitches (GPU{same[0]})"
        if self.nvswitches_on_pci:
            return f"{self.nvswitches_on_pci} NVSwitch(es) on the PCI bus"
        return None

    def fabric_problem(self, index: int) -> str | None:
        """What is wrong with the GPU's fabric registration, None when it is up or the GPU has none."""
        gpu = self.gpu(index)
        if gpu is None or not isinstance(gpu.fabric, FabricInfo) or not gpu.fabric.member or gpu.fabric.up:
            return None
        state = gpu.fabric.state
        if state == FABRIC_NOT_STARTED:
            return "fabric registration Not Started"
        if state == FABRIC_IN_PROGRESS:
            return "fabric registration In Progress"
        if state == FABRIC_COMPLETED:
            return f"fabric registration Completed with error {gpu.fabric.status} (nvmlReturn_t)"
        return f"fabric state {gpu.fabric.state}"

    def link_code(self, a: int, b: int) -> str | None:
        """The pair's link as ``nvidia-smi topo -m`` writes it (``NV12``, ``PIX`` ... ``SYS``), from NVML;
        None when NVML cannot tell (a lost GPU, a failed query)."""
        first, second = self.gpu(a), self.gpu(b)
        if first is None or second is None or first.lost or second.lost:
            return None
        if first.peers.get(b):
            return f"NV{first.peers[b]}"
        if first.to_switch and second.to_switch:
            return f"NV{min(first.to_switch, second.to_switch)}"  # topo -m shows each GPU's full count (NV18)
        pair = self.pair(a, b)
        if pair is None:
            return None
        if pair.nvlink and min(first.up, second.up):
            return f"NV{min(first.up, second.up)}"
        return pair.pcie_level

    def layout(self, indices: Sequence[int]) -> Layout:
        """How the GPUs at ``indices`` are connected to each other (UNKNOWN when a pair is not known)."""
        if len(indices) < 2:
            return Layout.SINGLE
        codes = {(a, b): self.link_code(a, b) for n, a in enumerate(indices) for b in indices[n + 1:]}
        nvlink = [pair for pair, code in codes.items() if code is not None and code.startswith("NV")]
        if len(nvlink) == len(codes):
            gpus = [self.gpu(i) for i in indices]
            return Layout.NVSWITCH if all(g is not None and g.to_switch for g in gpus) else Layout.NVLINK_ALL
        if any(code is None for code in codes.values()):
            return Layout.UNKNOWN
        if not nvlink:
            return Layout.PCIE
        if all(sum(1 for pair in nvlink if i in pair) <= 1 for i in indices):
            return Layout.NVLINK_PAIRS
        return Layout.MIXED

    def matrix(self, indices: Sequence[int], smi: TopoMatrix | None = None) -> TopoMatrix | None:
        """The GPUs at ``indices`` as a ``topo -m`` matrix (labels ``GPU<NVML index>``), from NVML; a PCIe
        level NVML lacks comes from ``smi`` (nvidia-smi's own matrix). None when a cell stays unknown."""
        labels = tuple(f"GPU{i}" for i in indices)
        rows: list[tuple[str, ...]] = []
        for a in indices:
            row: list[str] = []
            for b in indices:
                code = "X" if a == b else self.link_code(a, b)
                if code is None and smi is not None and f"GPU{a}" in smi.gpus and f"GPU{b}" in smi.gpus:
                    code = smi.link(smi.gpus.index(f"GPU{a}"), smi.gpus.index(f"GPU{b}"))
                if code is None:
                    return None
                row.append(code)
            rows.append(tuple(row))
        try:
            return TopoMatrix(labels, tuple(rows))
        except TopologyParseError:
            return None


def fabric_from(snapshot: NvmlSnapshot, nvswitches_on_pci: int = 0) -> Fabric:
    """The node's :class:`Fabric` from the run's NVML snapshot and the switches sysfs lists."""
    by_bus = {g.pci_bus_id.upper(): g.index for g in snapshot.gpus if isinstance(g.pci_bus_id, str)}
    return Fabric(tuple(gpu_links(g, by_bus) for g in snapshot.gpus), snapshot.pairs, nvswitches_on_pci)


def restrict(matrix: TopoMatrix, labels: Sequence[str]) -> TopoMatrix | None:
    """The rows and columns of ``labels`` (``GPU3``) of a ``topo -m`` matrix, NICs and affinity kept; None
    when a label is not in it."""
    if any(label not in matrix.gpus for label in labels):
        return None
    keep = [matrix.gpus.index(label) for label in labels]

    def pick(values: tuple[str | None, ...] | None) -> tuple[str | None, ...] | None:
        return None if values is None else tuple(values[i] for i in keep)

    return TopoMatrix(tuple(labels), tuple(tuple(matrix.links[i][j] for j in keep) for i in keep),
                      nics=matrix.nics, nic_devices=matrix.nic_devices,
                      gpu_nic_links=tuple(matrix.gpu_nic_links[i] for i in keep) if matrix.gpu_nic_links else (),
                      cpu_affinity=pick(matrix.cpu_affinity), numa_affinity=pick(matrix.numa_affinity),
                      gpu_numa_id=pick(matrix.gpu_numa_id), notes=matrix.notes)


@dataclass(frozen=True, slots=True)
class JobTopology:
    """Everything the topology judges read about the job's GPUs (NVML indices, CUDA order), and the node's."""

    job: tuple[int, ...]  # the job's GPUs that answer NVML
    lost: tuple[int, ...]  # the job's GPUs that fell off the bus
    others: tuple[int, ...]  # the node's GPUs the job does not use
    fabric: Fabric
    layout: Layout
    matrix: TopoMatrix | None  # the job's GPUs from NVML (PCIe levels NVML lacks from nvidia-smi)
    smi_matrix: TopoMatrix | None  # ``nvidia-smi topo -m`` of the job's GPUs
    smi_all: TopoMatrix | None  # ``nvidia-smi topo -m`` of the whole node
    smi_raw: str = ""
    smi_problem: str | None = None
    smi_missing: bool = False
    pcie_gen: int | None = None  # the lowest maximum PCIe generation of the job's GPUs
    no_gpu: str | None = None  # why there is nothing to judge (no NVML, no GPU)

    @property
    def fabric_down(self) -> tuple[tuple[int, str], ...]:
        """The job's GPUs whose NVSwitch fabric is not up, with what NVML says."""
        found = ((i, self.fabric.fabric_problem(i)) for i in self.job)
        return tuple((i, problem) for i, problem in found if problem is not None)

    def lost_text(self) -> str:
        """``; GPU 3 is lost`` (or nothing)."""
        return "".join(f"; GPU {i} is lost" for i in self.lost)


def job_topology(fabric: Fabric, job_gpus: Sequence[GpuInfo], all_gpus: Sequence[GpuInfo],
                 smi_matrix: TopoMatrix | None, smi_raw: str = "", smi_problem: str | None = None,
                 smi_missing: bool = False, no_gpu: str | None = None) -> JobTopology:
    """The job's view of the node's links."""
    job = tuple(g.index for g in job_gpus if not g.gpu_lost)
    used = {g.index for g in job_gpus}
    gens = [g.pcie_max[0] for g in job_gpus if not g.gpu_lost and isinstance(g.pcie_max, tuple)]
    return JobTopology(
        job=job, lost=tuple(g.index for g in job_gpus if g.gpu_lost),
        others=tuple(g.index for g in all_gpus if g.index not in used), fabric=fabric, layout=fabric.layout(job),
        matrix=fabric.matrix(job, smi_matrix) if job else None,
        smi_matrix=restrict(smi_matrix, [f"GPU{i}" for i in job]) if smi_matrix is not None and job else None,
        smi_all=smi_matrix, smi_raw=smi_raw, smi_problem=smi_problem, smi_missing=smi_missing,
        pcie_gen=min(gens) if gens and len(gens) == len(job) else None, no_gpu=no_gpu)
