"""A fake NVML C library (``libnvidia-ml.so.1``) under the real nvidia-ml-py binding.

pynvml calls its library object's functions by name (``_nvmlGetFunctionPointer(name)`` =
``getattr(nvmlLib, name)``, pynvml.py) with ctypes arguments: ``byref(...)`` out-parameters
(``arg._obj``), device handles (``POINTER(struct_c_nvmlDevice_t)``), string buffers, its own
``Structure`` subclasses and arrays; each function returns an ``nvmlReturn_t``. :class:`FakeNvmlLibrary`
is such an object for one machine of ``tests/fakes/nvml_profiles.py``, so pynvml's real wrappers,
structs, versioned calls, buffer-size protocols and error mapping all run over it.

Where each behaviour comes from is said next to it: nvml.h (the NVML API reference text, quoted in
copies of the header such as gitee go-ixml api.h), pynvml.py (nvidia-ml-py 13.615.71), captures in
``../shared/fixtures`` and public issues. What the real library does that no source shows is
left out rather than guessed, and says so.

Tests reach it two ways:

- through the NVML child, as preflight does: ``fake_transport("8x-h100-sxm", ecc_volatile={3: 2})``
  is an :class:`~preflight.probe.nvml_transport.NvmlTransport` naming :func:`make_library`;
- in-process, for fast tests of the fake and the walk: ``with installed("8x-l40s") as library:``
  puts a library under the test process's pynvml and takes it away again.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pynvml

from preflight.probe.nvml import PynvmlBackend
from preflight.probe.nvml_snapshot import NvmlSnapshot
from preflight.probe.nvml_transport import NvmlTransport
from preflight.probe.nvml_walk import walk
from tests.fakes.nvml_profiles import PROFILES, GpuSpec, ServerSpec

MIB = 1024 * 1024
IDLE_REASON = 0x001
HW_THERMAL_SLOWDOWN = 0x040
SW_POWER_CAP = 0x004

INIT_ERRORS = ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "NO_PERMISSION", "UNKNOWN")
FACTORY = "tests.fakes.nvml:make_library"

# nvmlReturn_t and enum values, as pynvml (and nvml.h) define them
NVML_AGGREGATE_ECC: int = pynvml.NVML_AGGREGATE_ECC
NVML_ERROR_FUNCTION_NOT_FOUND: int = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
NVML_ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
NVML_ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
NVML_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_NO_PERMISSION: int = pynvml.NVML_ERROR_NO_PERMISSION
NVML_ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
NVML_ERROR_UNKNOWN: int = pynvml.NVML_ERROR_UNKNOWN
NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
NVML_P2P_STATUS_GPU_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
NVML_P2P_STATUS_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
NVML_P2P_STATUS_OK: int = pynvml.NVML_P2P_STATUS_OK
NVML_SUCCESS: int = pynvml.NVML_SUCCESS
NVML_TOPOLOGY_INTERNAL: int = pynvml.NVML_TOPOLOGY_INTERNAL
NVML_TOPOLOGY_NODE: int = pynvml.NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SINGLE: int = pynvml.NVML_TOPOLOGY_SINGLE
NVML_TOPOLOGY_SYSTEM: int = pynvml.NVML_TOPOLOGY_SYSTEM
NVML_ERROR_ARGUMENT_VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
NVML_NVLINK_DEVICE_TYPE_GPU: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
NVML_NVLINK_DEVICE_TYPE_SWITCH: int = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
NVML_GPU_FABRIC_STATE_IN_PROGRESS: int = pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
NVML_GPU_FABRIC_STATE_COMPLETED: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
NVML_COMPUTEMODE_DEFAULT: int = pynvml.NVML_COMPUTEMODE_DEFAULT
NVML_COMPUTEMODE_PROHIBITED: int = pynvml.NVML_COMPUTEMODE_PROHIBITED
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: int = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
FABRIC_STRUCT_VERSIONS = (0x02000024, 0x03000028)
"""nvmlGpuFabricInfo_v2 and _v3 = NVML_STRUCT_VERSION(GpuFabricInfo, n), sizeof | n << 24 (nvml.h; pynvml
spells them nvmlGpuFabricInfo_v2 = 0x02000024, nvmlGpuFabricInfo_v3 = 0x3000028)."""

INTRODUCED: dict[str, tuple[tuple[int, ...], str]] = {
    "nvmlDeviceGetComputeRunningProcesses_v2": (
        (450,),
        "R450/NVML 11.0 (NVIDIA/go-nvml#28); absent on 440.33.01 and 440.59 (4paradigm/k8s-vgpu-scheduler#4, "
        "NVIDIA/k8s-device-plugin#331)",
    ),
    "nvmlDeviceGetComputeRunningProcesses_v3": (
        (510, 39, 1),
        "added in 510.39.01 (XuehaiPan/nvitop#89); undefined symbol on 470.161.03 (rust-nvml/nvml-wrapper#46)",
    ),
    "nvmlDeviceGetMemoryInfo_v2": ((510, 39, 1), "introduced in 510.39.01 (NVIDIA/nvidia-settings#78)"),
    "nvmlDeviceGetCurrentClocksEventReasons": (
        (535,),
        "nvidia-smi -q says 'Clocks Throttle Reasons' on 525 and 'Clocks Event Reasons' from 535 "
        "(fixtures/INDEX.md, smi_q captures); pynvml marks the throttle call deprecated",
    ),
    "nvmlDeviceGetNvLinkRemoteDeviceType": ((470,), "in nvml.h from NVML 11.4 (R470; NVIDIA/go-nvml 15056a1)"),
    "nvmlDeviceGetGpuFabricInfo": (
        (525,),
        "in nvml.h from NVML 12.0 (R525; NVIDIA/go-nvml 399f8e0); smi_q/H800 on 525.105.17 shows 'Fabric State'",
    ),
    "nvmlDeviceGetGpuFabricInfoV": ((550,), "in nvml.h from NVML 12.4 (R550; NVIDIA/go-nvml f7ceebd)"),
}
"""Functions a driver older than the version given does not export (pynvml then answers
NVML_ERROR_FUNCTION_NOT_FOUND). Every other function here exists in every profile's driver."""

_HANDLE_BASE = 0x7F00_0000_0000  # any non-NULL address: pynvml never dereferences a device handle
_GPU_STRIDE = 0x1000
_MIG_STRIDE = 0x10


@dataclass(frozen=True, kw_only=True)
class Faults:
    """What is wrong with the fake machine. GPU keys are slots in the profile (NVML indices)."""

    init_error: str | None = None  # an NVML_ERROR_* suffix from INIT_ERRORS
    absent_gpus: frozenset[int] = frozenset()  # GPUs that fell off the bus: NVML no longer lists them
    gpu_lost: frozenset[int] = frozenset()  # listed, but every query answers GPU_IS_LOST
    lost_at_handle: frozenset[int] = frozenset()  # listed, and even the handle call answers GPU_IS_LOST
    hang_gpus: frozenset[int] = frozenset()  # every call with this GPU's handle blocks for ever
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
    memory_used_mib: Mapping[int, int] = field(default_factory=dict)  # allocated with no visible process
    under_load: bool = False  # PCIe links trained up to their maximum, no Idle clock reason
    pcie_current: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # link trained below max
    nvlinks_missing: frozenset[int] = frozenset()  # every NVLink of these GPUs is down
    nvlink_down: frozenset[tuple[int, int]] = frozenset()  # (gpu, link) pairs that are down
    fabric_manager_down: bool = False  # NVSwitch board whose fabric manager is not running
    compute_mode: Mapping[int, int] = field(default_factory=dict)  # gpu -> NVML_COMPUTEMODE_* (default 0)
    not_supported: frozenset[str] = frozenset()  # C functions answering NVML_ERROR_NOT_SUPPORTED
    no_permission: frozenset[str] = frozenset()  # C functions answering NVML_ERROR_NO_PERMISSION
    missing_functions: frozenset[str] = frozenset()  # C functions this driver does not export

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Faults:
        """From JSON: GPU keys may be strings, sets and pairs come as lists."""
        unknown = set(raw) - set(_FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(_FAULT_KINDS)}")
        return cls(**{key: _FAULT_KINDS[key](value) for key, value in raw.items()})

    def to_json(self) -> dict[str, Any]:
        """JSON form (what :func:`make_library` reads back)."""
        return {key: _to_json_value(value) for key, value in asdict(self).items()}


def _ints(raw: Any) -> frozenset[int]:
    return frozenset(int(v) for v in raw)


def _names(raw: Any) -> frozenset[str]:
    return frozenset(str(v) for v in raw)


def _links(raw: Any) -> frozenset[tuple[int, int]]:
    return frozenset((int(gpu), int(link)) for gpu, link in raw)


def _counts(raw: Any) -> dict[int, int]:
    return {int(k): int(v) for k, v in raw.items()}


def _holders(raw: Any) -> dict[int, tuple[tuple[int, int], ...]]:
    return {int(k): tuple((int(pid), int(mib)) for pid, mib in v) for k, v in raw.items()}


def _widths(raw: Any) -> dict[int, tuple[int, int]]:
    return {int(k): (int(v[0]), int(v[1])) for k, v in raw.items()}


_FAULT_KINDS: dict[str, Callable[[Any], Any]] = {
    "init_error": lambda raw: None if raw is None else str(raw),
    "absent_gpus": _ints,
    "gpu_lost": _ints,
    "lost_at_handle": _ints,
    "hang_gpus": _ints,
    "ecc_volatile": _counts,
    "ecc_aggregate": _counts,
    "remap_pending": _ints,
    "remap_failed": _ints,
    "retired_pages": _counts,
    "retired_pending": _ints,
    "mig_enabled": _ints,
    "persistence_off": _ints,
    "clock_reasons": _counts,
    "processes": _holders,
    "memory_used_mib": _counts,
    "under_load": bool,
    "pcie_current": _widths,
    "nvlinks_missing": _ints,
    "nvlink_down": _links,
    "fabric_manager_down": bool,
    "compute_mode": _counts,
    "not_supported": _names,
    "no_permission": _names,
    "missing_functions": _names,
}
"""How each Faults field comes back from JSON."""


def _to_json_value(value: Any) -> Any:
    if isinstance(value, (frozenset, set)):
        return sorted((list(v) if isinstance(v, tuple) else v for v in value), key=str)
    if isinstance(value, dict):
        return {str(k): _to_json_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_to_json_value(v) for v in value]
    return value


def fake_uuid(prefix: str, seed: str) -> str:
    """A stable UUID-shaped string: ``GPU-1a2b3c4d-....``."""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


# -- ctypes manners -------------------------------------------------------------------------------

_CARG = type(ctypes.byref(ctypes.c_int()))


def _check_arguments(args: tuple[Any, ...]) -> None:
    """What a ctypes function pointer without ``argtypes`` accepts (CPython _ctypes ``ConvParam``):
    None, int, bytes, str, ctypes instances and ``byref`` objects; anything else (pynvml's tuple
    ``NVML_P2P_CAPS_INDEX_READ = 0,``) raises ctypes.ArgumentError."""
    for position, arg in enumerate(args, start=1):
        if arg is None or isinstance(arg, (int, bytes, str, ctypes._SimpleCData, ctypes.Structure,
                                           ctypes.Union, ctypes.Array, ctypes._Pointer, _CARG)):
            continue
        if hasattr(arg, "_as_parameter_"):
            continue
        raise ctypes.ArgumentError(f"argument {position}: TypeError: Don't know how to convert parameter {position}")


class CFunction:
    """One exported function: callable like a ctypes ``_FuncPtr`` (``restype``/``argtypes`` settable,
    arguments converted the ctypes way), returning an ``nvmlReturn_t``."""

    def __init__(self, name: str, implementation: Callable[..., Any], library: FakeNvmlLibrary) -> None:
        self.__name__ = name
        self.restype: Any = ctypes.c_int  # pynvml sets c_char_p on nvmlErrorString
        self.argtypes: Any = None
        self._implementation = implementation
        self._library = library

    def __call__(self, *args: Any) -> Any:
        _check_arguments(args)
        self._library.calls[self.__name__] += 1
        if self.__name__ in self._library.faults.not_supported:
            return NVML_ERROR_NOT_SUPPORTED
        if self.__name__ in self._library.faults.no_permission:
            return NVML_ERROR_NO_PERMISSION
        return self._implementation(*args)


def _value(arg: Any) -> int:
    """An integer argument: a Python int or a ctypes scalar (pynvml wraps enums as ``c_uint(...)``)."""
    return int(arg.value) if isinstance(arg, ctypes._SimpleCData) else int(arg)


def _out(arg: Any) -> Any:
    """The object behind a ``byref(...)`` out-parameter."""
    if not isinstance(arg, _CARG):
        raise TypeError(f"fake NVML: expected a byref() out-parameter, got {type(arg).__name__}")
    return arg._obj  # type: ignore[attr-defined]  # typeshed's _CArgObject omits the object byref() wraps


def _put_string(buffer: Any, length: Any, text: str) -> int:
    """Copy ``text`` into a ``create_string_buffer``; nvml.h: NVML_ERROR_INSUFFICIENT_SIZE when
    ``length`` cannot hold it and its NUL."""
    data = text.encode()
    if len(data) + 1 > _value(length) or len(data) + 1 > len(buffer):
        return NVML_ERROR_INSUFFICIENT_SIZE
    buffer.value = data
    return NVML_SUCCESS


def _fill_pci(info: Any, bus_id: str, device_id: int) -> None:
    """``nvmlPciInfo_t`` for ``bus_id`` ("00000000:18:00.0"): busId in NVML_DEVICE_PCI_BUS_ID_FMT,
    busIdLegacy in NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT (pynvml.py)."""
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device, 16)
    info.busId = (pynvml.NVML_DEVICE_PCI_BUS_ID_FMT % (info.domain, info.bus, info.device)).encode()
    legacy = pynvml.NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT % (info.domain & 0xFFFF, info.bus, info.device)
    info.busIdLegacy = legacy.encode()
    info.pciDeviceId = device_id
    info.pciSubSystemId = 0x16C110DE


def _block_forever() -> None:
    """A wedged driver: the call never returns (the NVML child is killed at its deadline)."""
    threading.Event().wait()


class FakeNvmlLibrary:
    """The NVML C library of one fake machine. Attributes are its exported functions."""

    def __init__(self, spec: ServerSpec, faults: Faults | None = None) -> None:
        self.spec = spec
        self.faults = faults or Faults()
        self.slots = [s for s in range(len(spec.gpus)) if s not in self.faults.absent_gpus]
        self.init_count = 0
        self.init_calls = 0
        self.calls: Counter[str] = Counter()
        driver = _version(spec.driver)
        for attribute in dir(type(self)):
            if not attribute.startswith("_nvml"):
                continue
            name = attribute[1:]
            introduced = INTRODUCED.get(name)
            if name in self.faults.missing_functions or (introduced is not None and driver < introduced[0]):
                continue  # pynvml: AttributeError -> NVML_ERROR_FUNCTION_NOT_FOUND
            setattr(self, name, CFunction(name, getattr(self, attribute), self))

    # -- handles --------------------------------------------------------------------------------

    @staticmethod
    def _address(handle: Any) -> int | None:
        if not isinstance(handle, ctypes._Pointer):
            return None
        return ctypes.cast(handle, ctypes.c_void_p).value

    def _decode(self, handle: Any) -> tuple[int, int | None] | None:
        """(slot, MIG instance or None) of a handle this library gave out; None for anything else."""
        address = self._address(handle)
        if address is None or address < _HANDLE_BASE + _GPU_STRIDE:
            return None
        offset = address - _HANDLE_BASE
        slot, rest = divmod(offset, _GPU_STRIDE)
        slot -= 1
        if slot not in self.slots:
            return None
        return slot, (rest // _MIG_STRIDE - 1) if rest else None

    @staticmethod
    def _give(out: Any, slot: int, mig: int | None = None) -> None:
        """Write a handle value into the ``c_nvmlDevice_t`` behind ``out`` (a ``byref``)."""
        address = _HANDLE_BASE + (slot + 1) * _GPU_STRIDE + (0 if mig is None else (mig + 1) * _MIG_STRIDE)
        ctypes.c_void_p.from_buffer(_out(out)).value = address

    def _gpu(self, handle: Any) -> tuple[int, GpuSpec, int | None] | int:
        """(slot, spec, MIG instance) for a valid handle, else the nvmlReturn_t to answer."""
        if self.init_count == 0:
            return NVML_ERROR_UNINITIALIZED
        found = self._decode(handle)
        if found is None:
            return NVML_ERROR_INVALID_ARGUMENT  # nvml.h: "if device is invalid"
        slot, mig = found
        if slot in self.faults.hang_gpus or slot in self.spec.hung_gpus:
            _block_forever()
        if slot in self.faults.gpu_lost:
            return NVML_ERROR_GPU_IS_LOST  # nvml.h: "if the target GPU has fallen off the bus"
        return slot, self.spec.gpus[slot], mig

    def _mig_on(self, slot: int) -> bool:
        return slot in self.spec.mig_enabled or slot in self.faults.mig_enabled

    # -- lifecycle (pynvml 13 calls nvmlInitWithFlags(0) from nvmlInit) --------------------------

    def _nvmlInitWithFlags(self, flags: Any) -> int:
        self.init_calls += 1
        error = self.faults.init_error
        if error and error != "LIBRARY_NOT_FOUND":  # that one never gets here: make_library raises OSError
            return int(getattr(pynvml, f"NVML_ERROR_{error}"))
        self.init_count += 1  # nvml.h: init/shutdown are reference counted
        return NVML_SUCCESS

    def _nvmlShutdown(self) -> int:
        if self.init_count == 0:
            return NVML_ERROR_UNINITIALIZED
        self.init_count -= 1
        return NVML_SUCCESS

    def _nvmlErrorString(self, result: Any) -> bytes:
        return f"NVML error {_value(result)}".encode()  # pynvml sets restype c_char_p and decodes bytes

    # -- system ---------------------------------------------------------------------------------

    def _nvmlDeviceGetCount_v2(self, count: Any) -> int:
        if self.init_count == 0:
            return NVML_ERROR_UNINITIALIZED
        _out(count).value = len(self.slots)
        return NVML_SUCCESS

    def _nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        if self.init_count == 0:
            return NVML_ERROR_UNINITIALIZED
        return _put_string(buffer, length, self.spec.driver)

    def _nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        _out(version).value = self.spec.cuda  # nvml.h: 1000 * major + 10 * minor
        return NVML_SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        if self.init_count == 0:
            return NVML_ERROR_UNINITIALIZED
        position = _value(index)
        if not 0 <= position < len(self.slots):
            return NVML_ERROR_INVALID_ARGUMENT  # nvml.h: "if index is invalid"
        if self.slots[position] in self.faults.lost_at_handle:
            # nvml.h, nvmlDeviceGetHandleByIndex_v2: "NVML_ERROR_GPU_IS_LOST if the target GPU has fallen
            # off the bus or is otherwise inaccessible"
            return NVML_ERROR_GPU_IS_LOST
        self._give(device, self.slots[position])
        return NVML_SUCCESS

    # -- identity -------------------------------------------------------------------------------

    def _nvmlDeviceGetName(self, handle: Any, buffer: Any, length: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        if found[2] is not None:  # a MIG handle names its slice, as `nvidia-smi -L` lists "MIG 3g.40gb Device 0"
            return _put_string(buffer, length, f"{found[1].name} MIG {found[1].mig_profile}")
        return _put_string(buffer, length, found[1].name)

    def _nvmlDeviceGetUUID(self, handle: Any, buffer: Any, length: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, _, mig = found
        if mig is not None:  # MIG-<uuid> since R470 (CUDA docs, see preflight.parse.visible_devices)
            return _put_string(buffer, length, fake_uuid("MIG", f"{self.spec.name}/{slot}/mig{mig}"))
        return _put_string(buffer, length, fake_uuid("GPU", f"{self.spec.name}/{slot}"))

    def _nvmlDeviceGetSerial(self, handle: Any, buffer: Any, length: Any) -> int:
        # 13 digits, as the shared smi_q captures show ("Serial Number : 1651323018291" on H800,
        # 1562521008218 on RTX A6000, 0561519020531 on V100); stable per profile and slot.
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        digits = int(hashlib.sha256(f"{self.spec.name}/{found[0]}".encode()).hexdigest(), 16) % 10**9
        return _put_string(buffer, length, f"1652{digits:09d}")

    def _nvmlDeviceGetPciInfo_v3(self, handle: Any, info: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        _fill_pci(_out(info), self.spec.bus_ids[found[0]], found[1].pci_device_id)
        return NVML_SUCCESS

    def _memory(self, slot: int, gpu: GpuSpec, mig: int | None = None) -> tuple[int, int, int]:
        """(total, reserved, allocated) bytes: idle use of the model, plus what the faults add. A MIG
        handle reports its slice (nvml.h: "Per-instance information can be queried by using specific MIG
        device handles"): 40192 MiB with 19 MiB used at idle for a 3g.40gb of an A100 80GB (the "MIG
        devices" table of public nvidia-smi captures)."""
        if mig is not None:
            return gpu.mig_memory_mib * MIB, 0, gpu.mig_idle_used_mib * MIB
        allocated = gpu.idle_used_mib + self.faults.memory_used_mib.get(slot, 0)
        allocated += sum(mib for _, mib in self.faults.processes.get(slot, ()))
        return gpu.memory_mib * MIB, gpu.reserved_mib * MIB, allocated * MIB

    def _nvmlDeviceGetMemoryInfo(self, handle: Any, memory: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        total, reserved, allocated = self._memory(*found)
        info = _out(memory)
        info.total, info.used = total, reserved + allocated  # nvml.h v1: used = "Sum of Reserved and Allocated"
        info.free = total - info.used
        return NVML_SUCCESS

    def _nvmlDeviceGetMemoryInfo_v2(self, handle: Any, memory: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        info = _out(memory)
        if info.version != pynvml.nvmlMemory_v2:
            # A struct version this call does not take answers FUNCTION_NOT_FOUND: observed against a real
            # driver with version 2 in place of nvmlMemory_v2 (jp7677/dxvk-nvapi#198, review by Saancreed).
            # nvml.h lists no ARGUMENT_VERSION_MISMATCH for this R510 call; the later versioned calls
            # (nvmlDeviceGetGpuFabricInfoV below) answer that code instead.
            return NVML_ERROR_FUNCTION_NOT_FOUND
        total, reserved, allocated = self._memory(*found)
        # nvidia-smi -q (which reads v2) shows Used excluding Reserved: "Reserved 516 MiB, Used 0 MiB,
        # Free 81042 MiB" of 81559 (smi_q/H800-...), so free = total - reserved - used.
        info.total, info.reserved, info.used = total, reserved, allocated
        info.free = total - reserved - allocated
        return NVML_SUCCESS

    def _nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        _out(major).value, _out(minor).value = found[1].compute_capability
        return NVML_SUCCESS

    # -- modes ----------------------------------------------------------------------------------

    def _nvmlDeviceGetPersistenceMode(self, handle: Any, mode: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        _out(mode).value = 0 if found[0] in self.faults.persistence_off else 1
        return NVML_SUCCESS

    def _nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        if not found[1].mig_capable:
            return NVML_ERROR_NOT_SUPPORTED  # nvml.h: "if the device doesn't support MIG mode"
        on = int(self._mig_on(found[0]))
        _out(current).value, _out(pending).value = on, on
        return NVML_SUCCESS

    def _nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, count: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        # NVML reference: "Returns zero if MIG is not supported or enabled"; A100/H100 hold up to 7.
        _out(count).value = 7 if found[1].mig_capable and self._mig_on(found[0]) else 0
        return NVML_SUCCESS

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, mig_device: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, _, _ = found
        position = _value(index)
        if not 0 <= position < 7:
            return NVML_ERROR_INVALID_ARGUMENT
        configured = (self.spec.mig_devices or 1) if self._mig_on(slot) else 0
        if position >= configured:
            return NVML_ERROR_NOT_FOUND  # nvml.h: "if no valid MIG device was found at index"
        self._give(mig_device, slot, position)
        return NVML_SUCCESS

    def _nvmlDeviceGetComputeMode(self, handle: Any, mode: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, _, mig = found
        if mig is None and self._mig_on(slot):
            # nvml.h: "If MIG is enabled on a GPU, device must be MIG device handle"; which error the GPU's own
            # handle then gets is in no source we have (preflight asks the MIG handles instead)
            return NVML_ERROR_UNKNOWN
        _out(mode).value = self.faults.compute_mode.get(slot, NVML_COMPUTEMODE_DEFAULT)
        return NVML_SUCCESS

    def _nvmlDeviceGetEccMode(self, handle: Any, current: Any, pending: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        on = int(found[1].ecc_enabled)
        _out(current).value, _out(pending).value = on, on
        return NVML_SUCCESS

    # -- memory health --------------------------------------------------------------------------

    def _nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter: Any, count: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, gpu, _ = found
        if not gpu.ecc_enabled:
            return NVML_ERROR_NOT_SUPPORTED  # nvml.h: "Requires ECC Mode to be enabled"
        value = 0
        if _value(error_type) == NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            value = self.faults.ecc_volatile.get(slot, 0)
            if _value(counter) == NVML_AGGREGATE_ECC:
                value += self.faults.ecc_aggregate.get(slot, 0)
        _out(count).value = value
        return NVML_SUCCESS

    def _nvmlDeviceGetRetiredPages(self, handle: Any, cause: Any, count: Any, addresses: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, gpu, _ = found
        if gpu.row_remapping:
            return NVML_ERROR_NOT_SUPPORTED  # Ampere+ remaps rows instead (no "Retired Pages" in smi_q A6000)
        pages = self.faults.retired_pages.get(slot, 0) if _value(cause) == 1 else 0
        box = _out(count)
        if pages and (addresses is None or box.value < pages):
            box.value = pages  # nvml.h: INSUFFICIENT_SIZE, pageCount holds the expected value
            return NVML_ERROR_INSUFFICIENT_SIZE
        for n in range(pages):
            addresses[n] = 0x1000 * (n + 1)
        box.value = pages
        return NVML_SUCCESS

    def _nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, pending: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        if found[1].row_remapping:
            return NVML_ERROR_NOT_SUPPORTED
        _out(pending).value = int(found[0] in self.faults.retired_pending)
        return NVML_SUCCESS

    def _nvmlDeviceGetRemappedRows(self, handle: Any, corrected: Any, uncorrected: Any, pending: Any,
                                   failure: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, gpu, _ = found
        if not gpu.row_remapping:
            return NVML_ERROR_NOT_SUPPORTED  # pre-Ampere: no "Remapped Rows" section (smi_q V100)
        is_pending, failed = slot in self.faults.remap_pending, slot in self.faults.remap_failed
        _out(corrected).value, _out(uncorrected).value = 0, int(is_pending or failed)
        _out(pending).value, _out(failure).value = int(is_pending), int(failed)
        return NVML_SUCCESS

    # -- PCIe, clocks, temperature --------------------------------------------------------------

    def _pcie_now(self, slot: int, gpu: GpuSpec) -> tuple[int, int]:
        if slot in self.faults.pcie_current:
            return self.faults.pcie_current[slot]
        return gpu.pcie_max if self.faults.under_load else (gpu.idle_pcie_gen, gpu.pcie_max[1])

    def _pcie(self, handle: Any, out: Any, pick: Callable[[int, GpuSpec], int]) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        _out(out).value = pick(found[0], found[1])
        return NVML_SUCCESS

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, gen: Any) -> int:
        return self._pcie(handle, gen, lambda slot, gpu: self._pcie_now(slot, gpu)[0])

    def _nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, width: Any) -> int:
        return self._pcie(handle, width, lambda slot, gpu: self._pcie_now(slot, gpu)[1])

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any, gen: Any) -> int:
        return self._pcie(handle, gen, lambda slot, gpu: gpu.pcie_max[0])

    def _nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any, width: Any) -> int:
        return self._pcie(handle, width, lambda slot, gpu: gpu.pcie_max[1])

    def _reasons(self, handle: Any, out: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        idle = 0 if self.faults.under_load else IDLE_REASON  # "Idle: Active" at P8 in smi_q RTX A6000
        _out(out).value = idle | self.faults.clock_reasons.get(found[0], 0)
        return NVML_SUCCESS

    def _nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, reasons: Any) -> int:
        return self._reasons(handle, reasons)

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, reasons: Any) -> int:
        return self._reasons(handle, reasons)

    def _nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, temperature: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        hot = self.faults.clock_reasons.get(found[0], 0) & HW_THERMAL_SLOWDOWN
        _out(temperature).value = 91 if hot else 31 + found[0] % 4  # idle 28-45 C in the smi captures
        return NVML_SUCCESS

    # -- processes: nvml.h's two-call protocol, c_nvmlProcessInfo_v2_t == _v3_t in pynvml ---------

    def _processes(self, handle: Any, count: Any, infos: Any) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, _, _ = found
        held = self.faults.processes.get(slot, ())
        box = _out(count)
        if not held:
            box.value = 0
            return NVML_SUCCESS  # pynvml: "special case, no running processes"
        if infos is None or box.value < len(held):
            box.value = len(held)  # nvml.h: "infoCount will contain minimal amount of space necessary"
            return NVML_ERROR_INSUFFICIENT_SIZE
        for n, (pid, mib) in enumerate(held):
            infos[n].pid, infos[n].usedGpuMemory = pid, mib * MIB
            infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFF  # nvml.h: when MIG is off
        box.value = len(held)
        return NVML_SUCCESS

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int:
        return self._processes(handle, count, infos)

    def _nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any, count: Any, infos: Any) -> int:
        return self._processes(handle, count, infos)

    # -- NVLink ---------------------------------------------------------------------------------

    def _link_peers(self, slot: int) -> list[int | None]:
        """Peer GPU slot of each link of ``slot`` (None: to an NVSwitch, or wired to nothing)."""
        gpu = self.spec.gpus[slot]
        peers: list[int | None] = [None] * gpu.nvlinks
        if self.spec.nvswitch:
            return peers
        carriers = list(self.spec.bond_links or range(gpu.nvlinks))
        for a, b, links in self.spec.bonds:
            if slot in (a, b):
                for _ in range(links):
                    peers[carriers.pop(0)] = b if slot == a else a
        return peers

    def _link_up(self, slot: int, link: int) -> bool:
        if slot in self.faults.nvlinks_missing or (slot, link) in self.faults.nvlink_down:
            return False
        peer = self._link_peers(slot)[link]
        if peer is None:
            # on an NVSwitch board every link is wired, and trained by the fabric manager: without it
            # "NVSwitches will remain uninitialized" (Fabric Manager user guide, quoted in
            # siderolabs/extensions#717); on a PCIe card a link without a bridge is listed and inactive
            # (NVIDIA/NVSentinel#1481, Azure/azurehpc-health-checks#162)
            return self.spec.nvswitch and not self.faults.fabric_manager_down
        # a bridge link is one cable: down at one end is down at both
        return peer not in self.faults.nvlinks_missing and (peer, link) not in self.faults.nvlink_down

    def _link(self, handle: Any, link: Any) -> tuple[int, GpuSpec, int] | int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        slot, gpu, _ = found
        number = _value(link)
        if gpu.nvlinks == 0:
            return NVML_ERROR_NOT_SUPPORTED  # no NVLink hardware: every link (NVIDIA/NVSentinel#1481)
        if not 0 <= number < gpu.nvlinks:
            return NVML_ERROR_INVALID_ARGUMENT  # past the last link (NVIDIA/TensorRT-LLM#19210)
        return slot, gpu, number

    def _nvmlDeviceGetNvLinkState(self, handle: Any, link: Any, active: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        _out(active).value = int(self._link_up(found[0], found[2]))
        return NVML_SUCCESS

    def _nvmlDeviceGetNvLinkVersion(self, handle: Any, link: Any, version: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        _out(version).value = found[1].nvlink_version
        return NVML_SUCCESS

    def _nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: Any, kind: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        slot, _, number = found
        if not self._link_up(slot, number):
            return NVML_ERROR_UNKNOWN  # as for the remote PCI info: no source says what a down link answers
        peer = self._link_peers(slot)[number]
        _out(kind).value = NVML_NVLINK_DEVICE_TYPE_GPU if peer is not None else NVML_NVLINK_DEVICE_TYPE_SWITCH
        return NVML_SUCCESS

    def _nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: Any, link: Any, info: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        slot, _, number = found
        if not self._link_up(slot, number):
            # What NVML answers for a link that is down is in no source we have; preflight asks only
            # about active links, so an unexpected caller sees an error rather than a guess.
            return NVML_ERROR_UNKNOWN
        peer = self._link_peers(slot)[number]
        if peer is not None:
            _fill_pci(_out(info), self.spec.bus_ids[peer], self.spec.gpus[peer].pci_device_id)  # a bridge
        else:
            switches = self.spec.nvswitch_bus_ids
            if not switches:
                # NVLink-5 switches are not PCI devices of the host (managed over InfiniBand by NVLSM,
                # siderolabs/extensions#717); no source shows their remote PCI info: "not known" here
                return NVML_ERROR_NOT_SUPPORTED
            _fill_pci(_out(info), switches[number % len(switches)], self.spec.nvswitch_device_id)
        return NVML_SUCCESS

    # -- the NVSwitch fabric ------------------------------------------------------------------------

    def _fabric_member(self, gpu: GpuSpec) -> bool:
        """nvml.h: "For Hopper or newer"; "On Hopper + NVSwitch systems, GPU is registered with the NVIDIA
        Fabric Manager". Elsewhere the call is NOT_SUPPORTED ("If device doesn't support gpu fabric"; an
        RTX A6000 on 550.127.05 prints "Fabric State: N/A", smi_q)."""
        return self.spec.nvswitch and gpu.compute_capability >= (9, 0)

    def _fabric(self, handle: Any, info: Any, versioned: bool) -> int:
        found = self._gpu(handle)
        if isinstance(found, int):
            return found
        struct = _out(info)
        if versioned and struct.version not in FABRIC_STRUCT_VERSIONS:
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH  # nvml.h: "The provided version is invalid/unsupported"
        if not self._fabric_member(found[1]):
            return NVML_ERROR_NOT_SUPPORTED
        if self.faults.fabric_manager_down:
            # the Fabric Manager user guide (quoted in siderolabs/extensions#717): "An In Progress state
            # indicates that the GPU is being registered and FabricManager is likely not running";
            # NVIDIA/NVSentinel#889: "fabric.state stays In Progress indefinitely" while it is down
            struct.state, struct.status = NVML_GPU_FABRIC_STATE_IN_PROGRESS, NVML_ERROR_NOT_SUPPORTED
        else:
            struct.state, struct.status = NVML_GPU_FABRIC_STATE_COMPLETED, NVML_SUCCESS  # smi_q/H800: Completed, Success
        return NVML_SUCCESS

    def _nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> int:
        return self._fabric(handle, info, versioned=False)

    def _nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        return self._fabric(handle, info, versioned=True)

    # -- pairs ----------------------------------------------------------------------------------

    def _nvlinked(self, a: int, b: int) -> bool:
        up_a = [link for link in range(self.spec.gpus[a].nvlinks) if self._link_up(a, link)]
        if self.spec.nvswitch:
            up_b = [link for link in range(self.spec.gpus[b].nvlinks) if self._link_up(b, link)]
            return bool(up_a and up_b)
        peers = self._link_peers(a)
        return any(peers[link] == b for link in up_a)

    def _ancestor(self, a: int, b: int) -> int:
        """The PCIe level ``nvidia-smi topo -m`` shows for the pair (PIX/NODE/SYS in the topo captures)."""
        if a == b:
            return NVML_TOPOLOGY_INTERNAL
        switches = self.spec.pcie_switches
        if switches and switches[a] == switches[b]:
            return NVML_TOPOLOGY_SINGLE
        if self.spec.sockets[a] == self.spec.sockets[b]:
            return NVML_TOPOLOGY_NODE
        return NVML_TOPOLOGY_SYSTEM

    def _nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any, level: Any) -> int:
        found_a, found_b = self._gpu(first), self._gpu(second)
        if isinstance(found_a, int):
            return found_a
        if isinstance(found_b, int):
            return found_b
        _out(level).value = self._ancestor(found_a[0], found_b[0])
        return NVML_SUCCESS

    def _nvmlDeviceGetP2PStatus(self, first: Any, second: Any, index: Any, status: Any) -> int:
        found_a, found_b = self._gpu(first), self._gpu(second)
        if isinstance(found_a, int):
            return found_a
        if isinstance(found_b, int):
            return found_b
        (a, gpu_a, _), (b, gpu_b, _) = found_a, found_b
        _out(status).value = self._p2p(a, gpu_a, b, gpu_b, _value(index))
        return NVML_SUCCESS

    def _p2p(self, a: int, gpu_a: GpuSpec, b: int, gpu_b: GpuSpec, caps: int) -> int:
        """NVML_P2P_STATUS_*, with the codes ``nvidia-smi topo -p2p`` prints (OK, CNS, GNS, TNS, NS:
        fixtures/topo/2xRTX3090-topo-p2p-matrix-OK-with-legend)."""
        if self._mig_on(a) or self._mig_on(b):
            return NVML_P2P_STATUS_NOT_SUPPORTED  # no CUDA P2P on MIG (pytorch/pytorch#130181)
        if self._nvlinked(a, b):
            return NVML_P2P_STATUS_OK
        if caps == 2:  # NVML_P2P_CAPS_INDEX_NVLINK: no NVLink between the two
            return NVML_P2P_STATUS_NOT_SUPPORTED
        if not (gpu_a.pcie_p2p and gpu_b.pcie_p2p):
            return NVML_P2P_STATUS_GPU_NOT_SUPPORTED
        if self._ancestor(a, b) >= NVML_TOPOLOGY_SYSTEM:
            return NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        return NVML_P2P_STATUS_OK


# -- reaching it ----------------------------------------------------------------------------------


def spec_for(profile: str) -> ServerSpec:
    """The profile by name; ValueError naming the known ones."""
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown fake profile {profile!r}; known: {', '.join(PROFILES)}") from None


def library_argument(profile: str, faults: Faults | None = None, spec: ServerSpec | None = None) -> str:
    """The transport argument for a profile (or an explicit spec) and faults."""
    document: dict[str, Any] = {"profile": profile, "faults": (faults or Faults()).to_json()}
    if spec is not None:
        document["names"] = [gpu.name for gpu in spec.gpus]
    return json.dumps(document)


def make_library(argument: str) -> FakeNvmlLibrary:
    """The transport's factory: pynvml's ``CDLL("libnvidia-ml.so.1")`` answered with a fake machine.

    ``init_error="LIBRARY_NOT_FOUND"`` raises OSError as ``CDLL`` does without a driver, which pynvml's
    ``_LoadNvmlLibrary`` turns into NVML_ERROR_LIBRARY_NOT_FOUND.
    """
    document = json.loads(argument)
    spec = spec_for(document["profile"])
    names = document.get("names")
    if names:  # a test renaming the GPUs (hostile names in the safety tests)
        spec = ServerSpec(**{**{f.name: getattr(spec, f.name) for f in fields(spec)},
                             "gpus": tuple(_renamed(g, n) for g, n in zip(spec.gpus, names, strict=True))})
    faults = Faults.from_json(document.get("faults", {}))
    if faults.init_error == "LIBRARY_NOT_FOUND":
        raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")
    return FakeNvmlLibrary(spec, faults)


def _renamed(gpu: GpuSpec, name: str) -> GpuSpec:
    return GpuSpec(**{**{f.name: getattr(gpu, f.name) for f in fields(gpu)}, "name": name})


def fake_transport(profile: str, spec: ServerSpec | None = None, **faults: Any) -> NvmlTransport:
    """An NVML transport for the child: ``fake_transport("8x-l40s", persistence_off={2})``."""
    spec_for(profile)
    parsed = Faults.from_json(json.loads(json.dumps(_to_json_value(faults))))
    return NvmlTransport(FACTORY, library_argument(profile, parsed, spec), f"fake:{profile}")


@contextmanager
def installed(profile: str, **faults: Any) -> Iterator[FakeNvmlLibrary | None]:
    """Put a fake machine under this process's pynvml for the block, then restore pynvml.

    For fast in-process tests of the fake and the walk; preflight itself only reaches NVML through
    the child. Never use a hanging profile or fault here.
    """
    parsed = Faults.from_json(json.loads(json.dumps(_to_json_value(faults))))
    spec = spec_for(profile)
    if spec.hung_gpus or parsed.hang_gpus:
        raise ValueError(f"{profile}: a hanging machine would hang this process; reach it through the NVML child")
    saved = pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache), pynvml.CDLL
    library = None if parsed.init_error == "LIBRARY_NOT_FOUND" else FakeNvmlLibrary(spec, parsed)

    def load(name: str, *args: Any, **kwargs: Any) -> FakeNvmlLibrary:
        if library is None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")
        return library

    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.CDLL = load
    try:
        yield library  # None when the fault is "no library at all"
    finally:
        pynvml.nvmlLib, pynvml.CDLL = saved[0], saved[2]
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(saved[1])


def profile_names(hung: bool = False) -> Iterable[str]:
    """Profile names for parametrizing tests; those with hanging GPUs only when ``hung`` (child-only)."""
    return tuple(name for name, spec in PROFILES.items() if hung or not spec.hung_gpus)


def walk_fake(profile: str, **faults: Any) -> NvmlSnapshot:
    """The snapshot preflight's walk takes of a fake machine, in-process (the real binding over the fake)."""
    with installed(profile, **faults):
        return walk(PynvmlBackend(), f"fake:{profile}")
