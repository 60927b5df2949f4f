"""The driver and GPU facts the toolkit judges need, taken from the run's NVML snapshot.

The GPU area owns NVML (``preflight.probe.nvml_snapshot``, taken once per run by
``preflight.fixtures.gpus``); this module only turns its ``NvmlSnapshot`` into
:class:`~preflight.judge.cuda_runtime.DriverFacts` and
:class:`~preflight.judge.cuda_runtime.GpuCapability` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.judge.cuda_runtime import DriverFacts, GpuCapability, cuda_from_nvml
from preflight.probe.nvml_snapshot import GpuInfo, NvmlSnapshot

NO_DRIVER_CODES = frozenset({"NVML_LIBRARY_NOT_FOUND"})


@dataclass(frozen=True, slots=True)
class CudaNode:
    """``gpus`` is None when the GPU list is unknown (NVML failed), ``()`` when there is none."""

    driver: DriverFacts
    gpus: tuple[GpuCapability, ...] | None
    note: str = ""

    @property
    def gpu_count(self) -> int | None:
        """Number of GPUs, None when unknown."""
        return None if self.gpus is None else len(self.gpus)


def cuda_node_from_inventory(inventory: NvmlSnapshot, job_gpus: Sequence[GpuInfo] | None = None) -> CudaNode:
    """Driver facts and the capabilities of ``job_gpus`` (default: every GPU NVML lists).

    Without NVML's library there is no NVIDIA driver, hence no GPU (``gpus == ()``); any other
    NVML failure leaves the GPU list unknown (``None``).
    """
    error = inventory.error
    if error is not None:
        problem = f"{error.code}: {error.cause}"
        gpus: tuple[GpuCapability, ...] | None = () if error.code in NO_DRIVER_CODES else None
        return CudaNode(DriverFacts(None, None, problem), gpus, problem)
    version = inventory.driver_version if isinstance(inventory.driver_version, str) else None
    raw_cuda = inventory.cuda_driver_version if isinstance(inventory.cuda_driver_version, int) else None
    found: list[GpuCapability] = []
    unknown: list[str] = []
    for gpu in inventory.gpus if job_gpus is None else job_gpus:
        capability = gpu.compute_capability
        if isinstance(capability, tuple):
            found.append(GpuCapability(gpu.index, str(gpu.name), (int(capability[0]), int(capability[1]))))
        else:
            unknown.append(f"GPU{gpu.index}: compute capability {capability}")
    return CudaNode(DriverFacts(version, cuda_from_nvml(raw_cuda)), tuple(found), "; ".join(unknown))
