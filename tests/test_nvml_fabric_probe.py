"""The NVML facts the fabric, MIG and compute-mode judgements read, through the real nvidia-ml-py binding
over the fake NVML C library (issue 24 items 2, 3, 7): each value, and each "not known", as pynvml
delivers it."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from preflight.probe.nvml import (
    COMPUTE_EXCLUSIVE_PROCESS,
    COMPUTE_PROHIBITED,
    FABRIC_COMPLETED,
    FABRIC_IN_PROGRESS,
    NOT_SUPPORTED,
    NVLINK_REMOTE_GPU,
    NVLINK_REMOTE_SWITCH,
    FabricInfo,
    MigInstance,
)
from preflight.probe.nvml_snapshot import MIB, GpuInfo, NvLinkInfo
from tests.fakes.nvml import installed, walk_fake


def links(gpu: GpuInfo) -> tuple[NvLinkInfo, ...]:
    assert isinstance(gpu.nvlinks, tuple), gpu.nvlinks
    return gpu.nvlinks


def test_links_of_an_nvswitch_board_reach_switches() -> None:
    gpu = walk_fake("8x-h100-sxm").gpus[0]
    assert {link.remote_type for link in links(gpu)} == {NVLINK_REMOTE_SWITCH}
    assert {link.remote_name for link in links(gpu)} == {"NVSwitch"}


def test_bridge_links_reach_the_peer_gpu() -> None:
    snapshot = walk_fake("4x-h100-nvl-bridged-pairs")
    gpu = snapshot.gpus[2]
    up = [link for link in links(gpu) if link.active]
    assert len(up) == 12 and {link.remote_type for link in up} == {NVLINK_REMOTE_GPU}
    assert {link.remote_bus_id for link in up} == {snapshot.gpus[3].pci_bus_id}
    assert all(link.remote_type is None for link in links(gpu) if not link.active)


def test_a_driver_before_r470_cannot_name_the_far_end() -> None:
    """nvmlDeviceGetNvLinkRemoteDeviceType is in nvml.h from NVML 11.4 (R470): not known on 418."""
    gpu = walk_fake("8x-v100-sxm2").gpus[0]
    assert {link.remote_type for link in links(gpu) if link.active} == {NOT_SUPPORTED}
    assert gpu.query_errors == {}


def test_nvlink5_switches_have_no_pci_info_but_a_type() -> None:
    gpu = walk_fake("8x-b200-hgx").gpus[0]
    assert {(link.remote_type, link.remote_bus_id) for link in links(gpu)} == {(NVLINK_REMOTE_SWITCH, NOT_SUPPORTED)}
    assert {link.version for link in links(gpu)} == {pynvml.NVML_NVLINK_VERSION_5_0}


@pytest.mark.parametrize(("profile", "device_id"), [
    ("8x-h800-hgx", "10de:2324"), ("8x-h20-hgx", "10de:2329"), ("8x-h200-hgx", "10de:2335"),
    ("8x-b200-hgx", "10de:2901"), ("8x-a100-sxm", "10de:20b2"), ("2x-l4", "10de:27b8"),
])
def test_pci_device_ids(profile: str, device_id: str) -> None:
    assert walk_fake(profile).gpus[0].device_id == device_id


def test_hopper_on_nvswitch_reports_its_fabric_through_the_versioned_call() -> None:
    with installed("8x-h100-sxm") as library:
        from preflight.probe.nvml import PynvmlBackend
        from preflight.probe.nvml_walk import walk

        snapshot = walk(PynvmlBackend(), "fake")
        assert library is not None and library.calls["nvmlDeviceGetGpuFabricInfo"] == 0
    assert snapshot.gpus[0].fabric == FabricInfo(FABRIC_COMPLETED, 0)
    assert snapshot.gpus[0].as_dict()["fabric_state"] == "Completed"


def test_driver_525_has_only_the_unversioned_fabric_call() -> None:
    """smi_q/H800 on 525.105.17 prints "Fabric State: Completed"; nvmlDeviceGetGpuFabricInfoV came with R550."""
    gpu = walk_fake("8x-h800-hgx").gpus[3]
    assert gpu.fabric == FabricInfo(FABRIC_COMPLETED, 0) and gpu.fabric.up and gpu.query_errors == {}


def test_gpus_without_a_fabric_answer_not_supported() -> None:
    for profile in ("8x-a100-sxm", "2x-l4", "2x-h100-nvl-bridged", "8x-a100-sxm-driver470"):
        assert all(gpu.fabric is NOT_SUPPORTED for gpu in walk_fake(profile).gpus), profile


def test_fabric_manager_down_leaves_the_fabric_in_progress_and_the_links_down() -> None:
    """Fabric Manager guide (via siderolabs/extensions#717): 'In Progress' = FM likely not running;
    NVIDIA/NVSentinel#889: it stays there."""
    gpu = walk_fake("8x-h800-hgx", fabric_manager_down=True).gpus[0]
    assert isinstance(gpu.fabric, FabricInfo) and gpu.fabric.state == FABRIC_IN_PROGRESS and not gpu.fabric.up
    assert gpu.fabric.member and gpu.nvlinks_present == 8 and gpu.nvlinks_active == 0


def test_a_fabric_struct_of_an_unknown_version_is_argument_version_mismatch() -> None:
    with installed("8x-h100-sxm"):
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        wrong = pynvml.c_nvmlGpuFabricInfo_v2_t()
        wrong.version = 1
        with pytest.raises(pynvml.NVMLError) as raised:
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(wrong))
        assert raised.value.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        newer = pynvml.c_nvmlGpuFabricInfo_v3_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(newer))
        assert newer.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        pynvml.nvmlShutdown()


def test_compute_modes() -> None:
    snapshot = walk_fake("8x-h100-sxm", compute_mode={"2": COMPUTE_PROHIBITED, "3": COMPUTE_EXCLUSIVE_PROCESS})
    assert [gpu.compute_mode for gpu in snapshot.gpus[:4]] == [0, 0, COMPUTE_PROHIBITED, COMPUTE_EXCLUSIVE_PROCESS]
    assert snapshot.gpus[2].compute_mode_name == "Prohibited"


def test_a_mig_gpu_is_read_through_its_mig_handles() -> None:
    """nvml.h: per-instance memory through MIG device handles; compute mode only on a MIG handle."""
    snapshot = walk_fake("8x-a100-sxm", mig_enabled={0})
    gpu = snapshot.gpus[0]
    assert gpu.compute_mode is NOT_SUPPORTED and gpu.query_errors == {}
    assert isinstance(gpu.mig_instances, tuple) and len(gpu.mig_instances) == 1
    slice_ = gpu.mig_instances[0]
    assert isinstance(slice_, MigInstance) and slice_.uuid.startswith("MIG-")
    assert slice_.name == "Fake NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert (slice_.memory_total_bytes, slice_.memory_used_bytes, slice_.compute_mode) == (40192 * MIB, 19 * MIB, 0)
    assert gpu.memory_total_bytes == 81920 * MIB  # the GPU's own handle still reports the whole board
    assert snapshot.gpus[1].mig_instances == ()
