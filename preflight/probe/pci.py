"""NVIDIA GPUs on the PCI bus, read from sysfs: present whatever the driver, NVML or a container says.

A GPU the kernel enumerates shows in ``/sys/bus/pci/devices/*/`` with ``vendor`` ``0x10de`` and a
display (``0x0300xx``) or 3D-controller (``0x0302xx``) ``class``. NVSwitches of an HGX board are NVIDIA
bridges (``0x0680xx``: ``lspci -nn`` "Bridge: ... GH100 [H100 NVSwitch] [10de:22a3]" on an H20 node,
NVIDIA/go-nvml#166 on A100; leptonai/gpud#906 detects NVSwitch boards the same way): they are listed
apart, as evidence that the GPUs' NVLinks should be up whatever the driver says. So "GPUs present, no
working driver" and "no GPU at all" can be told apart: a container started without the NVIDIA runtime
still sees the host's PCI devices in sysfs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA-compatible controller, 3D controller
BRIDGE_CLASS = "0x0680"  # "Bridge: Other", as NVSwitches enumerate


@dataclass(frozen=True, slots=True)
class PciGpus:
    """NVIDIA GPUs sysfs lists (their bus ids), or why sysfs could not be read."""

    bus_ids: tuple[str, ...]
    readable: bool = True
    nvswitch_bus_ids: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """How many NVIDIA GPUs are on the bus."""
        return len(self.bus_ids)


def nvidia_gpus_on_pci(root: Path = Path("/")) -> PciGpus:
    """Every NVIDIA display or 3D controller (and NVSwitch) under ``root/sys/bus/pci/devices``."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        return PciGpus((), readable=False)
    found: list[str] = []
    switches: list[str] = []
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
            klass = (entry / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(GPU_CLASSES):
            found.append(entry.name)
        elif vendor == NVIDIA_VENDOR and klass.startswith(BRIDGE_CLASS):
            switches.append(entry.name)
    return PciGpus(tuple(found), nvswitch_bus_ids=tuple(switches))
