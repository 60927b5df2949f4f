"""PCIe Access Control Services (ACS) state from ``lspci -vvv`` output.

ACS "request redirect" on a PCIe bridge sends peer-to-peer traffic between GPUs below it up to
the root complex (and the IOMMU), which makes NCCL's P2P transport crawl or hang (NVIDIA/nccl
#199, #631, #2079). Only the ``ACSCtl`` line (what is enabled) matters; ``ACSCap`` is what the
bridge could do. Without root, lspci prints ``Capabilities: <access denied>`` and the state is
unknown, which this parser reports rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DEVICE = re.compile(r"^(?P<address>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<description>.+)$")
_FLAG = re.compile(r"(\w+)([+-])")


class LspciError(ValueError):
    """Text that is not ``lspci -vvv`` output."""


@dataclass(frozen=True, slots=True)
class AcsControl:
    """One device's ``ACSCtl`` flags, e.g. ``{"SrcValid": True, "ReqRedir": True, ...}``."""

    address: str
    description: str
    flags: dict[str, bool]
    line: str

    @property
    def redirects(self) -> bool:
        """Request or completion redirect enabled: P2P below this bridge goes via the root complex."""
        return self.flags.get("ReqRedir", False) or self.flags.get("CmpltRedir", False)


@dataclass(frozen=True, slots=True)
class AcsReport:
    """Every device with an ACSCtl line, and how many devices hid their capabilities."""

    devices: int
    controls: tuple[AcsControl, ...]
    access_denied: int

    @property
    def redirecting(self) -> tuple[AcsControl, ...]:
        """Bridges with ACS redirect enabled."""
        return tuple(control for control in self.controls if control.redirects)


def parse_lspci_acs(text: str) -> AcsReport:
    """Read ``lspci -vvv``: devices, their ACSCtl flags, and ``<access denied>`` counts."""
    devices = 0
    denied = 0
    controls: list[AcsControl] = []
    address = description = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        header = _DEVICE.match(line)
        if header and not raw[:1].isspace():
            devices += 1
            address, description = header.group("address"), header.group("description")
            continue
        stripped = line.strip()
        if stripped == "Capabilities: <access denied>":
            denied += 1
        elif stripped.startswith("ACSCtl:"):
            if not address:
                raise LspciError(f"ACSCtl line before any device header: {stripped!r}")
            flags = {name: sign == "+" for name, sign in _FLAG.findall(stripped.split(":", 1)[1])}
            if not flags:
                raise LspciError(f"ACSCtl line without flags: {stripped!r}")
            controls.append(AcsControl(address, description, flags, stripped))
    if devices == 0 and text.strip():
        raise LspciError("no PCI device header found (expected lines like '00:01.0 PCI bridge: ...')")
    return AcsReport(devices=devices, controls=tuple(controls), access_denied=denied)
