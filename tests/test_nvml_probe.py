"""The NVML walk through the real nvidia-ml-py binding over the fake NVML C library, in-process.

These tests are the proof that the fake behaves like the library pynvml expects: pynvml's own
wrappers, structs, buffer protocols and error classes run over it. (The child process, the deadline
and the transport are in tests/test_nvml_child.py.)
"""

from __future__ import annotations

import ctypes
import json
from itertools import combinations

import pynvml
import pytest

from preflight.probe.nvml import (
    NVLINK_MAX_LINKS,
    NO_PERMISSION,
    NOT_SUPPORTED,
    P2P_CAPS_NVLINK,
    P2P_CAPS_READ,
    QUERY_FAILED,
    GpuProcess,
    PynvmlBackend,
)
from preflight.probe.nvml_snapshot import MIB, GpuInfo, NvLinkInfo, NvmlSnapshot, decode_clock_event_reasons
from preflight.probe.nvml_walk import walk
from tests.fakes.nvml import INIT_ERRORS, installed, profile_names, walk_fake
from tests.fakes.nvml_profiles import PROFILES

P2P_OK = pynvml.NVML_P2P_STATUS_OK


def links(gpu: GpuInfo) -> tuple[NvLinkInfo, ...]:
    assert isinstance(gpu.nvlinks, tuple), gpu.nvlinks
    return gpu.nvlinks


def mig_devices(gpu: GpuInfo) -> tuple[str, ...]:
    assert isinstance(gpu.mig_devices, tuple), gpu.mig_devices
    return gpu.mig_devices


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown fake profile 'dgx-z'"):
        walk_fake("dgx-z")


def test_a_hanging_profile_is_refused_in_process() -> None:
    with pytest.raises(ValueError, match="through the NVML child"):
        walk_fake("2x-h100-nvl-hung")


@pytest.mark.parametrize("profile", profile_names())
def test_every_profile_walks_and_crosses_json(profile: str) -> None:
    snapshot = walk_fake(profile)
    spec = PROFILES[profile]
    assert snapshot.error is None and snapshot.label == f"fake:{profile}"
    assert [gpu.pci_bus_id for gpu in snapshot.gpus] == list(spec.bus_ids)
    assert all(str(gpu.name).startswith("Fake ") for gpu in snapshot.gpus)
    assert all(gpu.query_errors == {} for gpu in snapshot.gpus)
    assert all(pair.query_errors == {} for pair in snapshot.pairs)
    assert len({gpu.uuid for gpu in snapshot.gpus}) == len(spec.gpus)
    assert len(snapshot.pairs) == len(spec.gpus) * (len(spec.gpus) - 1) // 2
    assert NvmlSnapshot.from_json(json.loads(json.dumps(snapshot.to_json()))) == snapshot
    assert snapshot.as_dict()["backend"] == f"fake:{profile}"


def test_driver_and_cuda_versions() -> None:
    snapshot = walk_fake("8x-h100-sxm")
    assert snapshot.driver_version == "550.54.15"
    assert snapshot.cuda_driver_version == 12040
    assert snapshot.cuda_driver_version_text == "12.4"


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
    snapshot = walk_fake("8x-h100-sxm", init_error=name)
    code, cause = INIT_CODES[name]
    assert snapshot.gpus == () and snapshot.error is not None
    assert snapshot.error.code == code and cause in snapshot.error.cause and snapshot.error.remediation


def test_library_not_found_takes_pynvmls_own_loader_path() -> None:
    """The factory raises OSError like CDLL; pynvml's _LoadNvmlLibrary maps it (no preflight code between)."""
    with installed("1x-a10g", init_error="LIBRARY_NOT_FOUND"), pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()


def test_the_walk_initialises_once_and_shuts_down() -> None:
    with installed("8x-a100-sxm") as library:
        assert library is not None
        walk(PynvmlBackend(), "fake")
    assert library.init_calls == 1 and library.init_count == 0
    assert library.calls["nvmlShutdown"] == 1


def test_an_nvml_call_before_init_is_uninitialized() -> None:
    with installed("1x-a10g"), pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


# -- "not supported" is a value, other errors are not ----------------------------------------------


def test_not_supported_is_the_sentinel() -> None:
    snapshot = walk_fake("1x-a10g", not_supported={"nvmlDeviceGetTemperature", "nvmlSystemGetCudaDriverVersion"})
    gpu = snapshot.gpus[0]
    assert gpu.temperature_c is NOT_SUPPORTED and snapshot.cuda_driver_version is NOT_SUPPORTED
    assert gpu.query_errors == {}
    assert gpu.table_row()["temp_c"] == "not supported"


def test_a_function_the_driver_does_not_export_is_not_supported() -> None:
    """pynvml turns the AttributeError of a missing symbol into NVML_ERROR_FUNCTION_NOT_FOUND."""
    with installed("1x-a10g", missing_functions={"nvmlDeviceGetTemperature"}) as library:
        assert library is not None and not hasattr(library, "nvmlDeviceGetTemperature")
        snapshot = walk(PynvmlBackend(), "fake")
    assert snapshot.gpus[0].temperature_c is NOT_SUPPORTED and snapshot.gpus[0].query_errors == {}


def test_no_permission_is_a_value_too() -> None:
    """A MIG GPU's process list refused to a non-root user."""
    snapshot = walk_fake("4x-a100-sxm-mixed-mig", no_permission={"nvmlDeviceGetComputeRunningProcesses_v3"})
    assert snapshot.gpus[0].processes is NO_PERMISSION and snapshot.gpus[0].query_errors == {}
    assert snapshot.gpus[0].table_row()["processes"] == "no permission"


def test_lost_gpu_is_a_failed_query_not_a_crash() -> None:
    with installed("8x-h100-sxm", gpu_lost={3}) as library:
        assert library is not None
        snapshot = walk(PynvmlBackend(), "fake")
    lost = snapshot.gpus[3]
    assert lost.gpu_lost and lost.name is QUERY_FAILED and lost.nvlinks is QUERY_FAILED
    assert list(lost.query_errors) == ["memory"] and "GPU is lost" in lost.query_errors["memory"]
    assert not snapshot.gpus[2].gpu_lost and snapshot.gpus[2].query_errors == {}
    pair = snapshot.pair(2, 3)
    assert pair is not None and pair.nvlink_p2p is QUERY_FAILED and pair.query_errors == {"gpu_lost": "GPU 3 is lost"}


def test_a_lost_gpu_is_asked_once_not_once_per_fact() -> None:
    """A GPU that fell off the bus can take seconds per call; after the first GPU_IS_LOST the walk stops."""
    with installed("8x-h100-sxm", gpu_lost={3}) as library:
        assert library is not None
        walk(PynvmlBackend(), "fake")
        healthy = walk_fake("8x-h100-sxm")
    assert library.calls["nvmlDeviceGetMemoryInfo_v2"] == 7 + 1
    assert library.calls["nvmlDeviceGetName"] == 7 and library.calls["nvmlDeviceGetNvLinkState"] == 7 * NVLINK_MAX_LINKS
    assert healthy.gpus[3].query_errors == {}


def test_a_gpu_lost_at_its_handle_call_is_one_failed_query() -> None:
    """nvml.h, nvmlDeviceGetHandleByIndex_v2: NVML_ERROR_GPU_IS_LOST "if the target GPU has fallen off the bus"."""
    snapshot = walk_fake("8x-h100-sxm", lost_at_handle={2, 5})
    for index in (2, 5):
        lost = snapshot.gpus[index]
        assert lost.gpu_lost and list(lost.query_errors) == ["handle"]
        assert lost.uuid is QUERY_FAILED and lost.memory_total_bytes is QUERY_FAILED and lost.identity() is None
    assert [g.index for g in snapshot.gpus if g.gpu_lost] == [2, 5]
    assert all(p.query_errors == {} for p in snapshot.pairs if not {p.a, p.b} & {2, 5})


def test_gpu_that_fell_off_the_bus_is_not_listed() -> None:
    snapshot = walk_fake("8x-h100-sxm", absent_gpus={7})
    assert len(snapshot.gpus) == 7
    assert snapshot.gpus[-1].pci_bus_id == "00000000:BA:00.0"


def test_clock_event_reason_names() -> None:
    assert decode_clock_event_reasons(0x001) == ("Idle",)
    assert decode_clock_event_reasons(0x041) == ("Idle", "HW Thermal Slowdown")
    assert decode_clock_event_reasons(0x0) == ()
    assert decode_clock_event_reasons(0x1000) == ("unknown 0x1000",)


def test_mig_devices_are_listed_on_mig_gpus_only() -> None:
    snapshot = walk_fake("4x-a100-sxm-mixed-mig")
    mig = [(gpu.mig_enabled, len(mig_devices(gpu))) for gpu in snapshot.gpus]
    assert mig == [(True, 2), (True, 2), (False, 0), (False, 0)]
    assert all(uuid.startswith("MIG-") for uuid in mig_devices(snapshot.gpus[0]))


# -- old drivers: the functions they lack ---------------------------------------------------------


def test_old_driver_clocks_come_from_the_throttle_call() -> None:
    with installed("8x-a100-sxm-driver470", clock_reasons={0: 0x40}) as library:
        snapshot = walk(PynvmlBackend(), "fake")
    assert library is not None and not hasattr(library, "nvmlDeviceGetCurrentClocksEventReasons")
    assert snapshot.gpus[0].clock_event_reasons == 0x41
    assert library.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 8


def test_old_driver_processes_come_from_the_v2_call() -> None:
    """pynvml's unversioned call wants the _v3 symbol (absent on 470: rust-nvml/nvml-wrapper#46)."""
    with installed("8x-a100-sxm-driver470", processes={0: ((31, 100), (32, 2000))}) as library:
        snapshot = walk(PynvmlBackend(), "fake")
    assert library is not None and not hasattr(library, "nvmlDeviceGetComputeRunningProcesses_v3")
    assert snapshot.gpus[0].processes == (GpuProcess(31, 100 * MIB), GpuProcess(32, 2000 * MIB))
    assert snapshot.gpus[1].processes == ()
    # the buffer protocol: a size query answering INSUFFICIENT_SIZE, then the fill, for GPU 0 only
    assert library.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 8 + 1


def test_a_driver_before_r450_has_no_process_list() -> None:
    snapshot = walk_fake("8x-v100-sxm2", processes={0: ((31, 100),)})
    assert snapshot.gpus[0].processes is NOT_SUPPORTED and snapshot.gpus[0].query_errors == {}


def test_memory_v2_reports_the_drivers_reserve_apart() -> None:
    """smi_q/H800 (525.105.17): Reserved 516 MiB, Used 0 MiB at idle."""
    gpu = walk_fake("8x-h100-sxm").gpus[0]
    assert (gpu.memory_total_bytes, gpu.memory_reserved_bytes, gpu.memory_used_bytes) == (81559 * MIB, 516 * MIB, 0)


def test_memory_before_510_counts_the_reserve_as_used() -> None:
    gpu = walk_fake("8x-a100-sxm-driver470").gpus[0]
    assert gpu.memory_reserved_bytes is NOT_SUPPORTED and gpu.memory_used_bytes == (904 + 1) * MIB
    v100 = walk_fake("8x-v100-sxm2").gpus[0]
    assert v100.memory_reserved_bytes is NOT_SUPPORTED and v100.memory_used_bytes == 10 * MIB  # smi_q V100, driver 418.67


def test_memory_v2_with_a_wrong_struct_version_is_function_not_found() -> None:
    """jp7677/dxvk-nvapi#198: version 2 instead of nvmlMemory_v2 answers NVML_ERROR_FUNCTION_NOT_FOUND."""
    with installed("1x-a10g"):
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetMemoryInfo(handle, version=2)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert info.free == info.total - info.reserved - info.used
        pynvml.nvmlShutdown()


def test_a_string_buffer_too_small_is_insufficient_size() -> None:
    with installed("1x-a10g") as library:
        assert library is not None
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        small = ctypes.create_string_buffer(4)
        get_name = library.__dict__["nvmlDeviceGetName"]  # an exported C function (set per driver version)
        assert get_name(handle, small, ctypes.c_uint(4)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        assert pynvml.nvmlDeviceGetName(handle) == "Fake NVIDIA A10G"
        pynvml.nvmlShutdown()


def test_pynvmls_tuple_read_constant_is_rejected_like_ctypes_does() -> None:
    """``NVML_P2P_CAPS_INDEX_READ = 0,`` is a tuple; a real function pointer cannot convert it."""
    with installed("8x-a100-sxm"):
        pynvml.nvmlInit()
        first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetP2PStatus(first, second, P2P_CAPS_READ) == P2P_OK
        if isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple):
            with pytest.raises(ctypes.ArgumentError):
                pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_READ)
        pynvml.nvmlShutdown()


# -- NVLink per link and P2P per pair, per profile ---------------------------------------------------

LINKS = {  # (listed, active) per GPU
    "8x-h100-sxm": (18, 18),
    "8x-a100-sxm": (12, 12),
    "4x-a100-pcie-bridged": (12, 12),
    "4x-a100-pcie-no-bridge": (12, 0),
    "2x-h100-pcie-no-bridge": (18, 0),
    "2x-h100-nvl-bridged": (18, 12),
    "8x-l40s": (0, 0),
    "1x-a10g": (0, 0),
    "8x-v100-sxm2": (6, 6),
}
NVLINK_VERSION = {"8x-h100-sxm": 6, "8x-a100-sxm": 4, "4x-a100-pcie-bridged": 4, "8x-v100-sxm2": 2,
                  "2x-h100-nvl-bridged": 6}


def nvlinked(snapshot: NvmlSnapshot) -> set[tuple[int, int]]:
    return {(p.a, p.b) for p in snapshot.pairs if p.nvlink}


@pytest.mark.parametrize(("profile", "counts"), LINKS.items())
def test_links_per_gpu(profile: str, counts: tuple[int, int]) -> None:
    for gpu in walk_fake(profile).gpus:
        assert (gpu.nvlinks_present, gpu.nvlinks_active) == counts
        versions = {link.version for link in links(gpu) if link.active}
        assert versions <= {NVLINK_VERSION.get(profile)}


def test_nvswitch_machines_link_every_pair_and_reach_switches() -> None:
    for profile in ("8x-h100-sxm", "8x-a100-sxm"):
        snapshot = walk_fake(profile)
        assert nvlinked(snapshot) == set(combinations(range(8), 2))
        remote = {link.remote_bus_id for link in links(snapshot.gpus[0])}
        assert remote == set(PROFILES[profile].nvswitch_bus_ids)  # not a GPU of the node (NVIDIA/go-nvml#166)


def test_bridged_a100_pcie_links_only_within_pairs_and_names_the_peer() -> None:
    snapshot = walk_fake("4x-a100-pcie-bridged")
    assert nvlinked(snapshot) == {(0, 1), (2, 3)}
    remote = {link.remote_bus_id for link in links(snapshot.gpus[0])}
    assert remote == {snapshot.gpus[1].pci_bus_id}
    across = snapshot.pair(0, 2)
    assert across is not None and across.common_ancestor == pynvml.NVML_TOPOLOGY_SYSTEM
    assert across.read_p2p == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED and across.pcie_level == "SYS"


def test_bridge_less_a100_pcie_lists_inactive_links_without_a_far_end() -> None:
    snapshot = walk_fake("4x-a100-pcie-no-bridge")
    listed = links(snapshot.gpus[0])
    assert len(listed) == 12 and all(not link.active and link.remote_bus_id is None for link in listed)
    assert nvlinked(snapshot) == set()
    pair = snapshot.pair(0, 1)
    assert pair is not None and pair.nvlink_p2p == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED and pair.read_p2p == P2P_OK


def test_ncv5_h100_nvl_bridge_leaves_six_links_inactive() -> None:
    gpu = walk_fake("2x-h100-nvl-bridged").gpus[0]
    down = [link.link for link in links(gpu) if not link.active]
    assert down == [4, 5, 10, 11, 16, 17]


def test_l40s_has_no_nvlink_but_pcie_p2p_within_a_socket() -> None:
    snapshot = walk_fake("8x-l40s")
    assert snapshot.gpus[0].nvlinks == ()
    assert nvlinked(snapshot) == set()
    levels = {(p.a, p.b): p.pcie_level for p in snapshot.pairs}
    assert levels[(0, 1)] == "PIX" and levels[(0, 2)] == "NODE" and levels[(0, 4)] == "SYS"
    reads = {(p.a, p.b): p.read_p2p for p in snapshot.pairs}
    assert reads[(0, 2)] == P2P_OK and reads[(0, 4)] == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED


def test_v100_cube_mesh_wiring() -> None:
    pairs = nvlinked(walk_fake("8x-v100-sxm2"))
    assert pairs == {(a, b) for a, b, _ in PROFILES["8x-v100-sxm2"].bonds}
    assert (0, 4) not in pairs and len(pairs) == 16


def test_gpu_missing_its_nvlinks_on_an_nvswitch_machine() -> None:
    snapshot = walk_fake("8x-h100-sxm", nvlinks_missing={5})
    assert snapshot.gpus[5].nvlinks_active == 0 and snapshot.gpus[5].nvlinks_present == 18
    assert snapshot.gpus[4].nvlinks_active == 18
    pairs = nvlinked(snapshot)
    assert not any(5 in pair for pair in pairs) and len(pairs) == 21


def test_a_bridge_link_down_is_down_at_both_ends() -> None:
    snapshot = walk_fake("4x-a100-pcie-bridged", nvlink_down={(0, 5)})
    assert [g.nvlinks_active for g in snapshot.gpus] == [11, 11, 12, 12]
    whole = walk_fake("4x-a100-pcie-bridged", nvlinks_missing={0})
    assert [g.nvlinks_active for g in whole.gpus] == [0, 0, 12, 12] and nvlinked(whole) == {(2, 3)}


def test_single_link_down() -> None:
    gpu = walk_fake("8x-a100-sxm", nvlink_down={(2, 7)}).gpus[2]
    assert [link.link for link in links(gpu) if not link.active] == [7]


def test_mig_gpus_have_no_p2p() -> None:
    snapshot = walk_fake("4x-a100-sxm-mixed-mig")
    mig_pair, plain_pair = snapshot.pair(0, 2), snapshot.pair(2, 3)
    assert mig_pair is not None and mig_pair.nvlink_p2p == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    assert plain_pair is not None and plain_pair.nvlink_p2p == P2P_OK


def test_the_backend_asks_nvlink_p2p_with_the_nvlink_index() -> None:
    with installed("4x-a100-pcie-bridged"):
        backend = PynvmlBackend()
        backend.start()
        assert backend.p2p_status(0, 1, P2P_CAPS_NVLINK) == P2P_OK
        assert backend.p2p_status(0, 2, P2P_CAPS_NVLINK) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        backend.shutdown()


def test_installed_puts_pynvml_back_as_it_was() -> None:
    before = pynvml.nvmlLib, pynvml.CDLL
    with installed("1x-a10g") as library:
        pynvml.nvmlInit()
        assert pynvml.nvmlLib is library
        pynvml.nvmlShutdown()
    assert (pynvml.nvmlLib, pynvml.CDLL) == before
