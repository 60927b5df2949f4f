"""A fake ``pynvml`` built from a named machine, with faults injected as data.

``FakeNvml`` is the real :class:`~preflight.probe.nvml.PynvmlBackend` driven over
:class:`FakeLibrary`, a stand-in for the ``pynvml`` module that raises the real
``pynvml.NVMLError`` subclasses. So every test through the fake also exercises the shipped error
mapping (not supported -> sentinel, init failure -> cause).

    FakeNvml.from_profile("8x-h100-sxm", ecc_volatile={3: 2}, nvlinks_missing={5})
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from preflight.probe.nvml import PynvmlBackend
from tests.fakes.nvml_profiles import PROFILES, GpuSpec, ServerSpec

MIB = 1024 * 1024
IDLE_REASON = 0x001
HW_THERMAL_SLOWDOWN = 0x040
SW_POWER_CAP = 0x004

INIT_ERRORS = ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "NO_PERMISSION", "UNKNOWN")


@dataclass(frozen=True, kw_only=True)
class Faults:
    """What is wrong with the fake machine. GPU keys are slots in the profile (NVML indices)."""

    init_error: str | None = None  # an NVML_ERROR_* suffix from INIT_ERRORS
    absent_gpus: frozenset[int] = frozenset()  # GPUs that fell off the bus: NVML no longer lists them
    gpu_lost: frozenset[int] = frozenset()  # listed, but every query raises GPU_IS_LOST
    ecc_volatile: Mapping[int, int] = field(default_factory=dict)
    ecc_aggregate: Mapping[int, int] = field(default_factory=dict)
    remap_pending: frozenset[int] = frozenset()
    remap_failed: frozenset[int] = frozenset()
    retired_pages: Mapping[int, int] = field(default_factory=dict)  # double-bit retired pages (pre-Ampere)
    retired_pending: frozenset[int] = frozenset()
    mig_enabled: frozenset[int] = frozenset()
    persistence_off: frozenset[int] = frozenset()
    clock_reasons: Mapping[int, int] = field(default_factory=dict)  # extra bits, e.g. HW_THERMAL_SLOWDOWN
    processes: Mapping[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # gpu -> ((pid, MiB),)
    memory_used_mib: Mapping[int, int] = field(default_factory=dict)  # used memory with no visible process
    pcie_current: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # link trained below max
    nvlinks_missing: frozenset[int] = frozenset()  # every NVLink of these GPUs is down
    nvlink_down: frozenset[tuple[int, int]] = frozenset()  # (gpu, link) pairs that are down
    not_supported: frozenset[str] = frozenset()  # pynvml function names answering NOT_SUPPORTED


def _error(name: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


def fake_uuid(prefix: str, seed: str) -> str:
    """A stable UUID-shaped string: ``GPU-1a2b3c4d-....``."""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass(frozen=True)
class _Handle:
    slot: int


@dataclass(frozen=True)
class _MigHandle:
    slot: int
    instance: int


class FakeLibrary:
    """The subset of the ``pynvml`` module that ``PynvmlBackend`` calls, over a ServerSpec."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(self, spec: ServerSpec, faults: Faults, under_load: bool = False) -> None:
        self.spec = spec
        self.faults = faults
        self.under_load = under_load
        self.slots = [s for s in range(len(spec.gpus)) if s not in faults.absent_gpus]
        self.initialised = False
        self.init_calls = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.faults.init_error:
            raise _error(self.faults.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._ready()
        self.initialised = False

    def _ready(self, function: str = "") -> None:
        if not self.initialised:
            raise _error("UNINITIALIZED")
        if function in self.faults.not_supported:
            raise _error("NOT_SUPPORTED")

    def _gpu(self, handle: Any, function: str) -> tuple[int, GpuSpec]:
        self._ready(function)
        if not isinstance(handle, (_Handle, _MigHandle)):
            raise _error("INVALID_ARGUMENT")
        if handle.slot in self.faults.gpu_lost:
            raise _error("GPU_IS_LOST")
        return handle.slot, self.spec.gpus[handle.slot]

    def _mig_on(self, slot: int) -> bool:
        return slot in self.spec.mig_enabled or slot in self.faults.mig_enabled

    # -- system ---------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.slots)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.spec.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._ready("nvmlSystemGetCudaDriverVersion")
        return self.spec.cuda

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready()
        if not 0 <= index < len(self.slots):
            raise _error("INVALID_ARGUMENT")
        return _Handle(self.slots[index])

    # -- identity -------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetName")[1].name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        slot, _ = self._gpu(handle, "nvmlDeviceGetUUID")
        if isinstance(handle, _MigHandle):
            return fake_uuid("MIG", f"{self.spec.name}/{slot}/mig{handle.instance}")
        return fake_uuid("GPU", f"{self.spec.name}/{slot}")

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        slot, _ = self._gpu(handle, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self.spec.bus_ids[slot].encode())  # old wheels hand back bytes

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        used_mib = self.faults.memory_used_mib.get(slot, 1) + sum(mib for _, mib in self.faults.processes.get(slot, ()))
        total = gpu.memory_mib * MIB
        return SimpleNamespace(total=total, used=used_mib * MIB, free=total - used_mib * MIB)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._gpu(handle, "nvmlDeviceGetCudaComputeCapability")[1].compute_capability

    # -- modes ----------------------------------------------------------------------------------

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        slot, _ = self._gpu(handle, "nvmlDeviceGetPersistenceMode")
        return 0 if slot in self.faults.persistence_off else 1

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        if not gpu.mig_capable:
            raise _error("NOT_SUPPORTED")
        on = int(self._mig_on(slot))
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        _, gpu = self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if not gpu.mig_capable:
            raise _error("NOT_SUPPORTED")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> _MigHandle:
        slot, _ = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        configured = max(self.spec.mig_devices, 1) if self._mig_on(slot) else 0
        if not 0 <= index < configured:
            raise _error("NOT_FOUND")
        return _MigHandle(slot, index)

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        _, gpu = self._gpu(handle, "nvmlDeviceGetEccMode")
        return [int(gpu.ecc_enabled), int(gpu.ecc_enabled)]

    # -- memory health --------------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if not gpu.ecc_enabled:
            raise _error("NOT_SUPPORTED")
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        volatile = self.faults.ecc_volatile.get(slot, 0)
        if counter == pynvml.NVML_VOLATILE_ECC:
            return volatile
        return volatile + self.faults.ecc_aggregate.get(slot, 0)

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetRetiredPages")
        if gpu.row_remapping:
            raise _error("NOT_SUPPORTED")
        count = self.faults.retired_pages.get(slot, 0) if cause == 1 else 0
        return [0x1000 * (n + 1) for n in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        if gpu.row_remapping:
            raise _error("NOT_SUPPORTED")
        return int(slot in self.faults.retired_pending)

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetRemappedRows")
        if not gpu.row_remapping:
            raise _error("NOT_SUPPORTED")
        pending, failed = slot in self.faults.remap_pending, slot in self.faults.remap_failed
        return (0, int(pending or failed), int(pending), int(failed))

    # -- link, clocks, temperature, processes ---------------------------------------------------

    def _pcie_now(self, slot: int, gpu: GpuSpec) -> tuple[int, int]:
        if slot in self.faults.pcie_current:
            return self.faults.pcie_current[slot]
        return gpu.pcie_max if self.under_load else (gpu.idle_pcie_gen, gpu.pcie_max[1])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration")
        return self._pcie_now(slot, gpu)[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth")
        return self._pcie_now(slot, gpu)[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration")[1].pcie_max[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth")[1].pcie_max[1]

    def _reasons(self, handle: Any, function: str) -> int:
        slot, _ = self._gpu(handle, function)
        return (0 if self.under_load else IDLE_REASON) | self.faults.clock_reasons.get(slot, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._reasons(handle, "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._reasons(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        slot, _ = self._gpu(handle, "nvmlDeviceGetTemperature")
        hot = self.faults.clock_reasons.get(slot, 0) & HW_THERMAL_SLOWDOWN
        return 91 if hot else 31 + slot % 4

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        slot, _ = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB) for pid, mib in self.faults.processes.get(slot, ())]

    # -- NVLink and pairs -----------------------------------------------------------------------

    def _link_peers(self, slot: int) -> list[int | None]:
        """Peer GPU of each link of ``slot`` (None: the link goes to an NVSwitch)."""
        gpu = self.spec.gpus[slot]
        if self.spec.nvswitch:
            return [None] * gpu.nvlinks
        peers: list[int | None] = []
        for a, b, links in self.spec.bonds:
            if slot in (a, b):
                peers.extend([b if slot == a else a] * links)
        return peers + [None] * (gpu.nvlinks - len(peers))

    def _link_up(self, slot: int, link: int) -> bool:
        if slot in self.faults.nvlinks_missing or (slot, link) in self.faults.nvlink_down:
            return False
        peer = self._link_peers(slot)[link]
        if peer is None:
            return self.spec.nvswitch  # an unwired link on a bridged card is down
        return peer not in self.faults.nvlinks_missing  # the far end of a direct bond fails with it

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        slot, gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if gpu.nvlinks == 0:
            raise _error("NOT_SUPPORTED")
        if not 0 <= link < gpu.nvlinks:
            raise _error("INVALID_ARGUMENT")
        return int(self._link_up(slot, link))

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:
        _, gpu = self._gpu(handle, "nvmlDeviceGetNvLinkVersion")
        if gpu.nvlinks == 0:
            raise _error("NOT_SUPPORTED")
        if not 0 <= link < gpu.nvlinks:
            raise _error("INVALID_ARGUMENT")
        return gpu.nvlink_version

    def _nvlinked(self, a: int, b: int) -> bool:
        up_a = [link for link in range(self.spec.gpus[a].nvlinks) if self._link_up(a, link)]
        if self.spec.nvswitch:
            up_b = [link for link in range(self.spec.gpus[b].nvlinks) if self._link_up(b, link)]
            return bool(up_a and up_b)
        peers = self._link_peers(a)
        return any(peers[link] == b for link in up_a)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int:
        a, _ = self._gpu(first, "nvmlDeviceGetTopologyCommonAncestor")
        b, _ = self._gpu(second, "nvmlDeviceGetTopologyCommonAncestor")
        if a == b:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        switches = self.spec.pcie_switches
        if switches and switches[a] == switches[b]:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if self.spec.sockets[a] == self.spec.sockets[b]:
            return pynvml.NVML_TOPOLOGY_NODE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetP2PStatus(self, first: Any, second: Any, caps: int) -> int:
        if not isinstance(caps, int):  # what ctypes does with pynvml's tuple-valued READ constant
            raise ctypes.ArgumentError("argument 3: wrong type")
        a, gpu_a = self._gpu(first, "nvmlDeviceGetP2PStatus")
        b, gpu_b = self._gpu(second, "nvmlDeviceGetP2PStatus")
        if self._mig_on(a) or self._mig_on(b):
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED  # MIG has no CUDA P2P at all
        if self._nvlinked(a, b):
            return pynvml.NVML_P2P_STATUS_OK
        if caps == 2:  # NVML_P2P_CAPS_INDEX_NVLINK
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        if not (gpu_a.pcie_p2p and gpu_b.pcie_p2p):
            return pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
        if self.nvmlDeviceGetTopologyCommonAncestor(first, second) >= pynvml.NVML_TOPOLOGY_SYSTEM:
            return pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        return pynvml.NVML_P2P_STATUS_OK


class FakeNvml(PynvmlBackend):
    """``NvmlBackend`` over a fake machine: ``FakeNvml.from_profile("8x-l40s", persistence_off={2})``."""

    def __init__(self, spec: ServerSpec, faults: Faults | None = None, under_load: bool = False) -> None:
        self.library = FakeLibrary(spec, faults or Faults(), under_load)
        super().__init__(library=self.library)
        self.profile = spec.name
        self.label = f"fake:{spec.name}"

    @classmethod
    def from_profile(cls, name: str, *, under_load: bool = False, **faults: Any) -> FakeNvml:
        """A fake machine by profile name with faults given as :class:`Faults` fields."""
        try:
            spec = PROFILES[name]
        except KeyError:
            raise ValueError(f"unknown fake profile {name!r}; known: {', '.join(PROFILES)}") from None
        converted = {
            key: frozenset(value) if isinstance(value, (set, list, tuple)) else value for key, value in faults.items()
        }
        return cls(spec, Faults(**converted), under_load)


def profile_names() -> Iterable[str]:
    """Every profile name, for parametrizing tests."""
    return tuple(PROFILES)
