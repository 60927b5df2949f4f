"""The memory fit's view of the job's GPUs, taken from the NVML snapshot of a fake machine."""

from __future__ import annotations

from preflight.node.devices import CudaDevice, job_devices
from preflight.probe.gpu_memory import GpuMemory, from_inventory
from preflight.probe.nvml import NOT_SUPPORTED
from preflight.probe.nvml_snapshot import NvmlSnapshot, SnapshotError
from tests.fakes.nvml import walk_fake

MiB = 2**20


def test_the_job_gpus_memory_counts_the_drivers_reserve_as_taken() -> None:
    snapshot = walk_fake("8x-h100-sxm")
    source = from_inventory(snapshot, job_devices(snapshot.gpus[2:4], None))
    assert [g.index for g in source.gpus] == [2, 3] and source.source == "gpu inventory"
    first = snapshot.gpus[2]
    reserved = first.memory_reserved_bytes if isinstance(first.memory_reserved_bytes, int) else 0
    used = first.memory_used_bytes if isinstance(first.memory_used_bytes, int) else 0
    assert source.gpus[0] == GpuMemory(2, str(first.name), int(first.memory_total_bytes), used + reserved)  # type: ignore[arg-type]
    assert reserved > 0  # a real GPU at idle keeps memory for the driver (tests/fakes/nvml_profiles.py)


def test_unknown_memory_and_no_gpu_give_a_reason() -> None:
    import dataclasses

    snapshot = walk_fake("1x-a10g")
    unknown = dataclasses.replace(snapshot.gpus[0], memory_total_bytes=NOT_SUPPORTED)
    assert "memory is unknown" in (from_inventory(snapshot, (CudaDevice(unknown),)).reason or "")
    empty = NvmlSnapshot(label="pynvml", error=SnapshotError("NVML_DRIVER_NOT_LOADED", "driver not loaded", "x"))
    assert "driver not loaded" in (from_inventory(empty, ()).reason or "")


def test_a_mig_gpu_counts_as_its_slice() -> None:
    """Issue 24 row 4: the memory fit sizes a MIG GPU at the slice CUDA enumerates, not at 80 GB."""
    snapshot = walk_fake("8x-a100-sxm", mig_enabled={0})
    source = from_inventory(snapshot, job_devices(snapshot.gpus, None))
    assert source.gpus[0] == GpuMemory(0, "Fake NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40192 * MiB, 19 * MiB)
    assert source.gpus[1].total_bytes == 81920 * MiB and "GPU 0 (3g.40gb slice)" in source.source


def test_a_lost_gpu_has_no_memory_to_size() -> None:
    snapshot = walk_fake("8x-h100-sxm", lost_at_handle={3})
    assert "GPU 3 is lost" in (from_inventory(snapshot, job_devices(snapshot.gpus, None)).reason or "")
