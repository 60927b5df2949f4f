"""Each of the job's devices' total and available memory, for the memory fit, from the run's NVML snapshot.

Only the devices the job uses count (the node model's ``job_devices``: ``CUDA_VISIBLE_DEVICES`` applied, a
MIG-enabled GPU counted as the slice CUDA enumerates there, a lost GPU as unknown memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.node.devices import CudaDevice
from preflight.probe.nvml import Absent
from preflight.probe.nvml_snapshot import NvmlSnapshot


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One GPU's memory as the sizing needs it, in bytes."""

    index: int
    name: str
    total_bytes: int
    used_bytes: int = 0


@dataclass(frozen=True, slots=True)
class GpuMemorySource:
    """The GPUs for sizing and where they came from, or why there are none."""

    gpus: tuple[GpuMemory, ...]
    source: str
    reason: str | None = None


def from_inventory(snapshot: NvmlSnapshot, devices: Sequence[CudaDevice]) -> GpuMemorySource:
    """The memory of ``devices`` (the job's, from the run's NVML snapshot). Memory the driver keeps
    (``memory_reserved_bytes``) is as unavailable to the job as memory in use; a MIG slice has its own figures."""
    found: list[GpuMemory] = []
    for device in devices:
        if device.gpu.gpu_lost:
            return GpuMemorySource((), "gpu inventory", f"GPU {device.index} is lost: its memory cannot be read")
        total = device.memory_total_bytes
        if isinstance(total, Absent):
            return GpuMemorySource((), "gpu inventory", f"GPU {device.index} memory is unknown ({total})")
        found.append(GpuMemory(device.index, device.name, total, device.memory_taken_bytes))
    if not found:
        cause = snapshot.error.cause if snapshot.error is not None else "the job uses no GPU NVML lists"
        return GpuMemorySource((), "gpu inventory", f"no NVIDIA GPU visible: {cause}")
    mig = [d.describe() for d in devices if d.is_mig]
    return GpuMemorySource(tuple(found), "gpu inventory" + (f" ({', '.join(mig)}: the slice's memory)" if mig else ""))
