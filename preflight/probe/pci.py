"""NVIDIA GPUs on the PCI bus, read from sysfs: present whatever the driver, NVML or a container says.

A GPU the kernel enumerates shows in ``/sys/bus/pci/devices/*/`` with ``vendor`` ``0x10de`` and a
display (``0x0300xx``) or 3D-controller (``0x0302xx``) ``class`` (NVSwitches are bridges, ``0x0680``,
and are not counted). So "GPUs present, no working driver" and "no GPU at all" can be told apart: a
container started without the NVIDIA runtime still sees the host's PCI devices in sysfs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA-compatible controller, 3D controller


@dataclass(frozen=True, slots=True)
class PciGpus:
    """NVIDIA GPUs sysfs lists (their bus ids), or why sysfs could not be read."""

    bus_ids: tuple[str, ...]
    readable: bool = True

    @property
    def count(self) -> int:
        """How many NVIDIA GPUs are on the bus."""
        return len(self.bus_ids)


def nvidia_gpus_on_pci(root: Path = Path("/")) -> PciGpus:
    """Every NVIDIA display or 3D controller under ``root/sys/bus/pci/devices``."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        return PciGpus((), readable=False)
    found = []
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
            klass = (entry / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(GPU_CLASSES):
            found.append(entry.name)
    return PciGpus(tuple(found))
