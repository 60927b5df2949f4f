"""IOMMU and PCIe ACS evidence: the kernel command line, IOMMU groups and ``lspci -vvv``.

This is evidence for the peer-to-peer checks: an enabled IOMMU in translation mode or ACS
redirect on PCIe bridges is the usual cause when GPU P2P is slow or hangs. ``lspci`` runs only
when it is installed, under a deadline, and its failure is a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from preflight.parse.lspci_acs import AcsReport, LspciError, parse_lspci_acs
from preflight.probe.command import CommandRunner

LSPCI_TIMEOUT_S = 10.0

IOMMU_PARAMETERS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict", "pci")
"""Kernel parameters that decide IOMMU mode and ACS (``pci=noacs``)."""


@dataclass(frozen=True, slots=True)
class PcieFacts:
    """What could be read about IOMMU and ACS, each part None when unreadable."""

    cmdline: str | None
    kernel_parameters: dict[str, str]
    iommu_groups: int | None
    acs: AcsReport | None
    lspci_problem: str | None
    lspci_excerpt: str

    @property
    def iommu_mode(self) -> str:
        """``passthrough``, ``off``, ``translated`` (DMA remapping on) or ``unknown``."""
        params = self.kernel_parameters
        if params.get("iommu") == "pt" or params.get("iommu.passthrough") == "1":
            return "passthrough"
        if params.get("intel_iommu") == "off" or params.get("amd_iommu") == "off" or params.get("iommu") == "off":
            return "off"
        if self.iommu_groups:
            return "translated"
        if self.iommu_groups == 0:
            return "off"
        return "unknown"


def probe_pcie(
    root: Path,
    runner: CommandRunner,
    timeout_s: float = LSPCI_TIMEOUT_S,
) -> PcieFacts:
    """Read ``/proc/cmdline``, count ``/sys/kernel/iommu_groups`` and run ``lspci -vvv``."""
    try:
        cmdline: str | None = (root / "proc/cmdline").read_text().strip()
    except OSError:
        cmdline = None
    groups_dir = root / "sys/kernel/iommu_groups"
    groups = len(list(groups_dir.iterdir())) if groups_dir.is_dir() else None
    result = runner(["lspci", "-vvv"], timeout_s)
    acs: AcsReport | None = None
    problem: str | None = None
    excerpt = ""
    if not result.ok:
        problem = result.describe_failure() or "lspci gave no output"
    else:
        try:
            acs = parse_lspci_acs(result.stdout)
        except LspciError as exc:
            problem = f"lspci output not understood: {exc}"
        else:
            excerpt = "\n".join(f"{c.address} {c.description}\n    {c.line}" for c in acs.controls)
            if acs.access_denied and not acs.controls:
                problem = f"lspci hid the capabilities of {acs.access_denied} devices (run as root to read ACS)"
    return PcieFacts(
        cmdline=cmdline,
        kernel_parameters=kernel_parameters(cmdline or ""),
        iommu_groups=groups,
        acs=acs,
        lspci_problem=problem,
        lspci_excerpt=excerpt,
    )


def kernel_parameters(cmdline: str) -> dict[str, str]:
    """The IOMMU-related ``key=value`` words of a kernel command line (before a lone ``--``)."""
    found: dict[str, str] = {}
    for word in cmdline.split():
        if word == "--":
            break
        key, sep, value = word.partition("=")
        if sep and key in IOMMU_PARAMETERS:
            found[key] = value
    return found
