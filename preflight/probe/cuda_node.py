"""The driver and GPU facts the toolkit judges need, taken from the GPU inventory (NVML).

The inventory area owns NVML (``preflight.probe.nvml`` / ``preflight.probe.gpus``); this module
only turns its ``Inventory`` into :class:`~preflight.judge.cuda_runtime.DriverFacts` and
:class:`~preflight.judge.cuda_runtime.GpuCapability`. Where the inventory modules are not
installed, the one fact that still matters is whether an NVIDIA driver exists at all
(``libnvidia-ml.so.1`` loadable): without it the node has no usable GPU.
"""

from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass
from typing import Any

from preflight.judge.cuda_runtime import DriverFacts, GpuCapability, cuda_from_nvml

NO_DRIVER_CODES = frozenset({"NVML_LIBRARY_NOT_FOUND"})
NVML_LIBRARY = "libnvidia-ml.so.1"


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

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report's node facts."""
        return {
            "driver_version": self.driver.version,
            "driver_cuda": f"{self.driver.cuda[0]}.{self.driver.cuda[1]}" if self.driver.cuda else None,
            "gpus": None if self.gpus is None else [
                {"index": gpu.index, "name": gpu.name, "capability": f"{gpu.capability[0]}.{gpu.capability[1]}"}
                for gpu in self.gpus
            ],
            "note": self.note or None,
        }


def cuda_node_from_inventory(inventory: Any) -> CudaNode:
    """Read an inventory (``preflight.probe.gpus.Inventory``) without depending on its class."""
    error = getattr(inventory, "error", None)
    if error is not None:
        problem = f"{error.code}: {error.cause}"
        gpus: tuple[GpuCapability, ...] | None = () if error.code in NO_DRIVER_CODES else None
        return CudaNode(DriverFacts(None, None, problem), gpus, problem)
    version = inventory.driver_version if isinstance(inventory.driver_version, str) else None
    raw_cuda = inventory.cuda_driver_version if isinstance(inventory.cuda_driver_version, int) else None
    found: list[GpuCapability] = []
    unknown: list[str] = []
    for gpu in inventory.gpus:
        capability = gpu.compute_capability
        if isinstance(capability, tuple):
            found.append(GpuCapability(gpu.index, str(gpu.name), (int(capability[0]), int(capability[1]))))
        else:
            unknown.append(f"GPU{gpu.index}: compute capability {capability}")
    return CudaNode(DriverFacts(version, cuda_from_nvml(raw_cuda)), tuple(found), "; ".join(unknown))


def probe_cuda_node() -> CudaNode:
    """Ask the inventory area's NVML probe; never raises."""
    try:
        gpus_module = importlib.import_module("preflight.probe.gpus")
        nvml_module = importlib.import_module("preflight.probe.nvml")
    except ImportError:
        return _without_inventory()
    return cuda_node_from_inventory(gpus_module.gather_inventory(nvml_module.PynvmlBackend()))


def _without_inventory() -> CudaNode:
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        problem = f"{NVML_LIBRARY} cannot be loaded: no NVIDIA driver on this machine"
        return CudaNode(DriverFacts(None, None, problem), (), problem)
    problem = "the GPU inventory probe (preflight.probe.gpus) is not installed"
    return CudaNode(DriverFacts(None, None, problem), None, problem)
