"""One typed picture of what NVML said about the node, taken once per run.

:class:`NvmlSnapshot` is the only NVML fact preflight's pytest process ever holds: the driver, every
GPU (:class:`GpuInfo`, with its NVLinks as :class:`NvLinkInfo`), every GPU pair
(:class:`GpuPair`), or why there are none (:class:`SnapshotError`, e.g. ``NVML_TIMEOUT``). It is
built by :func:`preflight.probe.nvml_walk.walk` inside the NVML child process and crosses the
process boundary as JSON (:meth:`NvmlSnapshot.to_json` / :meth:`NvmlSnapshot.from_json`).

Values follow :mod:`preflight.probe.nvml`: a fact the GPU or driver cannot report is
:data:`~preflight.probe.nvml.NOT_SUPPORTED`, a query that failed is
:data:`~preflight.probe.nvml.QUERY_FAILED` with the NVML error kept in ``query_errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from preflight.parse.visible_devices import GpuIdentity
from preflight.probe.nvml import (
    COMPUTE_MODE_NAMES,
    NVLINK_REMOTE_NAMES,
    P2P_STATUS_OK,
    TOPOLOGY_LEVEL_SMI,
    Absent,
    FabricInfo,
    GpuProcess,
    MigInstance,
    RemappedRows,
)

T = TypeVar("T")
MIB = 1024 * 1024

# nvmlClocksEventReason* bits and the words ``nvidia-smi -q`` prints for them.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "Idle",
    0x002: "Applications Clocks Setting",
    0x004: "SW Power Cap",
    0x008: "HW Slowdown",
    0x010: "Sync Boost",
    0x020: "SW Thermal Slowdown",
    0x040: "HW Thermal Slowdown",
    0x080: "HW Power Brake Slowdown",
    0x100: "Display Clock Setting",
}
# The reasons that mean clocks are held down by heat or power (not by idling or a user setting).
THROTTLE_REASON_BITS = 0x004 | 0x008 | 0x020 | 0x040 | 0x080


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the set bits, unknown bits as ``0x...``; ``()`` for no reason at all."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown {unknown:#x}")
    return tuple(names)


# -- the wire format: Absent as {"absent": "..."}, tuples as lists --------------------------------


def _put(value: Any) -> Any:
    """A snapshot value as plain JSON (the child's side of the boundary)."""
    if isinstance(value, Absent):
        return {"absent": value.value}
    if isinstance(value, tuple):
        return [_put(item) for item in value]
    if isinstance(value, RemappedRows):
        return {"corrected": value.corrected, "uncorrected": value.uncorrected,
                "pending": value.pending, "failed": value.failed}
    if isinstance(value, GpuProcess):
        return {"pid": value.pid, "used_memory_bytes": value.used_memory_bytes}
    if isinstance(value, FabricInfo):
        return {"state": value.state, "status": value.status}
    if isinstance(value, MigInstance):
        return {"uuid": value.uuid, "name": _put(value.name), "memory_total_bytes": _put(value.memory_total_bytes),
                "memory_used_bytes": _put(value.memory_used_bytes), "compute_mode": _put(value.compute_mode)}
    return value


def _take(raw: Any, convert: Callable[[Any], T]) -> T | Absent:
    """The parent's side: ``{"absent": ...}`` back to :class:`Absent`, anything else through ``convert``."""
    if isinstance(raw, dict) and set(raw) == {"absent"}:
        return Absent(raw["absent"])
    return convert(raw)


def _pair_of_ints(raw: Any) -> tuple[int, int]:
    return (int(raw[0]), int(raw[1]))


def _rows(raw: Any) -> RemappedRows:
    return RemappedRows(int(raw["corrected"]), int(raw["uncorrected"]), bool(raw["pending"]), bool(raw["failed"]))


def _fabric(raw: Any) -> FabricInfo:
    return FabricInfo(int(raw["state"]), int(raw["status"]))


def _mig_instances(raw: Any) -> tuple[MigInstance, ...]:
    return tuple(MigInstance(str(m["uuid"]), _take(m["name"], str), _take(m["memory_total_bytes"], int),
                             _take(m["memory_used_bytes"], int), _take(m["compute_mode"], int)) for m in raw)


def _processes(raw: Any) -> tuple[GpuProcess, ...]:
    return tuple(
        GpuProcess(int(p["pid"]), None if p["used_memory_bytes"] is None else int(p["used_memory_bytes"])) for p in raw
    )


def _json(value: Any) -> Any:
    """Report form: Absent as its text, tuples as lists."""
    if isinstance(value, Absent):
        return str(value)
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def _mib(value: int | Absent) -> int | str:
    return str(value) if isinstance(value, Absent) else value // MIB


# -- the facts ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NvLinkInfo:
    """One NVLink NVML lists for a GPU (up or down).

    ``remote_bus_id`` is the PCI bus id at the far end of an active link: a peer GPU of this node
    (an NVLink bridge or a direct board link) or an NVSwitch; ``remote_type`` says which
    (``NVML_NVLINK_DEVICE_TYPE_*``). Both are None for a link that is down (there is no far end to
    ask about).
    """

    link: int
    active: bool
    version: int | Absent
    remote_bus_id: str | Absent | None
    remote_type: int | Absent | None = None

    @property
    def remote_name(self) -> str:
        """``GPU``, ``NVSwitch``, ... or why it is not known."""
        kind = self.remote_type
        if kind is None:
            return "none (link down)"
        return str(kind) if isinstance(kind, Absent) else NVLINK_REMOTE_NAMES.get(kind, f"type {kind:#x}")

    def to_json(self) -> dict[str, Any]:
        """Wire form."""
        return {"link": self.link, "active": self.active, "version": _put(self.version),
                "remote_bus_id": _put(self.remote_bus_id), "remote_type": _put(self.remote_type)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> NvLinkInfo:
        """Back from :meth:`to_json`."""
        remote, kind = raw["remote_bus_id"], raw.get("remote_type")
        return cls(int(raw["link"]), bool(raw["active"]), _take(raw["version"], int),
                   None if remote is None else _take(remote, str), None if kind is None else _take(kind, int))


class GpuReference(TypedDict):
    """The GPU a per-GPU check is about, as the report's ``check_gpu`` holds it: NVML index, bus id, UUID,
    serial and model (each a value, or why NVML has none), and its CUDA index in the job (None outside it)."""

    index: int
    pci_bus_id: str
    uuid: str
    serial: str
    name: str
    cuda_index: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """Everything NVML said about one GPU; each name carries its unit (``_bytes``, ``_c`` for Celsius)."""

    index: int  # NVML index = nvidia-smi index (PCI bus order)
    name: str | Absent
    uuid: str | Absent
    pci_bus_id: str | Absent
    memory_total_bytes: int | Absent
    memory_used_bytes: int | Absent  # allocated by processes (v2 call); includes the reserve with a pre-510 driver
    memory_reserved_bytes: int | Absent  # the driver/firmware keeps (v2 .reserved); NOT_SUPPORTED before 510
    compute_capability: tuple[int, int] | Absent
    persistence_mode: bool | Absent
    mig_enabled: bool | Absent
    mig_pending: bool | Absent
    mig_instances: tuple[MigInstance, ...] | Absent  # () unless MIG is on
    ecc_enabled: bool | Absent
    ecc_pending: bool | Absent
    ecc_uncorrected_volatile: int | Absent
    ecc_uncorrected_aggregate: int | Absent
    retired_pages_single_bit: int | Absent
    retired_pages_double_bit: int | Absent
    retired_pages_pending: bool | Absent
    remapped_rows: RemappedRows | Absent
    pcie_current: tuple[int, int] | Absent  # (generation, width)
    pcie_max: tuple[int, int] | Absent
    clock_event_reasons: int | Absent
    temperature_c: int | Absent
    processes: tuple[GpuProcess, ...] | Absent
    nvlinks: tuple[NvLinkInfo, ...] | Absent = ()  # every link NVML lists; () for a GPU without NVLink
    serial: str | Absent = Absent.NOT_SUPPORTED  # board serial; only boards with an inforom report one
    pci_device_id: int | Absent = Absent.NOT_SUPPORTED  # nvmlPciInfo_t.pciDeviceId, e.g. 0x232410DE
    compute_mode: int | Absent = Absent.NOT_SUPPORTED  # NVML_COMPUTEMODE_*; with MIG on, per instance
    fabric: FabricInfo | Absent = Absent.NOT_SUPPORTED  # NVSwitch fabric registration (Hopper and newer)
    query_errors: Mapping[str, str] = field(default_factory=dict)
    gpu_lost: bool = False  # some query answered NVML_ERROR_GPU_IS_LOST (the walk then stops asking)

    @property
    def label(self) -> str:
        """``GPU 3 (NVIDIA H100 80GB HBM3, 00000000:5D:00.0)`` for summaries."""
        return f"GPU {self.index} ({self.name}, {self.pci_bus_id})"

    @property
    def clock_event_names(self) -> tuple[str, ...] | Absent:
        """The clock event (throttle) reasons as ``nvidia-smi -q`` names them."""
        reasons = self.clock_event_reasons
        return reasons if isinstance(reasons, Absent) else decode_clock_event_reasons(reasons)

    @property
    def mig_devices(self) -> tuple[str, ...] | Absent:
        """UUIDs (``MIG-...``) of the MIG devices configured on the GPU."""
        found = self.mig_instances
        return found if isinstance(found, Absent) else tuple(m.uuid for m in found)

    @property
    def device_id(self) -> str | None:
        """The PCI device id as ``lspci -nn`` writes it (``10de:2324``); None when unknown."""
        raw = self.pci_device_id
        return None if isinstance(raw, Absent) else f"{raw & 0xFFFF:04x}:{raw >> 16:04x}"

    @property
    def compute_mode_name(self) -> str:
        """``Default``, ``Exclusive_Process``, ``Prohibited`` or why it is not known."""
        mode = self.compute_mode
        return str(mode) if isinstance(mode, Absent) else COMPUTE_MODE_NAMES.get(mode, f"mode {mode}")

    @property
    def nvlinks_present(self) -> int:
        """How many NVLinks NVML lists for the GPU, up or down (0 when unknown)."""
        return 0 if isinstance(self.nvlinks, Absent) else len(self.nvlinks)

    @property
    def nvlinks_active(self) -> int:
        """How many of them are up (0 when unknown)."""
        return 0 if isinstance(self.nvlinks, Absent) else sum(1 for link in self.nvlinks if link.active)

    def identity(self) -> GpuIdentity | None:
        """What visible-device resolution needs; None when the UUID or bus id is unknown."""
        if isinstance(self.uuid, Absent) or isinstance(self.pci_bus_id, Absent):
            return None
        return GpuIdentity(
            nvml_index=self.index,
            uuid=self.uuid,
            pci_bus_id=self.pci_bus_id,
            name=str(self.name),
            compute_capability=None if isinstance(self.compute_capability, Absent) else self.compute_capability,
            mig_enabled=self.mig_enabled is True,
            mig_uuids=() if isinstance(self.mig_devices, Absent) else self.mig_devices,
        )

    def reference(self, cuda_index: int | None) -> GpuReference:
        """Which GPU a per-GPU check is about, for a machine reading the report, with its ``cuda_index`` in the job."""
        return {"index": self.index, "pci_bus_id": str(self.pci_bus_id), "uuid": str(self.uuid),
                "serial": str(self.serial), "name": str(self.name), "cuda_index": cuda_index}

    def table_row(self) -> dict[str, str | int]:
        """One flat row of the GPU table (what ``nvidia-smi`` shows, plus the health counters)."""

        def text(value: Any, render: Callable[[Any], str] = str) -> str:
            return str(value) if isinstance(value, Absent) else render(value)

        rows = self.remapped_rows
        return {
            "gpu": self.index,
            "name": text(self.name),
            "bus_id": text(self.pci_bus_id),
            "memory_mib": f"{_mib(self.memory_used_bytes)} / {_mib(self.memory_total_bytes)}",
            "cc": text(self.compute_capability, lambda cc: f"{cc[0]}.{cc[1]}"),
            "persistence": text(self.persistence_mode, lambda on: "on" if on else "off"),
            "mig": text(self.mig_enabled, lambda on: "on" if on else "off"),
            "ecc_uncorrected": f"{text(self.ecc_uncorrected_volatile)} / {text(self.ecc_uncorrected_aggregate)}",
            "memory_repairs": text(rows, lambda r: "failed" if r.failed else "pending" if r.pending else "ok")
            if not isinstance(rows, Absent)
            else text(self.retired_pages_pending, lambda p: "retirement pending" if p else "ok"),
            "pcie": f"{text(self.pcie_current, lambda link: f'Gen{link[0]} x{link[1]}')} of "
            f"{text(self.pcie_max, lambda link: f'Gen{link[0]} x{link[1]}')}",
            "temp_c": text(self.temperature_c),
            "clock_reasons": text(self.clock_event_names, lambda names: ", ".join(names) or "none"),
            "processes": text(self.processes, lambda procs: str(len(procs))),
        }

    def as_dict(self) -> dict[str, Any]:
        """The report's form: numbers with their unit in the key (bytes, Celsius), what NVML could not
        report as its reason (``"not supported"``), never a display string."""
        rows = self.remapped_rows
        return {
            "index": self.index, "name": _json(self.name), "uuid": _json(self.uuid),
            "pci_bus_id": _json(self.pci_bus_id), "serial": _json(self.serial),
            "memory_total_bytes": _json(self.memory_total_bytes), "memory_used_bytes": _json(self.memory_used_bytes),
            "memory_reserved_bytes": _json(self.memory_reserved_bytes),
            "compute_capability": _json(self.compute_capability) if isinstance(self.compute_capability, Absent)
            else f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "persistence_mode": _json(self.persistence_mode), "mig_enabled": _json(self.mig_enabled),
            "compute_mode": self.compute_mode_name,
            "fabric_state": _json(self.fabric) if isinstance(self.fabric, Absent) else self.fabric.state_name,
            "ecc_enabled": _json(self.ecc_enabled), "ecc_uncorrected_volatile": _json(self.ecc_uncorrected_volatile),
            "ecc_uncorrected_aggregate": _json(self.ecc_uncorrected_aggregate),
            "remapped_rows": str(rows) if isinstance(rows, Absent) else
            {"corrected": rows.corrected, "uncorrected": rows.uncorrected, "pending": rows.pending,
             "failed": rows.failed},
            "retired_pages_pending": _json(self.retired_pages_pending),
            "pcie_current": _json(self.pcie_current) if isinstance(self.pcie_current, Absent)
            else {"generation": self.pcie_current[0], "width": self.pcie_current[1]},
            "pcie_max": _json(self.pcie_max) if isinstance(self.pcie_max, Absent)
            else {"generation": self.pcie_max[0], "width": self.pcie_max[1]},
            "temperature_c": _json(self.temperature_c),
            "clock_event_reasons": _json(self.clock_event_names),
            "processes": _json(self.processes) if isinstance(self.processes, Absent)
            else [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in self.processes],
            "nvlinks_active": self.nvlinks_active, "nvlinks_present": self.nvlinks_present,
            "gpu_lost": self.gpu_lost, "query_errors": dict(self.query_errors),
        }

    def to_json(self) -> dict[str, Any]:
        """Wire form (every field, Absent kept as ``{"absent": ...}``)."""
        return {
            "index": self.index,
            **{name: _put(getattr(self, name)) for name in _GPU_FIELDS},
            "nvlinks": _put(self.nvlinks) if isinstance(self.nvlinks, Absent) else [n.to_json() for n in self.nvlinks],
            "query_errors": dict(self.query_errors),
            "gpu_lost": self.gpu_lost,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpuInfo:
        """Back from :meth:`to_json`."""
        values = {name: _take(raw[name], convert) for name, convert in _GPU_FIELDS.items()}
        nvlinks = _take(raw["nvlinks"], lambda links: tuple(NvLinkInfo.from_json(n) for n in links))
        return cls(index=int(raw["index"]), nvlinks=nvlinks, query_errors=dict(raw["query_errors"]),
                   gpu_lost=bool(raw["gpu_lost"]), **values)


_GPU_FIELDS: dict[str, Callable[[Any], Any]] = {
    "name": str,
    "uuid": str,
    "pci_bus_id": str,
    "serial": str,
    "memory_total_bytes": int,
    "memory_used_bytes": int,
    "memory_reserved_bytes": int,
    "compute_capability": _pair_of_ints,
    "persistence_mode": bool,
    "mig_enabled": bool,
    "mig_pending": bool,
    "mig_instances": _mig_instances,
    "ecc_enabled": bool,
    "ecc_pending": bool,
    "ecc_uncorrected_volatile": int,
    "ecc_uncorrected_aggregate": int,
    "retired_pages_single_bit": int,
    "retired_pages_double_bit": int,
    "retired_pages_pending": bool,
    "remapped_rows": _rows,
    "pcie_current": _pair_of_ints,
    "pcie_max": _pair_of_ints,
    "clock_event_reasons": int,
    "temperature_c": int,
    "processes": _processes,
    "pci_device_id": int,
    "compute_mode": int,
    "fabric": _fabric,
}
"""GpuInfo's NVML-valued fields (each ``X | Absent``) and how each comes back from JSON."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuPair:
    """What NVML said about one pair of GPUs (``a < b``, NVML indices)."""

    a: int
    b: int
    nvlink_p2p: int | Absent  # NVML_P2P_STATUS_* for NVML_P2P_CAPS_INDEX_NVLINK
    read_p2p: int | Absent  # NVML_P2P_STATUS_* for NVML_P2P_CAPS_INDEX_READ (over NVLink or PCIe)
    common_ancestor: int | Absent  # NVML_TOPOLOGY_*: the PCIe path only, says nothing about NVLink
    query_errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def nvlink(self) -> bool | None:
        """NVLink peer-to-peer usable between the two; None when NVML cannot tell."""
        return None if isinstance(self.nvlink_p2p, Absent) else self.nvlink_p2p == P2P_STATUS_OK

    @property
    def pcie_level(self) -> str | None:
        """The PCIe path as ``nvidia-smi topo -m`` writes it (``PIX`` ... ``SYS``); None when unknown."""
        level = self.common_ancestor
        if isinstance(level, Absent) or level == 0:  # INTERNAL (one board) has no topo -m spelling
            return None
        return TOPOLOGY_LEVEL_SMI.get(level)

    def to_json(self) -> dict[str, Any]:
        """Wire form."""
        return {"a": self.a, "b": self.b, "nvlink_p2p": _put(self.nvlink_p2p), "read_p2p": _put(self.read_p2p),
                "common_ancestor": _put(self.common_ancestor), "query_errors": dict(self.query_errors)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpuPair:
        """Back from :meth:`to_json`."""
        return cls(a=int(raw["a"]), b=int(raw["b"]), nvlink_p2p=_take(raw["nvlink_p2p"], int),
                   read_p2p=_take(raw["read_p2p"], int), common_ancestor=_take(raw["common_ancestor"], int),
                   query_errors=dict(raw["query_errors"]))


@dataclass(frozen=True, slots=True)
class SnapshotError:
    """Why there are no GPU facts: NVML could not start, or did not answer in time (stable ``code``)."""

    code: str  # NVML_LIBRARY_NOT_FOUND, NVML_DRIVER_NOT_LOADED, ..., NVML_TIMEOUT, NVML_PROBE_FAILED
    cause: str
    remediation: str
    nvml_error: str = ""

    def to_json(self) -> dict[str, str]:
        """Wire form."""
        return {"code": self.code, "cause": self.cause, "remediation": self.remediation, "nvml_error": self.nvml_error}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SnapshotError:
        """Back from :meth:`to_json`."""
        return cls(str(raw["code"]), str(raw["cause"]), str(raw["remediation"]), str(raw.get("nvml_error", "")))


@dataclass(frozen=True, kw_only=True, slots=True)
class NvmlSnapshot:
    """The node's GPUs as NVML reported them in one walk, or why NVML could not report them."""

    label: str  # the transport's label: "pynvml" for the real library, "fake:<profile>" in tests
    driver_version: str | Absent | None = None
    cuda_driver_version: int | Absent | None = None  # 1000*major + 10*minor
    gpus: tuple[GpuInfo, ...] = ()
    pairs: tuple[GpuPair, ...] = ()
    error: SnapshotError | None = None
    duration_s: float = 0.0  # wall time of the walk in the child

    @property
    def cuda_driver_version_text(self) -> str | None:
        """``"12.4"`` from 12040; None when unknown."""
        version = self.cuda_driver_version
        if not isinstance(version, int):
            return None
        return f"{version // 1000}.{(version % 1000) // 10}"

    @property
    def unavailable(self) -> str | None:
        """Why there is no GPU to ask about (the SKIP reason of GPU checks), None when NVML lists GPUs."""
        if self.error is not None:
            return f"no NVIDIA GPU visible: {self.error.cause}"
        if not self.gpus:
            return "no NVIDIA GPU visible: NVML lists no GPU"
        return None

    def gpu(self, index: int) -> GpuInfo | None:
        """The GPU at NVML ``index``, None when NVML did not list it."""
        return next((g for g in self.gpus if g.index == index), None)

    def pair(self, a: int, b: int) -> GpuPair | None:
        """The facts of the pair ``{a, b}`` in either order, None when not walked."""
        low, high = min(a, b), max(a, b)
        return next((p for p in self.pairs if (p.a, p.b) == (low, high)), None)

    def index_of_bus_id(self, bus_id: str) -> int | None:
        """NVML index of the GPU at PCI ``bus_id`` (any case), None when no GPU of the node sits there."""
        wanted = bus_id.upper()
        return next((g.index for g in self.gpus if isinstance(g.pci_bus_id, str) and g.pci_bus_id == wanted), None)

    def to_json(self) -> dict[str, Any]:
        """Wire form (what the NVML child prints)."""
        return {
            "label": self.label,
            "driver_version": _put(self.driver_version),
            "cuda_driver_version": _put(self.cuda_driver_version),
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "pairs": [pair.to_json() for pair in self.pairs],
            "error": None if self.error is None else self.error.to_json(),
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> NvmlSnapshot:
        """Back from :meth:`to_json`; raises KeyError/TypeError/ValueError on a malformed document."""
        driver, cuda = raw["driver_version"], raw["cuda_driver_version"]
        return cls(
            label=str(raw["label"]),
            driver_version=None if driver is None else _take(driver, str),
            cuda_driver_version=None if cuda is None else _take(cuda, int),
            gpus=tuple(GpuInfo.from_json(g) for g in raw["gpus"]),
            pairs=tuple(GpuPair.from_json(p) for p in raw["pairs"]),
            error=None if raw["error"] is None else SnapshotError.from_json(raw["error"]),
            duration_s=float(raw.get("duration_s", 0.0)),
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report (driver, CUDA, error)."""
        return {
            "backend": self.label,
            "driver_version": _json(self.driver_version),
            "cuda_driver_version": self.cuda_driver_version_text or _json(self.cuda_driver_version),
            "error": None
            if self.error is None
            else {"code": self.error.code, "cause": self.error.cause, "nvml_error": self.error.nvml_error},
        }


@dataclass(frozen=True, slots=True)
class PcieLinkNow:
    """One GPU's PCIe link as sampled: the best generation and width seen over the sampling window."""

    index: int
    generation: int | Absent
    width: int | Absent
    samples: int = 1

    def to_json(self) -> dict[str, Any]:
        """Wire form."""
        return {"index": self.index, "generation": _put(self.generation), "width": _put(self.width),
                "samples": self.samples}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PcieLinkNow:
        """Back from :meth:`to_json`."""
        return cls(int(raw["index"]), _take(raw["generation"], int), _take(raw["width"], int), int(raw["samples"]))

    @property
    def link(self) -> tuple[int, int] | None:
        """(generation, width) when both are known."""
        if isinstance(self.generation, Absent) or isinstance(self.width, Absent):
            return None
        return (self.generation, self.width)


@dataclass(frozen=True, kw_only=True, slots=True)
class PcieSample:
    """Current PCIe links of some GPUs (taken while the all-reduce sweep loads them), or why not."""

    links: tuple[PcieLinkNow, ...] = ()
    error: SnapshotError | None = None
    duration_s: float = 0.0

    def link(self, index: int) -> tuple[int, int] | None:
        """(generation, width) sampled for NVML ``index``; None when not sampled or unknown."""
        found = next((link for link in self.links if link.index == index), None)
        return None if found is None else found.link

    def to_json(self) -> dict[str, Any]:
        """Wire form."""
        return {"links": [link.to_json() for link in self.links],
                "error": None if self.error is None else self.error.to_json(), "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PcieSample:
        """Back from :meth:`to_json`."""
        return cls(links=tuple(PcieLinkNow.from_json(link) for link in raw["links"]),
                   error=None if raw["error"] is None else SnapshotError.from_json(raw["error"]),
                   duration_s=float(raw.get("duration_s", 0.0)))
