"""The NVML backend and inventory gathering, through the fake machines and the real library."""

from __future__ import annotations

import ctypes
import json
import threading
from itertools import combinations

import pynvml
import pytest

from preflight.probe.gpus import decode_clock_event_reasons, gather_inventory, gather_inventory_within
from preflight.probe.nvml import (
    NO_PERMISSION,
    NOT_SUPPORTED,
    P2P_CAPS_NVLINK,
    P2P_CAPS_READ,
    QUERY_FAILED,
    GpuProcess,
    NvmlBackend,
    NvmlQueryError,
    NvmlUnavailableError,
    PynvmlBackend,
    read_nvlinks,
)
from tests.fakes.nvml import INIT_ERRORS, FakeLibrary, FakeNvml, Faults, profile_names
from tests.fakes.nvml_profiles import PROFILES

P2P_OK = pynvml.NVML_P2P_STATUS_OK


def test_fake_and_real_backends_satisfy_the_protocol() -> None:
    assert isinstance(FakeNvml.from_profile("1x-a10g"), NvmlBackend)
    assert isinstance(PynvmlBackend(), NvmlBackend)


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown fake profile 'dgx-z'"):
        FakeNvml.from_profile("dgx-z")


@pytest.mark.parametrize("profile", profile_names())
def test_every_profile_gathers_and_serialises(profile: str) -> None:
    inventory = gather_inventory(FakeNvml.from_profile(profile))
    spec = PROFILES[profile]
    assert inventory.error is None
    assert [gpu.pci_bus_id for gpu in inventory.gpus] == list(spec.bus_ids)
    assert all(str(gpu.name).startswith("Fake ") for gpu in inventory.gpus)
    assert all(gpu.query_errors == {} for gpu in inventory.gpus)
    assert len({gpu.uuid for gpu in inventory.gpus}) == len(spec.gpus)
    document = json.loads(json.dumps(inventory.as_dict()))
    assert document["backend"] == f"fake:{profile}"
    assert document["gpus"][0]["memory_total_mib"] == spec.gpus[0].memory_mib


def test_driver_and_cuda_versions() -> None:
    inventory = gather_inventory(FakeNvml.from_profile("8x-h100-sxm"))
    assert inventory.driver_version == "550.54.15"
    assert inventory.cuda_driver_version == 12040
    assert inventory.cuda_driver_version_text == "12.4"


# -- initialisation ------------------------------------------------------------------------------

INIT_CODES = {
    "LIBRARY_NOT_FOUND": ("NVML_LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 not found"),
    "DRIVER_NOT_LOADED": ("NVML_DRIVER_NOT_LOADED", "kernel driver is not loaded"),
    "LIB_RM_VERSION_MISMATCH": ("NVML_DRIVER_LIBRARY_MISMATCH", "upgraded without a reboot"),
    "NO_PERMISSION": ("NVML_NO_PERMISSION", "no permission"),
    "UNKNOWN": ("NVML_INIT_FAILED", "nvmlInit failed with NVML error 999"),
}


@pytest.mark.parametrize("name", INIT_ERRORS)
def test_init_errors_name_the_likely_cause(name: str) -> None:
    backend = FakeNvml.from_profile("8x-h100-sxm", init_error=name)
    code, cause = INIT_CODES[name]
    with pytest.raises(NvmlUnavailableError) as raised:
        backend.device_count()
    assert raised.value.code == code
    assert cause in raised.value.cause
    assert raised.value.remediation
    inventory = gather_inventory(backend)
    assert inventory.gpus == () and inventory.error is not None and inventory.error.code == code


def test_init_is_tried_once_even_when_it_fails() -> None:
    backend = FakeNvml.from_profile("1x-a10g", init_error="DRIVER_NOT_LOADED")
    for _ in range(3):
        with pytest.raises(NvmlUnavailableError):
            backend.name(0)
    assert backend.library.init_calls == 1


def test_init_is_lazy_and_happens_once_across_threads() -> None:
    backend = FakeNvml.from_profile("8x-a100-sxm")
    assert backend.library.init_calls == 0
    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(backend.device_count())) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts == [8] * 16
    assert backend.library.init_calls == 1


def test_shutdown_then_queries_start_again() -> None:
    backend = FakeNvml.from_profile("1x-a10g")
    assert backend.device_count() == 1
    backend.shutdown()
    assert backend.library.initialised is False
    assert backend.device_count() == 1
    assert backend.library.init_calls == 2


class HangingLibrary(FakeLibrary):
    """A wedged driver: nvmlInit blocks until the test lets it go."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(PROFILES["1x-a10g"], Faults())
        self.release = release

    def nvmlInit(self) -> None:
        self.release.wait(30)
        super().nvmlInit()


def test_a_hung_nvml_becomes_a_timeout() -> None:
    release = threading.Event()
    try:
        inventory = gather_inventory_within(PynvmlBackend(library=HangingLibrary(release)), timeout_s=0.2)
    finally:
        release.set()
    assert inventory.error is not None and inventory.error.code == "NVML_TIMEOUT"
    assert "within 0 s" in inventory.error.cause


def test_an_answering_nvml_is_not_affected_by_the_deadline() -> None:
    inventory = gather_inventory_within(FakeNvml.from_profile("8x-l40s"), timeout_s=30)
    assert inventory.error is None and len(inventory.gpus) == 8


def test_real_library_on_this_machine() -> None:
    inventory = gather_inventory(PynvmlBackend())
    if inventory.error is None:
        pytest.skip("an NVIDIA driver is present here; this test covers machines without one")
    assert inventory.error.code == "NVML_LIBRARY_NOT_FOUND"
    assert "libnvidia-ml.so.1" in inventory.error.cause


# -- "not supported" is a value, other errors are not ----------------------------------------------


def test_not_supported_is_the_sentinel() -> None:
    backend = FakeNvml.from_profile(
        "1x-a10g", not_supported={"nvmlDeviceGetTemperature", "nvmlSystemGetCudaDriverVersion"}
    )
    assert backend.temperature(0) is NOT_SUPPORTED
    inventory = gather_inventory(backend)
    assert inventory.gpus[0].temperature_c is NOT_SUPPORTED
    assert inventory.cuda_driver_version is NOT_SUPPORTED
    assert inventory.gpus[0].query_errors == {}
    assert inventory.as_dict()["gpus"][0]["temperature_c"] == "not supported"


class OldDriverLibrary(FakeLibrary):
    """A driver older than 535: the clocks-event call does not exist, the throttle one does."""

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


class NoPermissionLibrary(FakeLibrary):
    """A MIG GPU queried by a non-root user: the process list is refused."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[object]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)


def test_no_permission_is_a_value_too() -> None:
    backend = PynvmlBackend(library=NoPermissionLibrary(PROFILES["4x-a100-sxm-mixed-mig"], Faults()))
    inventory = gather_inventory(backend)
    assert inventory.gpus[0].processes is NO_PERMISSION and inventory.gpus[0].query_errors == {}
    assert inventory.as_dict()["gpus"][0]["processes"] == "no permission"


def test_old_driver_falls_back_to_throttle_reasons() -> None:
    backend = PynvmlBackend(library=OldDriverLibrary(PROFILES["8x-v100-sxm2"], Faults(clock_reasons={0: 0x40})))
    assert backend.clock_event_reasons(0) == 0x41


class PreV3ProcessesLibrary(FakeLibrary):
    """An old driver: the unversioned (v3) process query raises pynvml's mismatch error."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[object]:
        raise pynvml.NVMLLibraryMismatchError("Unversioned function called")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: object) -> list[object]:
        return super().nvmlDeviceGetComputeRunningProcesses(handle)


def test_old_driver_processes_come_from_the_v2_call() -> None:
    library = PreV3ProcessesLibrary(PROFILES["1x-a10g"], Faults(processes={0: ((31, 100),)}))
    processes = PynvmlBackend(library=library).compute_processes(0)
    assert processes == (GpuProcess(31, 100 * 1024 * 1024),)


def test_function_missing_from_the_bindings_is_not_supported() -> None:
    class Bare(FakeLibrary):
        nvmlDeviceGetTemperature = None

    assert PynvmlBackend(library=Bare(PROFILES["1x-a10g"], Faults())).temperature(0) is NOT_SUPPORTED


def test_lost_gpu_is_a_failed_query_not_a_crash() -> None:
    backend = FakeNvml.from_profile("8x-h100-sxm", gpu_lost={3})
    with pytest.raises(NvmlQueryError) as raised:
        backend.temperature(3)
    assert raised.value.gpu_lost and raised.value.call == "nvmlDeviceGetTemperature"
    inventory = gather_inventory(backend)
    lost = inventory.gpus[3]
    assert lost.gpu_lost and lost.name is QUERY_FAILED and "GPU is lost" in lost.query_errors["name"]
    assert not inventory.gpus[2].gpu_lost and inventory.gpus[2].query_errors == {}


def test_gpu_that_fell_off_the_bus_is_not_listed() -> None:
    inventory = gather_inventory(FakeNvml.from_profile("8x-h100-sxm", absent_gpus={7}))
    assert len(inventory.gpus) == 7
    assert inventory.gpus[-1].pci_bus_id == "00000000:BA:00.0"


def test_bus_id_bytes_are_decoded() -> None:
    assert FakeNvml.from_profile("1x-a10g").pci_bus_id(0) == "00000000:00:1E.0"


def test_clock_event_reason_names() -> None:
    assert decode_clock_event_reasons(0x001) == ("Idle",)
    assert decode_clock_event_reasons(0x041) == ("Idle", "HW Thermal Slowdown")
    assert decode_clock_event_reasons(0x0) == ()
    assert decode_clock_event_reasons(0x1000) == ("unknown 0x1000",)


def test_mig_devices_are_listed_on_mig_gpus_only() -> None:
    inventory = gather_inventory(FakeNvml.from_profile("4x-a100-sxm-mixed-mig"))
    mig = [(gpu.mig_enabled, len(gpu.mig_devices)) for gpu in inventory.gpus]
    assert mig == [(True, 2), (True, 2), (False, 0), (False, 0)]
    assert all(str(uuid).startswith("MIG-") for uuid in inventory.gpus[0].mig_devices)


# -- NVLink per link and P2P per pair, per profile ---------------------------------------------------

LINKS = {
    "8x-h100-sxm": 18,
    "8x-a100-sxm": 12,
    "4x-a100-pcie-bridged": 12,
    "8x-l40s": 0,
    "1x-a10g": 0,
    "8x-v100-sxm2": 6,
}
NVLINK_VERSION = {"8x-h100-sxm": 6, "8x-a100-sxm": 4, "4x-a100-pcie-bridged": 4, "8x-v100-sxm2": 2}


def nvlinked_pairs(backend: FakeNvml, count: int) -> set[tuple[int, int]]:
    return {(a, b) for a, b in combinations(range(count), 2) if backend.p2p_status(a, b, P2P_CAPS_NVLINK) == P2P_OK}


@pytest.mark.parametrize(("profile", "links"), LINKS.items())
def test_links_per_gpu(profile: str, links: int) -> None:
    backend = FakeNvml.from_profile(profile)
    for index in range(len(PROFILES[profile].gpus)):
        found = read_nvlinks(backend, index)
        assert len(found) == links and all(link.active for link in found)
        assert {link.version for link in found} <= {NVLINK_VERSION.get(profile)}


def test_nvswitch_machines_link_every_pair() -> None:
    for profile in ("8x-h100-sxm", "8x-a100-sxm"):
        assert nvlinked_pairs(FakeNvml.from_profile(profile), 8) == set(combinations(range(8), 2))


def test_bridged_a100_pcie_links_only_within_pairs() -> None:
    backend = FakeNvml.from_profile("4x-a100-pcie-bridged")
    assert nvlinked_pairs(backend, 4) == {(0, 1), (2, 3)}
    assert backend.common_ancestor(0, 2) == pynvml.NVML_TOPOLOGY_SYSTEM
    assert backend.p2p_status(0, 2, P2P_CAPS_READ) == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED


def test_l40s_has_no_nvlink_but_pcie_p2p_within_a_socket() -> None:
    backend = FakeNvml.from_profile("8x-l40s")
    assert backend.nvlink_state(0, 0) is NOT_SUPPORTED
    assert nvlinked_pairs(backend, 8) == set()
    assert backend.common_ancestor(0, 1) == pynvml.NVML_TOPOLOGY_SINGLE
    assert backend.p2p_status(0, 2, P2P_CAPS_READ) == P2P_OK
    assert backend.p2p_status(0, 4, P2P_CAPS_READ) == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED


def test_v100_cube_mesh_wiring() -> None:
    pairs = nvlinked_pairs(FakeNvml.from_profile("8x-v100-sxm2"), 8)
    assert pairs == {(a, b) for a, b, _ in PROFILES["8x-v100-sxm2"].bonds}
    assert (0, 4) not in pairs and len(pairs) == 16


def test_gpu_missing_its_nvlinks_on_an_nvswitch_machine() -> None:
    backend = FakeNvml.from_profile("8x-h100-sxm", nvlinks_missing={5})
    assert [link.active for link in read_nvlinks(backend, 5)] == [False] * 18
    assert all(link.active for link in read_nvlinks(backend, 4))
    pairs = nvlinked_pairs(backend, 8)
    assert not any(5 in pair for pair in pairs) and len(pairs) == 21


def test_gpu_missing_its_nvlinks_takes_the_bridge_down_at_both_ends() -> None:
    backend = FakeNvml.from_profile("4x-a100-pcie-bridged", nvlinks_missing={0})
    assert not any(link.active for link in read_nvlinks(backend, 1))
    assert nvlinked_pairs(backend, 4) == {(2, 3)}


def test_single_link_down() -> None:
    backend = FakeNvml.from_profile("8x-a100-sxm", nvlink_down={(2, 7)})
    assert [link.link for link in read_nvlinks(backend, 2) if not link.active] == [7]


def test_mig_gpus_have_no_p2p() -> None:
    backend = FakeNvml.from_profile("4x-a100-sxm-mixed-mig")
    assert backend.p2p_status(0, 2, P2P_CAPS_NVLINK) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    assert backend.p2p_status(2, 3, P2P_CAPS_NVLINK) == P2P_OK


def test_pynvml_read_constant_is_a_tuple_so_the_backend_uses_its_own() -> None:
    backend = FakeNvml.from_profile("8x-a100-sxm")
    assert backend.p2p_status(0, 1, P2P_CAPS_READ) == P2P_OK
    if isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple):
        backend.device_count()
        with pytest.raises(ctypes.ArgumentError):
            backend.library.nvmlDeviceGetP2PStatus(
                backend._handle(0), backend._handle(1), pynvml.NVML_P2P_CAPS_INDEX_READ
            )
