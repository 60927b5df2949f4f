"""The GPU inventory: one frozen record per GPU, gathered through an :class:`NvmlBackend`.

Gathering never judges and never raises for a single bad query: a fact the GPU cannot report is
:data:`NOT_SUPPORTED`, a query that failed is :data:`QUERY_FAILED` with the NVML error kept in
``query_errors``. Only "NVML cannot start at all" ends the gathering, recorded in
``Inventory.error`` with its likely cause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from preflight.parse.visible_devices import GpuIdentity
from preflight.probe.nvml import (
    QUERY_FAILED,
    Absent,
    GpuProcess,
    NvmlBackend,
    NvmlQueryError,
    NvmlUnavailableError,
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


def _json(value: Any) -> Any:
    if isinstance(value, Absent):
        return str(value)
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def _mib(value: int | Absent) -> int | str:
    return str(value) if isinstance(value, Absent) else value // MIB


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """Everything preflight knows about one GPU. Memory in bytes, temperature in Celsius."""

    index: int  # NVML index = nvidia-smi index (PCI bus order)
    name: str | Absent
    uuid: str | Absent
    pci_bus_id: str | Absent
    memory_total: int | Absent
    memory_used: int | Absent
    compute_capability: tuple[int, int] | Absent
    persistence_mode: bool | Absent
    mig_enabled: bool | Absent
    mig_pending: bool | Absent
    mig_devices: tuple[str, ...] | Absent
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
    query_errors: Mapping[str, str] = field(default_factory=dict)
    gpu_lost: bool = False  # some query answered NVML_ERROR_GPU_IS_LOST

    @property
    def label(self) -> str:
        """``GPU 3 (Fake H100 80GB HBM3, 00000000:5D:00.0)`` for summaries."""
        return f"GPU {self.index} ({self.name}, {self.pci_bus_id})"

    @property
    def clock_event_names(self) -> tuple[str, ...] | Absent:
        """The clock event (throttle) reasons as ``nvidia-smi -q`` names them."""
        reasons = self.clock_event_reasons
        return reasons if isinstance(reasons, Absent) else decode_clock_event_reasons(reasons)

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

    def table_row(self) -> dict[str, str | int]:
        """One flat row of the GPU table (what ``nvidia-smi`` shows, plus the health counters)."""

        def text(value: Any, render: Callable[[Any], str] = str) -> str:
            return str(value) if isinstance(value, Absent) else render(value)

        rows = self.remapped_rows
        return {
            "gpu": self.index,
            "name": text(self.name),
            "bus_id": text(self.pci_bus_id),
            "memory_mib": f"{_mib(self.memory_used)} / {_mib(self.memory_total)}",
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
        """Plain JSON for the report (memory in MiB, "not supported"/"query failed" as text)."""
        rows = self.remapped_rows
        return {
            "index": self.index,
            "name": _json(self.name),
            "uuid": _json(self.uuid),
            "pci_bus_id": _json(self.pci_bus_id),
            "memory_total_mib": _mib(self.memory_total),
            "memory_used_mib": _mib(self.memory_used),
            "compute_capability": _json(self.compute_capability)
            if isinstance(self.compute_capability, Absent)
            else f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "persistence_mode": _json(self.persistence_mode),
            "mig_enabled": _json(self.mig_enabled),
            "mig_pending": _json(self.mig_pending),
            "mig_devices": _json(self.mig_devices),
            "ecc_enabled": _json(self.ecc_enabled),
            "ecc_pending": _json(self.ecc_pending),
            "ecc_uncorrected_volatile": _json(self.ecc_uncorrected_volatile),
            "ecc_uncorrected_aggregate": _json(self.ecc_uncorrected_aggregate),
            "retired_pages_single_bit": _json(self.retired_pages_single_bit),
            "retired_pages_double_bit": _json(self.retired_pages_double_bit),
            "retired_pages_pending": _json(self.retired_pages_pending),
            "remapped_rows": str(rows)
            if isinstance(rows, Absent)
            else {
                "corrected": rows.corrected,
                "uncorrected": rows.uncorrected,
                "pending": rows.pending,
                "failed": rows.failed,
            },
            "pcie_current": _json(self.pcie_current),
            "pcie_max": _json(self.pcie_max),
            "clock_event_reasons": _json(self.clock_event_names),
            "temperature_c": _json(self.temperature_c),
            "processes": str(self.processes)
            if isinstance(self.processes, Absent)
            else [
                {"pid": p.pid, "used_memory_mib": None if p.used_memory is None else p.used_memory // MIB}
                for p in self.processes
            ],
            "query_errors": dict(self.query_errors),
            "gpu_lost": self.gpu_lost,
        }


@dataclass(frozen=True, slots=True)
class InventoryError:
    """Why there is no inventory: NVML could not start (stable ``code``, likely ``cause``)."""

    code: str
    cause: str
    remediation: str
    nvml_error: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Inventory:
    """The node's GPUs as NVML reports them, or why NVML could not report them."""

    backend: str
    driver_version: str | Absent | None = None
    cuda_driver_version: int | Absent | None = None  # 1000*major + 10*minor
    gpus: tuple[GpuInfo, ...] = ()
    error: InventoryError | None = None

    @property
    def cuda_driver_version_text(self) -> str | None:
        """``"12.4"`` from 12040; None when unknown."""
        version = self.cuda_driver_version
        if not isinstance(version, int):
            return None
        return f"{version // 1000}.{(version % 1000) // 10}"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report's ``node.gpus`` section."""
        return {
            "backend": self.backend,
            "driver_version": _json(self.driver_version),
            "cuda_driver_version": self.cuda_driver_version_text or _json(self.cuda_driver_version),
            "error": None
            if self.error is None
            else {"code": self.error.code, "cause": self.error.cause, "nvml_error": self.error.nvml_error},
            "gpus": [gpu.as_dict() for gpu in self.gpus],
        }


def gather_inventory(backend: NvmlBackend) -> Inventory:
    """Ask the backend about every GPU. Never raises for NVML errors."""
    try:
        count = backend.device_count()
        driver = backend.driver_version()
    except NvmlUnavailableError as exc:
        return Inventory(
            backend=backend.label, error=InventoryError(exc.code, exc.cause, exc.remediation, exc.nvml_error)
        )
    except NvmlQueryError as exc:
        return Inventory(
            backend=backend.label,
            error=InventoryError(
                "NVML_QUERY_FAILED",
                f"NVML started but {exc.call} failed",
                "Run `nvidia-smi` and read `dmesg` for Xid errors.",
                exc.nvml_error,
            ),
        )
    errors: dict[str, str] = {}
    cuda = _ask(errors, "cuda_driver_version", backend.cuda_driver_version)
    gpus = tuple(_gather_gpu(backend, index) for index in range(count))
    return Inventory(backend=backend.label, driver_version=driver, cuda_driver_version=cuda, gpus=gpus)


GATHER_TIMEOUT_S = 60.0  # NVML on a sick node can block for minutes; 8 GPUs without persistence take ~10-20 s


def gather_inventory_within(backend: NvmlBackend, timeout_s: float = GATHER_TIMEOUT_S) -> Inventory:
    """:func:`gather_inventory` under a deadline; a hung NVML becomes ``NVML_TIMEOUT``, not a hung run.

    The query runs in a daemon thread (ctypes releases the GIL during NVML calls); when the deadline
    passes the thread is left blocked and the run goes on without GPU facts.
    """
    found: list[Inventory] = []
    worker = threading.Thread(
        target=lambda: found.append(gather_inventory(backend)), name="nvml-inventory", daemon=True
    )
    worker.start()
    worker.join(timeout_s)
    if found:
        return found[0]
    return Inventory(
        backend=backend.label,
        error=InventoryError(
            "NVML_TIMEOUT",
            f"NVML did not answer within {timeout_s:.0f} s",
            "Run `nvidia-smi` (it will hang too) and read `sudo dmesg | grep -i -e xid -e nvrm`; a GPU stuck in "
            "reset or a wedged driver needs a reboot.",
        ),
    )


def _ask(errors: dict[str, str], name: str, query: Callable[[], T]) -> T | Absent:
    """Run one query; a failure becomes QUERY_FAILED with the NVML error kept under ``name``."""
    try:
        return query()
    except NvmlQueryError as exc:
        errors[name] = str(exc)
        if exc.gpu_lost:
            errors[_LOST] = exc.nvml_error
        return QUERY_FAILED


_LOST = "gpu_lost"


def _gather_gpu(backend: NvmlBackend, i: int) -> GpuInfo:
    errors: dict[str, str] = {}

    def ask(name: str, query: Callable[[], T]) -> T | Absent:
        return _ask(errors, name, query)

    memory = ask("memory", lambda: backend.memory(i))
    mig = ask("mig_mode", lambda: backend.mig_mode(i))
    ecc = ask("ecc_mode", lambda: backend.ecc_mode(i))
    mig_enabled = mig if isinstance(mig, Absent) else mig[0]
    mig_devices = ask("mig_devices", lambda: backend.mig_device_uuids(i)) if mig_enabled is True else ()
    return GpuInfo(
        index=i,
        name=ask("name", lambda: backend.name(i)),
        uuid=ask("uuid", lambda: backend.uuid(i)),
        pci_bus_id=ask("pci_bus_id", lambda: backend.pci_bus_id(i)),
        memory_total=memory if isinstance(memory, Absent) else memory.total,
        memory_used=memory if isinstance(memory, Absent) else memory.used,
        compute_capability=ask("compute_capability", lambda: backend.compute_capability(i)),
        persistence_mode=ask("persistence_mode", lambda: backend.persistence_mode(i)),
        mig_enabled=mig_enabled,
        mig_pending=mig if isinstance(mig, Absent) else mig[1],
        mig_devices=mig_devices,
        ecc_enabled=ecc if isinstance(ecc, Absent) else ecc[0],
        ecc_pending=ecc if isinstance(ecc, Absent) else ecc[1],
        ecc_uncorrected_volatile=ask("ecc_uncorrected_volatile", lambda: backend.ecc_uncorrected(i, aggregate=False)),
        ecc_uncorrected_aggregate=ask("ecc_uncorrected_aggregate", lambda: backend.ecc_uncorrected(i, aggregate=True)),
        retired_pages_single_bit=ask("retired_pages_single_bit", lambda: backend.retired_pages(i, double_bit=False)),
        retired_pages_double_bit=ask("retired_pages_double_bit", lambda: backend.retired_pages(i, double_bit=True)),
        retired_pages_pending=ask("retired_pages_pending", lambda: backend.retired_pages_pending(i)),
        remapped_rows=ask("remapped_rows", lambda: backend.remapped_rows(i)),
        pcie_current=ask("pcie_current", lambda: backend.pcie_link(i, current=True)),
        pcie_max=ask("pcie_max", lambda: backend.pcie_link(i, current=False)),
        clock_event_reasons=ask("clock_event_reasons", lambda: backend.clock_event_reasons(i)),
        temperature_c=ask("temperature_c", lambda: backend.temperature(i)),
        processes=ask("processes", lambda: backend.compute_processes(i)),
        gpu_lost=errors.pop(_LOST, None) is not None,
        query_errors=errors,
    )
