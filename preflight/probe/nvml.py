"""The NVML calls preflight makes, through the real ``nvidia-ml-py`` binding (module ``pynvml``).

:class:`PynvmlBackend` runs only inside the NVML child process (:mod:`preflight.probe.nvml_child`),
never in the pytest process: a wedged driver can block any NVML call for ever, and only a child can
be killed at a deadline. Tests reach it over a fake NVML C library installed under ``pynvml``
(``tests/fakes/nvml.py``), so pynvml's own structs, buffers, versioned calls and error mapping run.

Rules:

- GPUs are addressed by NVML index (PCI bus order, what ``nvidia-smi`` shows), never by CUDA
  ordinal; joins with CUDA go through UUID or PCI bus id.
- "Not supported on this GPU" (``NVML_ERROR_NOT_SUPPORTED``), "this driver lacks the function"
  (``NVML_ERROR_FUNCTION_NOT_FOUND``, pynvml's ``_nvmlGetFunctionPointer`` turns a missing symbol
  into it) and "this driver does not know that struct version" (``NVML_ERROR_ARGUMENT_VERSION_MISMATCH``,
  nvml.h: "The provided version is invalid/unsupported"; pynvml's ``@throwOnVersionMismatch`` raises
  ``NVMLLibraryMismatchError`` for an unversioned call the driver lacks) are the value
  :data:`NOT_SUPPORTED`: not known, never a failure. A query refused for lack of permission is
  :data:`NO_PERMISSION`. Any other NVML error raises :class:`NvmlQueryError`.
- A GPU that fell off the bus answers ``NVML_ERROR_GPU_IS_LOST`` at any call, the handle call
  included (nvml.h, ``nvmlDeviceGetHandleByIndex_v2``); :attr:`NvmlQueryError.gpu_lost` says so.
- NVML is initialised once (:meth:`PynvmlBackend.start`); when it cannot start, the error says
  the likely cause (:func:`explain_init_error`).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class Absent(enum.Enum):
    """Why a fact has no value: the GPU/driver cannot report it, or the query failed."""

    NOT_SUPPORTED = "not supported"
    NO_PERMISSION = "no permission"  # e.g. process lists of a MIG GPU for a non-root user
    QUERY_FAILED = "query failed"

    def __str__(self) -> str:
        return self.value


NOT_SUPPORTED = Absent.NOT_SUPPORTED
NO_PERMISSION = Absent.NO_PERMISSION
QUERY_FAILED = Absent.QUERY_FAILED

# pynvml spells ``NVML_P2P_CAPS_INDEX_READ = 0,`` (a tuple, trailing comma), which ctypes rejects,
# so the two capability indices preflight uses are restated here as plain ints.
P2P_CAPS_READ = 0
P2P_CAPS_NVLINK = 2
P2P_STATUS_OK = 0

P2P_STATUS_NAMES = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}

# nvmlDeviceGetTopologyCommonAncestor levels and their ``nvidia-smi topo -m`` spelling.
TOPOLOGY_LEVEL_NAMES = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}
TOPOLOGY_LEVEL_SMI = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in nvidia-ml-py 13.x; the loop bound for per-link queries

# nvmlIntNvLinkDeviceType_t (pynvml NVML_NVLINK_DEVICE_TYPE_*): what sits at the far end of a link.
NVLINK_REMOTE_GPU = 0x00
NVLINK_REMOTE_IBMNPU = 0x01
NVLINK_REMOTE_SWITCH = 0x02
NVLINK_REMOTE_UNKNOWN = 0xFF
NVLINK_REMOTE_NAMES = {NVLINK_REMOTE_GPU: "GPU", NVLINK_REMOTE_IBMNPU: "IBM NPU", NVLINK_REMOTE_SWITCH: "NVSwitch",
                       NVLINK_REMOTE_UNKNOWN: "unknown"}

# NVML_GPU_FABRIC_STATE_* (nvml.h "Fabric Probe States"): a GPU's registration with the fabric manager.
FABRIC_NOT_SUPPORTED = 0
FABRIC_NOT_STARTED = 1
FABRIC_IN_PROGRESS = 2
FABRIC_COMPLETED = 3
FABRIC_STATE_NAMES = {FABRIC_NOT_SUPPORTED: "Not Supported", FABRIC_NOT_STARTED: "Not Started",
                      FABRIC_IN_PROGRESS: "In Progress", FABRIC_COMPLETED: "Completed"}

# nvmlComputeMode_t (pynvml NVML_COMPUTEMODE_*), as ``nvidia-smi -q`` prints them.
COMPUTE_DEFAULT = 0
COMPUTE_EXCLUSIVE_THREAD = 1  # "Support Removed" (pynvml)
COMPUTE_PROHIBITED = 2
COMPUTE_EXCLUSIVE_PROCESS = 3
COMPUTE_MODE_NAMES = {COMPUTE_DEFAULT: "Default", COMPUTE_EXCLUSIVE_THREAD: "Exclusive_Thread",
                      COMPUTE_PROHIBITED: "Prohibited", COMPUTE_EXCLUSIVE_PROCESS: "Exclusive_Process"}

# NVML_ERROR_* codes this module treats specially (values from nvml.h, stable across releases).
_ERR_INVALID_ARGUMENT = 2
_ERR_NOT_SUPPORTED = 3
_ERR_NO_PERMISSION = 4
_ERR_NOT_FOUND = 6
_ERR_DRIVER_NOT_LOADED = 9
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_GPU_IS_LOST = 15
_ERR_LIB_RM_VERSION_MISMATCH = 18
_ERR_ARGUMENT_VERSION_MISMATCH = 25
NOT_KNOWN_CODES = (_ERR_NOT_SUPPORTED, _ERR_FUNCTION_NOT_FOUND, _ERR_ARGUMENT_VERSION_MISMATCH)
"""The NVML answers that mean "this GPU or driver cannot say", never "something is wrong"."""


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """Framebuffer memory in bytes as ``nvidia-smi -q`` shows it under "FB Memory Usage".

    ``used`` is what processes allocated; ``reserved`` is what the driver and firmware keep for
    themselves (``nvmlMemory_v2_t``, drivers 510 and newer). With an older driver only the v1
    call exists, whose ``used`` is "Sum of Reserved and Allocated" (nvml.h) and ``reserved`` is
    NOT_SUPPORTED.
    """

    total: int
    used: int
    reserved: int | Absent


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping state (Ampere+): ``pending`` needs a GPU reset, ``failed`` means RMA."""

    corrected: int
    uncorrected: int
    pending: bool
    failed: bool


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """A GPU's place in an NVSwitch fabric (``nvmlGpuFabricInfo_t``; ``nvidia-smi -q`` "Fabric").

    ``state`` is ``NVML_GPU_FABRIC_STATE_*``; ``status`` an ``nvmlReturn_t`` that nvml.h says "must be
    checked only if state returns complete". A healthy HGX H800 on driver 525.105.17 shows "State:
    Completed, Status: Success" (shared/fixtures/smi_q/H800-...); with the fabric manager down the state
    stays "In Progress" (NVIDIA/NVSentinel#889).
    """

    state: int
    status: int

    @property
    def state_name(self) -> str:
        """``Completed``, ``In Progress``, ... (``nvidia-smi -q`` wording)."""
        return FABRIC_STATE_NAMES.get(self.state, f"state {self.state}")

    @property
    def member(self) -> bool:
        """True when the GPU belongs to an NVSwitch fabric at all (NVML reports a registration state)."""
        return self.state != FABRIC_NOT_SUPPORTED

    @property
    def up(self) -> bool:
        """True when the fabric manager registered the GPU without error."""
        return self.state == FABRIC_COMPLETED and self.status == 0


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device of a MIG-enabled GPU as its own NVML handle reports it (nvml.h: "Per-instance
    information can be queried by using specific MIG device handles"): what CUDA would enumerate."""

    uuid: str
    name: str | Absent
    memory_total_bytes: int | Absent
    memory_used_bytes: int | Absent
    compute_mode: int | Absent = Absent.NOT_SUPPORTED


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process holding memory on a GPU. ``pid`` is a host pid (NVML ignores pid namespaces)."""

    pid: int
    used_memory_bytes: int | None  # bytes; None when NVML cannot tell


class NvmlUnavailableError(RuntimeError):
    """NVML could not start. ``code`` is stable for verdicts; ``cause`` says what is likely wrong."""

    def __init__(self, code: str, cause: str, remediation: str, nvml_error: str = "") -> None:
        self.code = code
        self.cause = cause
        self.remediation = remediation
        self.nvml_error = nvml_error
        super().__init__(f"NVML unavailable: {cause}" + (f" ({nvml_error})" if nvml_error else ""))


class NvmlQueryError(RuntimeError):
    """An NVML query failed for a reason other than "not supported" (GPU lost, permission, ...)."""

    def __init__(self, call: str, nvml_error: str, code: int | None) -> None:
        self.call = call
        self.nvml_error = nvml_error
        self.code = code
        super().__init__(f"{call}: {nvml_error}")

    @property
    def gpu_lost(self) -> bool:
        """True for NVML_ERROR_GPU_IS_LOST (the GPU fell off the bus, usually XID 79)."""
        return self.code == _ERR_GPU_IS_LOST


_INIT_CAUSES: dict[int, tuple[str, str, str]] = {
    _ERR_LIBRARY_NOT_FOUND: (
        "NVML_LIBRARY_NOT_FOUND",
        "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine, or a container started "
        "without the NVIDIA runtime",
        "Install the NVIDIA driver, or start the container with GPUs (docker run --gpus all, "
        "or the nvidia-container-toolkit runtime).",
    ),
    _ERR_DRIVER_NOT_LOADED: (
        "NVML_DRIVER_NOT_LOADED",
        "the NVIDIA kernel driver is not loaded",
        "Load it with `sudo modprobe nvidia` and read `sudo dmesg | grep -i -e nvrm -e nvidia` "
        "(Secure Boot rejecting an unsigned module is a common cause).",
    ),
    _ERR_LIB_RM_VERSION_MISMATCH: (
        "NVML_DRIVER_LIBRARY_MISMATCH",
        "the driver library and the loaded kernel module are different versions (driver upgraded without a reboot)",
        "Reboot the machine, or stop every GPU process and reload the modules "
        "(`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`).",
    ),
    _ERR_NO_PERMISSION: (
        "NVML_NO_PERMISSION",
        "no permission to open the GPU device files (/dev/nvidia*)",
        "Run as a user allowed to open /dev/nvidia* (often the `video` group), or give the container the GPU devices.",
    ),
}


def explain_init_error(code: int | None, text: str) -> NvmlUnavailableError:
    """The :class:`NvmlUnavailableError` for an ``nvmlInit`` failure with NVML error ``code``."""
    known = _INIT_CAUSES.get(code) if code is not None else None
    if known is None:
        return NvmlUnavailableError(
            "NVML_INIT_FAILED",
            f"nvmlInit failed with NVML error {code}",
            "Run `nvidia-smi`; if it fails too, the driver installation is broken.",
            text,
        )
    return NvmlUnavailableError(*known, nvml_error=text)


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    """Very old nvidia-ml-py wheels return bytes for strings."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _map(value: Any, convert: Callable[[Any], T]) -> T | Absent:
    return value if isinstance(value, Absent) else convert(value)


class PynvmlBackend:
    """The NVML queries preflight makes, over the ``pynvml`` module (child process only)."""

    def __init__(self) -> None:
        self._pynvml: Any = None
        self._handles: dict[int, Any] = {}

    # -- initialisation -------------------------------------------------------------------------

    def start(self) -> None:
        """``nvmlInit``; raises :class:`NvmlUnavailableError` naming the likely cause."""
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailableError(
                "NVML_BINDINGS_MISSING",
                "the nvidia-ml-py package (module pynvml) is not installed",
                "pip install nvidia-ml-py",
                str(exc),
            ) from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise explain_init_error(_error_code(exc), str(exc)) from exc
        self._pynvml = pynvml

    def shutdown(self) -> None:
        """``nvmlShutdown`` (errors ignored: the child exits right after)."""
        if self._pynvml is None:
            return
        self._handles.clear()
        with contextlib.suppress(self._pynvml.NVMLError):
            self._pynvml.nvmlShutdown()

    # -- plumbing -------------------------------------------------------------------------------

    def _call(self, function: str, *args: Any) -> Any:
        """Call ``pynvml.<function>(*args)``; NVML errors become :class:`NvmlQueryError`."""
        lib = self._pynvml
        if lib is None:
            raise RuntimeError("PynvmlBackend.start() was not called")
        call = getattr(lib, function, None)
        if call is None:
            raise NvmlQueryError(function, "not in this nvidia-ml-py", _ERR_FUNCTION_NOT_FOUND)
        try:
            return call(*args)
        except lib.NVMLError as exc:
            raise NvmlQueryError(function, str(exc), _error_code(exc)) from exc
        except lib.NVMLLibraryMismatchError as exc:
            # pynvml's @throwOnVersionMismatch turns FUNCTION_NOT_FOUND of an unversioned call (the _v3
            # process query) into this non-NVMLError exception (pynvml.py throwOnVersionMismatch): the
            # binding and the driver disagree on a version, which is "not known" here.
            raise NvmlQueryError(function, str(exc), _ERR_ARGUMENT_VERSION_MISMATCH) from exc

    def _query(self, function: str, *args: Any, absent_codes: tuple[int, ...] = ()) -> Any:
        """Like :meth:`_call`, but "not supported" (and ``absent_codes``) give NOT_SUPPORTED."""
        try:
            return self._call(function, *args)
        except NvmlQueryError as exc:
            if exc.code in (*NOT_KNOWN_CODES, *absent_codes):
                return NOT_SUPPORTED
            if exc.code == _ERR_NO_PERMISSION:
                return NO_PERMISSION
            raise

    def open(self, index: int) -> None:
        """Get the GPU's handle (raises :class:`NvmlQueryError`, GPU_IS_LOST for a GPU off the bus)."""
        self._handle(index)

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            self._handles[index] = handle
        return handle

    # -- system ---------------------------------------------------------------------------------

    def device_count(self) -> int:
        """Number of GPUs NVML sees (``nvidia-smi -L | wc -l``)."""
        return int(self._call("nvmlDeviceGetCount"))

    def driver_version(self) -> str:
        """Kernel driver version, e.g. ``"550.54.15"`` (``nvidia-smi --query-gpu=driver_version``)."""
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int | Absent:
        """Newest CUDA the driver supports as ``1000*major + 10*minor`` (``CUDA Version`` in nvidia-smi)."""
        return _map(self._query("nvmlSystemGetCudaDriverVersion"), int)

    # -- identity and memory --------------------------------------------------------------------

    def name(self, index: int) -> str:
        """Product name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
        return _text(self._call("nvmlDeviceGetName", self._handle(index)))

    def uuid(self, index: int) -> str:
        """``GPU-xxxxxxxx-...`` as ``nvidia-smi -L`` prints it."""
        return _text(self._call("nvmlDeviceGetUUID", self._handle(index)))

    def serial(self, index: int) -> str | Absent:
        """The board's serial number (``nvidia-smi -q`` "Serial Number"); NOT_SUPPORTED without an inforom."""
        return _map(self._query("nvmlDeviceGetSerial", self._handle(index)), _text)

    def pci_bus_id(self, index: int) -> str:
        """PCI bus id with 8-digit domain, e.g. ``"00000000:18:00.0"``."""
        return _text(self._call("nvmlDeviceGetPciInfo", self._handle(index)).busId).upper()

    def pci_device_id(self, index: int) -> int:
        """``nvmlPciInfo_t.pciDeviceId``: device id in the high 16 bits, vendor 0x10DE in the low ones
        (``nvidia-smi -q`` "Device Id : 0x232410DE" on an H800)."""
        return int(self._call("nvmlDeviceGetPciInfo", self._handle(index)).pciDeviceId)

    def memory(self, index: int) -> MemoryInfo:
        """Framebuffer total/used/reserved: the v2 call where the driver has it, else v1."""
        return self._memory(self._handle(index))

    def _memory(self, handle: Any) -> MemoryInfo:
        lib = self._pynvml
        version = getattr(lib, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = self._call("nvmlDeviceGetMemoryInfo", handle, version)
                return MemoryInfo(total=int(info.total), used=int(info.used), reserved=int(info.reserved))
            except NvmlQueryError as exc:
                # drivers before 510 lack nvmlDeviceGetMemoryInfo_v2; a struct version the driver does not
                # take answers FUNCTION_NOT_FOUND there (jp7677/dxvk-nvapi#198), newer calls say so as
                # ARGUMENT_VERSION_MISMATCH (nvml.h)
                if exc.code not in (_ERR_FUNCTION_NOT_FOUND, _ERR_ARGUMENT_VERSION_MISMATCH):
                    raise
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        return MemoryInfo(total=int(info.total), used=int(info.used), reserved=NOT_SUPPORTED)

    def compute_capability(self, index: int) -> tuple[int, int] | Absent:
        """(major, minor), e.g. (9, 0) for H100."""
        value = self._query("nvmlDeviceGetCudaComputeCapability", self._handle(index))
        return _map(value, lambda cc: (int(cc[0]), int(cc[1])))

    # -- modes ----------------------------------------------------------------------------------

    def persistence_mode(self, index: int) -> bool | Absent:
        """``nvidia-smi --query-gpu=persistence_mode``."""
        return _map(self._query("nvmlDeviceGetPersistenceMode", self._handle(index)), bool)

    def mig_mode(self, index: int) -> tuple[bool, bool] | Absent:
        """(current, pending) MIG mode (``nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending``)."""
        value = self._query("nvmlDeviceGetMigMode", self._handle(index))
        return _map(value, lambda mode: (bool(mode[0]), bool(mode[1])))

    def mig_instances(self, index: int) -> tuple[MigInstance, ...] | Absent:
        """The MIG devices configured on a MIG-enabled GPU, each read through its own handle: its
        ``MIG-...`` UUID, its name (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``), its memory and compute mode."""
        handle = self._handle(index)
        slots = self._query("nvmlDeviceGetMaxMigDeviceCount", handle)
        if isinstance(slots, Absent):
            return slots
        found: list[MigInstance] = []
        for slot in range(int(slots)):
            mig = self._query(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                handle,
                slot,
                absent_codes=(_ERR_INVALID_ARGUMENT, _ERR_NOT_FOUND),
            )
            if isinstance(mig, Absent):
                continue
            name = _map(self._query("nvmlDeviceGetName", mig), _text)
            memory: MemoryInfo | Absent
            try:
                memory = self._memory(mig)
            except NvmlQueryError as exc:
                if exc.code not in NOT_KNOWN_CODES:
                    raise
                memory = NOT_SUPPORTED
            mode = _map(self._query("nvmlDeviceGetComputeMode", mig), int)
            found.append(MigInstance(
                uuid=_text(self._call("nvmlDeviceGetUUID", mig)), name=name,
                memory_total_bytes=memory if isinstance(memory, Absent) else memory.total,
                memory_used_bytes=memory if isinstance(memory, Absent) else memory.used, compute_mode=mode))
        return tuple(found)

    def compute_mode(self, index: int) -> int | Absent:
        """``NVML_COMPUTEMODE_*`` (``nvidia-smi --query-gpu=compute_mode``). nvml.h: with MIG on, only a
        MIG device handle answers (see :meth:`mig_instances`)."""
        return _map(self._query("nvmlDeviceGetComputeMode", self._handle(index)), int)

    def fabric(self, index: int) -> FabricInfo | Absent:
        """The GPU's NVSwitch fabric registration (nvml.h: "For Hopper or newer"; NOT_SUPPORTED on a GPU
        without a fabric). The versioned call (NVML 12.4, R550: go-nvml f7ceebd) with pynvml's
        ``c_nvmlGpuFabricInfoV_t`` (the v2 struct) first, else the unversioned one (NVML 12.0, R525:
        go-nvml 399f8e0); a driver older than both has neither (FUNCTION_NOT_FOUND: not known)."""
        handle = self._handle(index)
        lib = self._pynvml
        for function, struct in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
            kind = getattr(lib, struct, None)
            if kind is None:
                continue  # not in this nvidia-ml-py
            info = kind()
            answer = self._query(function, handle, ctypes.byref(info))
            if answer is NOT_SUPPORTED:
                continue
            if isinstance(answer, Absent):
                return answer
            # pynvml declares the state c_uint where nvml.h has an unsigned char; ctypes zeroes the rest
            return FabricInfo(state=int(info.state) & 0xFF, status=int(info.status))
        return NOT_SUPPORTED

    def ecc_mode(self, index: int) -> tuple[bool, bool] | Absent:
        """(current, pending) ECC mode; NOT_SUPPORTED on most GeForce and workstation parts."""
        value = self._query("nvmlDeviceGetEccMode", self._handle(index))
        return _map(value, lambda mode: (bool(mode[0]), bool(mode[1])))

    # -- memory health --------------------------------------------------------------------------

    def ecc_uncorrected(self, index: int, aggregate: bool) -> int | Absent:
        """Uncorrectable ECC errors since driver load (volatile) or over the GPU's life (aggregate)."""
        counter = 1 if aggregate else 0  # NVML_AGGREGATE_ECC / NVML_VOLATILE_ECC
        value = self._query("nvmlDeviceGetTotalEccErrors", self._handle(index), 1, counter)  # 1 = UNCORRECTED
        return _map(value, int)

    def retired_pages(self, index: int, double_bit: bool) -> int | Absent:
        """Pages retired for double-bit errors or for repeated single-bit errors (pre-Ampere)."""
        cause = 1 if double_bit else 0  # NVML_PAGE_RETIREMENT_CAUSE_{DOUBLE_BIT_ECC_ERROR,MULTIPLE_SINGLE_BIT}
        return _map(self._query("nvmlDeviceGetRetiredPages", self._handle(index), cause), len)

    def retired_pages_pending(self, index: int) -> bool | Absent:
        """True when a retirement waits for the next driver reload (``Pending Page Blacklist``)."""
        return _map(self._query("nvmlDeviceGetRetiredPagesPendingStatus", self._handle(index)), bool)

    def remapped_rows(self, index: int) -> RemappedRows | Absent:
        """Row remapping counters (A100 and newer; NOT_SUPPORTED before Ampere)."""
        value = self._query("nvmlDeviceGetRemappedRows", self._handle(index))
        return _map(value, lambda rows: RemappedRows(int(rows[0]), int(rows[1]), bool(rows[2]), bool(rows[3])))

    # -- link, clocks, temperature, processes ---------------------------------------------------

    def pcie_link(self, index: int, current: bool) -> tuple[int, int] | Absent:
        """(generation, width) now, or the most the GPU and its slot allow together."""
        handle = self._handle(index)
        which = "Curr" if current else "Max"
        gen = self._query(f"nvmlDeviceGet{which}PcieLinkGeneration", handle)
        width = self._query(f"nvmlDeviceGet{which}PcieLinkWidth", handle)
        if isinstance(gen, Absent) or isinstance(width, Absent):
            return NOT_SUPPORTED
        return (int(gen), int(width))

    def clock_event_reasons(self, index: int) -> int | Absent:
        """Bitmask of ``nvmlClocksEventReason*`` (drivers before 535 only have the "throttle reasons" call)."""
        handle = self._handle(index)
        value = self._query("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if isinstance(value, Absent):
            value = self._query("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return _map(value, int)

    def temperature(self, index: int) -> int | Absent:
        """GPU core temperature in Celsius."""
        return _map(self._query("nvmlDeviceGetTemperature", self._handle(index), 0), int)

    def compute_processes(self, index: int) -> tuple[GpuProcess, ...] | Absent:
        """Compute processes with a context on the GPU (``nvidia-smi --query-compute-apps``).

        pynvml's unversioned call uses the ``_v3`` symbol (drivers 510+); older drivers answer
        the ``_v2`` call (R450+), and before that there is no process list preflight can read.
        """
        handle = self._handle(index)
        value = self._query("nvmlDeviceGetComputeRunningProcesses", handle)
        if value is NOT_SUPPORTED:
            value = self._query("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        return _map(
            value,
            lambda procs: tuple(
                GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs
            ),
        )

    # -- NVLink and pairs -----------------------------------------------------------------------

    def nvlink_state(self, index: int, link: int) -> bool | Absent:
        """Whether NVLink ``link`` is active; NOT_SUPPORTED when the GPU has no such link."""
        value = self._query(
            "nvmlDeviceGetNvLinkState", self._handle(index), link, absent_codes=(_ERR_INVALID_ARGUMENT,)
        )
        return _map(value, bool)

    def nvlink_version(self, index: int, link: int) -> int | Absent:
        """``NVML_NVLINK_VERSION_*`` of ``link`` (4 = 3.0 on A100, 6 = 4.0 on H100)."""
        value = self._query(
            "nvmlDeviceGetNvLinkVersion", self._handle(index), link, absent_codes=(_ERR_INVALID_ARGUMENT,)
        )
        return _map(value, int)

    def nvlink_remote_type(self, index: int, link: int) -> int | Absent:
        """``NVML_NVLINK_DEVICE_TYPE_*`` at the far end of ``link``: a GPU (a bridge or a board link), an
        NVSwitch, an IBM NPU (POWER9); NOT_SUPPORTED before NVML 11.4 (R470: go-nvml 15056a1)."""
        value = self._query("nvmlDeviceGetNvLinkRemoteDeviceType", self._handle(index), link,
                            absent_codes=(_ERR_INVALID_ARGUMENT,))
        return _map(value, int)

    def nvlink_remote_bus_id(self, index: int, link: int) -> str | Absent:
        """PCI bus id at the far end of ``link``: the peer GPU over a bridge, an NVSwitch on HGX boards."""
        value = self._query("nvmlDeviceGetNvLinkRemotePciInfo", self._handle(index), link)
        return _map(value, lambda info: _text(info.busId).upper())

    def p2p_status(self, index_a: int, index_b: int, caps: int) -> int | Absent:
        """``NVML_P2P_STATUS_*`` for capability ``caps`` (:data:`P2P_CAPS_READ` or :data:`P2P_CAPS_NVLINK`)."""
        value = self._query("nvmlDeviceGetP2PStatus", self._handle(index_a), self._handle(index_b), int(caps))
        return _map(value, int)

    def common_ancestor(self, index_a: int, index_b: int) -> int | Absent:
        """Deepest common PCIe ancestor (``NVML_TOPOLOGY_*``); says nothing about NVLink."""
        value = self._query("nvmlDeviceGetTopologyCommonAncestor", self._handle(index_a), self._handle(index_b))
        return _map(value, int)
