"""Each of the job's GPUs' total and available memory, for the memory fit, from the run's NVML snapshot.

Only the GPUs the job uses count (the node model's ``job_gpus``: ``CUDA_VISIBLE_DEVICES`` applied).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.probe.nvml import Absent
from preflight.probe.nvml_snapshot import GpuInfo, NvmlSnapshot


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


def from_inventory(snapshot: NvmlSnapshot, gpus: Sequence[GpuInfo]) -> GpuMemorySource:
    """The memory of ``gpus`` (the job's, from the run's NVML snapshot). Memory the driver keeps
    (``memory_reserved``) is as unavailable to the job as memory in use."""
    found: list[GpuMemory] = []
    for gpu in gpus:
        total = gpu.memory_total
        if isinstance(total, Absent):
            return GpuMemorySource((), "gpu inventory", f"GPU {gpu.index} memory is unknown ({total})")
        taken = sum(v for v in (gpu.memory_used, gpu.memory_reserved) if isinstance(v, int))
        found.append(GpuMemory(gpu.index, str(gpu.name), total, taken))
    if not found:
        cause = snapshot.error.cause if snapshot.error is not None else "the job uses no GPU NVML lists"
        return GpuMemorySource((), "gpu inventory", f"no NVIDIA GPU visible: {cause}")
    return GpuMemorySource(tuple(found), "gpu inventory")
