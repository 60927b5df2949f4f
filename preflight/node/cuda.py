"""The driver and the job's GPUs as CUDA needs them (versions, compute capabilities), from the NVML snapshot.

The toolkit judges (:mod:`preflight.judge.cuda_runtime`) read these; the node model derives them once
(:attr:`preflight.node.Node.cuda`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.probe.nvml_snapshot import GpuInfo, NvmlSnapshot

NO_DRIVER_CODES = frozenset({"NVML_LIBRARY_NOT_FOUND"})


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """The driver as NVML reports it (``nvmlSystemGetDriverVersion``/``GetCudaDriverVersion``)."""

    version: str | None
    cuda: tuple[int, int] | None
    problem: str | None = None

    def describe(self) -> str:
        """``driver 550.54.15 (CUDA 12.4)``."""
        cuda = f" (CUDA {self.cuda[0]}.{self.cuda[1]})" if self.cuda else ""
        return f"driver {self.version or 'of unknown version'}{cuda}"


@dataclass(frozen=True, slots=True)
class GpuCapability:
    """One GPU's compute capability, e.g. ``GpuCapability(0, "NVIDIA H100 80GB HBM3", (9, 0))``."""

    index: int
    name: str
    capability: tuple[int, int]

    @property
    def sm(self) -> str:
        """``sm_90``."""
        return f"sm_{self.capability[0]}{self.capability[1]}"


def cuda_from_nvml(value: int | None) -> tuple[int, int] | None:
    """``nvmlSystemGetCudaDriverVersion`` encodes 12.4 as ``12040`` (1000*major + 10*minor)."""
    if value is None or value <= 0:
        return None
    return value // 1000, (value % 1000) // 10


@dataclass(frozen=True, slots=True)
class CudaFacts:
    """The driver, and the compute capability of each GPU the job uses. ``gpus`` is None when the GPU
    list is unknown (NVML failed), ``()`` when there is none; a GPU NVML could not describe (lost, a
    failed query) is left out and named in ``unknown``."""

    driver: DriverFacts
    gpus: tuple[GpuCapability, ...] | None
    unknown: tuple[str, ...] = ()

    @property
    def gpu_count(self) -> int | None:
        """Number of the job's GPUs with a known capability, None when unknown."""
        return None if self.gpus is None else len(self.gpus)

    @property
    def note(self) -> str:
        """What NVML could not say, for summaries."""
        return "; ".join(self.unknown)

    def capability(self, index: int) -> GpuCapability | None:
        """The GPU at NVML ``index``, None when its capability is not known."""
        return next((g for g in self.gpus or () if g.index == index), None)


def cuda_facts(snapshot: NvmlSnapshot, job_gpus: Sequence[GpuInfo]) -> CudaFacts:
    """Driver facts and the capabilities of ``job_gpus``.

    Without NVML's library there is no NVIDIA driver, hence no GPU (``gpus == ()``); any other NVML
    failure leaves the GPU list unknown (``None``).
    """
    error = snapshot.error
    if error is not None:
        problem = f"{error.code}: {error.cause}"
        gpus: tuple[GpuCapability, ...] | None = () if error.code in NO_DRIVER_CODES else None
        return CudaFacts(DriverFacts(None, None, problem), gpus, (problem,))
    version = snapshot.driver_version if isinstance(snapshot.driver_version, str) else None
    raw_cuda = snapshot.cuda_driver_version if isinstance(snapshot.cuda_driver_version, int) else None
    found: list[GpuCapability] = []
    unknown: list[str] = []
    for gpu in job_gpus:
        capability = gpu.compute_capability
        if gpu.gpu_lost:
            unknown.append(f"GPU {gpu.index} is lost")
        elif isinstance(capability, tuple):
            found.append(GpuCapability(gpu.index, str(gpu.name), (int(capability[0]), int(capability[1]))))
        else:
            unknown.append(f"GPU{gpu.index}: compute capability {capability}")
    return CudaFacts(DriverFacts(version, cuda_from_nvml(raw_cuda)), tuple(found), tuple(unknown))
