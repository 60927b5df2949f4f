"""One walk over NVML: every GPU, every NVLink, every GPU pair, into an :class:`NvmlSnapshot`.

Runs inside the NVML child process (``python -m preflight.probe.nvml_child``), which the parent
kills at its deadline; nothing here has a timeout of its own. Gathering never judges and never
raises for one bad query: a fact the GPU cannot report is NOT_SUPPORTED, a query that failed is
QUERY_FAILED with the NVML error kept in ``query_errors``. Only "NVML cannot start at all" or a
failing device count ends the walk, recorded in ``NvmlSnapshot.error`` with its likely cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from preflight.probe.nvml import (
    NOT_SUPPORTED,
    NVLINK_MAX_LINKS,
    P2P_CAPS_NVLINK,
    P2P_CAPS_READ,
    QUERY_FAILED,
    Absent,
    NvmlQueryError,
    NvmlUnavailableError,
    PynvmlBackend,
)
from preflight.probe.nvml_snapshot import (
    GpuInfo,
    GpuPair,
    NvLinkInfo,
    NvmlSnapshot,
    PcieLinkNow,
    PcieSample,
    SnapshotError,
)

T = TypeVar("T")
_LOST = "gpu_lost"


def start_error(exc: NvmlUnavailableError) -> SnapshotError:
    """The snapshot error for an NVML that cannot start."""
    return SnapshotError(exc.code, exc.cause, exc.remediation, exc.nvml_error)


def count_error(exc: NvmlQueryError) -> SnapshotError:
    """The snapshot error for an NVML that started but cannot count its GPUs."""
    return SnapshotError(
        "NVML_QUERY_FAILED",
        f"NVML started but {exc.call} failed",
        "Run `nvidia-smi` and read `dmesg` for Xid errors.",
        exc.nvml_error,
    )


def walk(backend: PynvmlBackend, label: str) -> NvmlSnapshot:
    """Start NVML, ask about every GPU and pair, shut NVML down. Never raises for NVML errors."""
    started = time.monotonic()
    try:
        backend.start()
    except NvmlUnavailableError as exc:
        return NvmlSnapshot(label=label, error=start_error(exc), duration_s=time.monotonic() - started)
    try:
        try:
            count = backend.device_count()
            driver = backend.driver_version()
        except NvmlQueryError as exc:
            return NvmlSnapshot(label=label, error=count_error(exc), duration_s=time.monotonic() - started)
        errors: dict[str, str] = {}
        cuda = _ask(errors, "cuda_driver_version", backend.cuda_driver_version)
        gpus = tuple(_gather_gpu(backend, index) for index in range(count))
        lost = frozenset(g.index for g in gpus if g.gpu_lost)
        pairs = tuple(_gather_pair(backend, a, b, lost) for a in range(count) for b in range(a + 1, count))
        return NvmlSnapshot(label=label, driver_version=driver, cuda_driver_version=cuda, gpus=gpus, pairs=pairs,
                            duration_s=time.monotonic() - started)
    finally:
        backend.shutdown()


def sample_pcie(backend: PynvmlBackend, indices: Sequence[int], duration_s: float = 0.0,
                interval_s: float = 0.5, wait: Callable[[float], bool] | None = None) -> PcieSample:
    """Current PCIe generation and width of the GPUs at ``indices``, the best seen over ``duration_s``.

    A link trains down at idle and up under load (``nvidia-smi -q``: "Current: 1" of "Max: 4" on an
    idle RTX A6000, fixtures/smi_q), so while a load runs the highest reading is the one to judge.
    ``wait(seconds)`` pauses between samples and returns True to stop early (default: sleep).
    """
    pause = wait or _sleep
    started = time.monotonic()
    try:
        backend.start()
    except NvmlUnavailableError as exc:
        return PcieSample(error=start_error(exc), duration_s=time.monotonic() - started)
    best: dict[int, tuple[int | Absent, int | Absent]] = {}
    samples = 0
    try:
        while True:
            samples += 1
            for index in indices:
                try:
                    link = backend.pcie_link(index, current=True)
                except NvmlQueryError:
                    link = QUERY_FAILED
                best[index] = _better(best.get(index), link)
            left = duration_s - (time.monotonic() - started)
            if left <= 0 or pause(min(interval_s, left)):
                break
    finally:
        backend.shutdown()
    links = tuple(PcieLinkNow(index, *best[index], samples=samples) for index in indices)
    return PcieSample(links=links, duration_s=time.monotonic() - started)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _better(
    seen: tuple[int | Absent, int | Absent] | None, link: tuple[int, int] | Absent
) -> tuple[int | Absent, int | Absent]:
    """Keep the highest generation and width read so far."""
    if isinstance(link, Absent):
        return seen if seen is not None else (link, link)
    if seen is None or isinstance(seen[0], Absent) or isinstance(seen[1], Absent):
        return link
    return (max(seen[0], link[0]), max(seen[1], link[1]))


def _ask(errors: dict[str, str], name: str, query: Callable[[], T]) -> T | Absent:
    """Run one query; a failure becomes QUERY_FAILED with the NVML error kept under ``name``. Once a
    query said the GPU is lost, the GPU's remaining queries are not made (each would fail the same way,
    and a GPU that fell off the bus can take seconds per call)."""
    if _LOST in errors:
        return QUERY_FAILED
    try:
        return query()
    except NvmlQueryError as exc:
        errors[name] = str(exc)
        if exc.gpu_lost:
            errors[_LOST] = exc.nvml_error
        return QUERY_FAILED


def _gather_nvlinks(backend: PynvmlBackend, index: int) -> tuple[NvLinkInfo, ...]:
    """Every link NVML lists (0 .. NVML_NVLINK_MAX_LINKS-1), up or down, with its far end when up.

    A GPU without NVLink hardware answers NOT_SUPPORTED for every link (NVIDIA/NVSentinel#1481);
    indices past the GPU's last link answer an error too (NVIDIA/TensorRT-LLM#19210), so a link is
    "listed" exactly when its state can be read. The far end of an active link is its PCI bus id and
    its device type (a GPU or an NVSwitch, ``nvmlDeviceGetNvLinkRemoteDeviceType``).
    """
    links: list[NvLinkInfo] = []
    for link in range(NVLINK_MAX_LINKS):
        state = backend.nvlink_state(index, link)
        if isinstance(state, Absent):
            continue
        remote = backend.nvlink_remote_bus_id(index, link) if state else None
        kind = backend.nvlink_remote_type(index, link) if state else None
        links.append(NvLinkInfo(link, state, backend.nvlink_version(index, link), remote, kind))
    return tuple(links)


def _gather_gpu(backend: PynvmlBackend, i: int) -> GpuInfo:
    errors: dict[str, str] = {}

    def ask(name: str, query: Callable[[], T]) -> T | Absent:
        return _ask(errors, name, query)

    ask("handle", lambda: backend.open(i))  # nvml.h: the handle call itself answers GPU_IS_LOST
    memory = ask("memory", lambda: backend.memory(i))
    mig = ask("mig_mode", lambda: backend.mig_mode(i))
    ecc = ask("ecc_mode", lambda: backend.ecc_mode(i))
    mig_enabled = mig if isinstance(mig, Absent) else mig[0]
    mig_instances = ask("mig_instances", lambda: backend.mig_instances(i)) if mig_enabled is True else ()
    return GpuInfo(
        index=i,
        name=ask("name", lambda: backend.name(i)),
        uuid=ask("uuid", lambda: backend.uuid(i)),
        pci_bus_id=ask("pci_bus_id", lambda: backend.pci_bus_id(i)),
        pci_device_id=ask("pci_device_id", lambda: backend.pci_device_id(i)),
        serial=ask("serial", lambda: backend.serial(i)),
        memory_total_bytes=memory if isinstance(memory, Absent) else memory.total,
        memory_used_bytes=memory if isinstance(memory, Absent) else memory.used,
        memory_reserved_bytes=memory if isinstance(memory, Absent) else memory.reserved,
        compute_capability=ask("compute_capability", lambda: backend.compute_capability(i)),
        persistence_mode=ask("persistence_mode", lambda: backend.persistence_mode(i)),
        mig_enabled=mig_enabled,
        mig_pending=mig if isinstance(mig, Absent) else mig[1],
        mig_instances=mig_instances,
        # nvml.h: with MIG on only a MIG device handle has a compute mode (each instance keeps its own)
        compute_mode=ask("compute_mode", lambda: backend.compute_mode(i)) if mig_enabled is not True
        else NOT_SUPPORTED,
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
        nvlinks=ask("nvlinks", lambda: _gather_nvlinks(backend, i)),
        fabric=ask("fabric", lambda: backend.fabric(i)),
        gpu_lost=errors.pop(_LOST, None) is not None,
        query_errors=errors,
    )


def _gather_pair(backend: PynvmlBackend, a: int, b: int, lost: frozenset[int] = frozenset()) -> GpuPair:
    errors: dict[str, str] = {}
    gone = sorted(lost & {a, b})
    if gone:  # a lost GPU answers nothing: its pairs are not asked (one failure, one finding)
        errors["gpu_lost"] = ", ".join(f"GPU {g} is lost" for g in gone)
        return GpuPair(a=a, b=b, nvlink_p2p=QUERY_FAILED, read_p2p=QUERY_FAILED, common_ancestor=QUERY_FAILED,
                       query_errors=errors)
    nvlink = _ask(errors, "nvlink_p2p", lambda: backend.p2p_status(a, b, P2P_CAPS_NVLINK))
    read = _ask(errors, "read_p2p", lambda: backend.p2p_status(a, b, P2P_CAPS_READ))
    ancestor = _ask(errors, "common_ancestor", lambda: backend.common_ancestor(a, b))
    errors.pop(_LOST, None)
    return GpuPair(a=a, b=b, nvlink_p2p=nvlink, read_p2p=read, common_ancestor=ancestor, query_errors=errors)
