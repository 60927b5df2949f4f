"""The CUDA devices the job's ranks get: a whole GPU, or the MIG slice CUDA enumerates on a MIG-enabled GPU.

What CUDA enumerates with MIG, and where that is written down:

- With ``CUDA_VISIBLE_DEVICES=MIG-<uuid>[,MIG-<uuid>...]``: exactly the first MIG device named. MIG user
  guide, "CUDA Device Enumeration" (quoted by ptrblck in pytorch/pytorch#92315 and #130181): "With CUDA
  11/R450 and CUDA 12/R525, only enumeration of a single MIG instance is supported. In other words,
  regardless of how many MIG devices are created (or made available to a container), a single CUDA
  process can only enumerate a single MIG device." #92315 shows ``device_count()`` 1 for two MIG UUIDs
  and "invalid device ordinal" for ``cuda:1``.
- Without the variable (or with GPU indices or ``GPU-`` UUIDs naming a MIG-enabled GPU): CUDA shows the
  MIG devices of that GPU in its place, again one per process (same guide; pytorch/pytorch#102715:
  ``device_count()`` 1 on a MIG A100, "a process can access only a single MIG instance"). Which one is not
  documented; the first configured instance (``nvmlDeviceGetMigDeviceHandleByIndex`` 0) is taken here and
  :attr:`CudaDevice.certain` is False.

So a job on more than one device cannot use a MIG slice: a rank past the first cannot address another MIG
device, and MIG devices have no peer-to-peer access. A slice's name and memory come from its own NVML
handle (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``, 40192 MiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.parse.visible_devices import VisibleDevices
from preflight.probe.nvml import Absent, MigInstance
from preflight.probe.nvml_snapshot import GpuInfo


@dataclass(frozen=True, slots=True)
class CudaDevice:
    """One device a rank of the job gets: the physical GPU, and the MIG slice on it when MIG is on."""

    gpu: GpuInfo
    mig: MigInstance | None = None
    certain: bool = True  # False when CUDA's choice of slice is not documented

    @property
    def index(self) -> int:
        """The physical GPU's NVML index."""
        return self.gpu.index

    @property
    def is_mig(self) -> bool:
        """True when the rank gets a MIG slice, not the whole GPU."""
        return self.gpu.mig_enabled is True

    @property
    def name(self) -> str:
        """The model the rank sees (a slice names its profile)."""
        if self.mig is not None and isinstance(self.mig.name, str):
            return self.mig.name
        return str(self.gpu.name)

    @property
    def memory_total_bytes(self) -> int | Absent:
        """Bytes the rank can address: the slice's on a MIG GPU."""
        if self.is_mig:
            return self.mig.memory_total_bytes if self.mig is not None else Absent.NOT_SUPPORTED
        return self.gpu.memory_total_bytes

    @property
    def memory_taken_bytes(self) -> int:
        """Bytes already taken: used plus the driver's reserve (a slice reports its own use)."""
        if self.is_mig:
            used = self.mig.memory_used_bytes if self.mig is not None else 0
            return used if isinstance(used, int) else 0
        return sum(v for v in (self.gpu.memory_used_bytes, self.gpu.memory_reserved_bytes) if isinstance(v, int))

    def describe(self) -> str:
        """``GPU 0 (MIG 3g.40gb slice)`` or ``GPU 3``."""
        if not self.is_mig:
            return f"GPU {self.index}"
        profile = self.name.rsplit(" MIG ", 1)[-1] if " MIG " in self.name else "a MIG"
        return f"GPU {self.index} ({profile} slice)"


def job_devices(gpus: Sequence[GpuInfo], visible: VisibleDevices | None) -> tuple[CudaDevice, ...]:
    """The device each of ``gpus`` (the job's, CUDA order) gives a rank."""
    named = {v.gpu.nvml_index: v.mig_uuid for v in visible.gpus} if visible is not None else {}
    found: list[CudaDevice] = []
    for gpu in gpus:
        if gpu.mig_enabled is not True:
            found.append(CudaDevice(gpu))
            continue
        slices = gpu.mig_instances if isinstance(gpu.mig_instances, tuple) else ()
        wanted = named.get(gpu.index)
        chosen = next((m for m in slices if m.uuid == wanted), None) if wanted else None
        if chosen is not None:
            found.append(CudaDevice(gpu, chosen))
        else:
            found.append(CudaDevice(gpu, slices[0] if slices else None, certain=False))
    return tuple(found)
