"""Expected all-reduce bus bandwidth by GPU model, GPU count and interconnect, each with its source.

Figures are large-message (>= 1 GiB where the source has it) peak busbw as nccl-tests prints it,
taken from ``../shared/reference/ecosystem.md`` (section B1) and the captured nccl-tests tables
indexed in ``../shared/fixtures/INDEX.md``. A platform with no row gets no expected figure: the
check reports what it measured and does not invent a threshold. The user's own figure
(``--expect-busbw``) always wins.

Interconnect is the slowest link the all-reduce ring must cross, from the job's layout as NVML reports
it (:mod:`preflight.node.fabric`): GPUs that all reach NVSwitches are ``NVSWITCH``; a bridged *pair*
with nothing else is ``NVLINK_BRIDGE``; as soon as the ring has to cross PCIe (for example two bridged
pairs) it is the PCIe generation. The GPU's name picks the row of the table (the figure), never the class.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from preflight.node.fabric import Layout
from preflight.probe.nvml_snapshot import GpuInfo


class Interconnect(str, enum.Enum):
    """The slowest link class between the GPUs of the job."""

    NVSWITCH = "NVSwitch"
    NVLINK_BRIDGE = "NVLink bridge"
    PCIE_GEN3 = "PCIe Gen3"
    PCIE_GEN4 = "PCIe Gen4"
    PCIE_GEN5 = "PCIe Gen5"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Reference:
    """One row of the table: a platform, its expected peak busbw (GB/s) and where the figure comes from."""

    family: str | None
    min_gpus: int
    max_gpus: int
    interconnect: Interconnect
    busbw_gbps: float
    source: str

    def matches(self, family: str | None, gpus: int, interconnect: Interconnect) -> bool:
        """True when this row covers the platform (a row with no family covers any GPU)."""
        return (
            (self.family is None or self.family == family)
            and self.min_gpus <= gpus <= self.max_gpus
            and self.interconnect is interconnect
        )


@dataclass(frozen=True, slots=True)
class Expectation:
    """The figure a run is judged against and why."""

    busbw_gbps: float
    source: str
    platform: str


_NV = Interconnect.NVSWITCH
_BRIDGE = Interconnect.NVLINK_BRIDGE
_GEN4 = Interconnect.PCIE_GEN4
_GEN5 = Interconnect.PCIE_GEN5

REFERENCES: tuple[Reference, ...] = (
    Reference("H100 SXM", 8, 8, _NV, 475.0,
              "8x H100 SXM with NVLS: 476.53 GB/s @4 GiB, nccl-tests table in NVIDIA/nccl-tests#290 "
              "(maintainer: 'in the expected range'); ~480 GB/s per sjeaugey in NVIDIA/nccl-tests#212"),
    Reference("H100 SXM", 7, 7, _NV, 460.0,
              "7 GPUs of an H100 NVSwitch node: ~460 GB/s (user measurements, NVIDIA/nccl#1455)"),
    Reference("H100 SXM", 6, 6, _NV, 440.0,
              "6 GPUs of an H100 NVSwitch node: ~440 GB/s (user measurements, NVIDIA/nccl#1455)"),
    Reference("H100 SXM", 5, 5, _NV, 420.0,
              "5 GPUs of an H100 NVSwitch node: ~420 GB/s (user measurements, NVIDIA/nccl#1455)"),
    Reference("H100 SXM", 4, 4, _NV, 355.0,
              "4x H100 SXM VM: 355.89 GB/s @1 GiB, NCCL 2.26.2 (captured nccl-tests table, Lambda blog)"),
    Reference("H100 SXM", 2, 3, _NV, 365.0,
              "2-4 GPUs of an H100 NVSwitch node: ~365-370 GB/s, NVLS gains start at 5 GPUs (NVIDIA/nccl#1455)"),
    Reference("H200 SXM", 8, 8, _NV, 475.0,
              "8x H200 SXM: 475 GB/s (NVIDIA/nccl-tests#272); 482 GB/s via torch (stas00/ml-engineering "
              "all-reduce-8xH200); Azure AzNHC passes at 431 GB/s @16 GiB"),
    Reference("A100 SXM", 8, 8, _NV, 230.0,
              "8x A100 SXM: ~230 GB/s (NVIDIA/nccl-tests#149); captured 232.93 GB/s @4 GiB; "
              "Azure AzNHC passes at 228 GB/s"),
    Reference("A100 SXM", 4, 4, _NV, 230.0,
              "4 of 8 A100 SXM on NVSwitch: 234.74 GB/s @8 GiB (captured nccl-tests table)"),
    Reference("B200", 8, 8, _NV, 830.0,
              "8x B200: 830+ GB/s (NVIDIA/nccl#1807); 838.97 GB/s @16 GiB via torch (stas00/ml-engineering)"),
    Reference("B300", 8, 8, _NV, 845.0, "8x B300 with NVLS: 845 GB/s (user measurement, NVIDIA/nccl#2140)"),
    Reference("A40", 2, 2, _BRIDGE, 47.0, "2x A40 over an NV4 bridge: 47.49 GB/s @8 GiB (captured nccl-tests table)"),
    Reference("A100 PCIe", 2, 2, _BRIDGE, 208.0,
              "2x A100 PCIe on an NV12 bridge: ~208 GB/s (user, NVIDIA/nccl-tests#178); "
              "Azure NC48ads_A100_v4 passes at 193"),
    Reference("H100 PCIe", 2, 2, _BRIDGE, 116.0,
              "2x H100 PCIe with an NVLink bridge: ~116 GB/s (user, NVIDIA/nccl#1161, nccl-tests#194)"),
    Reference("A100 PCIe", 4, 4, _GEN4, 25.0,
              "4x A100 PCIe in bridged pairs: Azure AzNHC passes NC96ads_A100_v4 at 25 GB/s @8 GiB"),
    Reference("RTX 4090", 8, 8, _GEN4, 15.0,
              "8x RTX 4090, stock driver (no P2P, SHM): 15.04 GB/s @32 MiB (captured nccl-tests table)"),
    Reference("RTX 5090", 8, 8, _GEN5, 28.0, "8x RTX 5090: 28 GB/s (NVIDIA/nccl#1639)"),
    Reference("RTX 5090", 4, 4, _GEN5, 35.0, "4x RTX 5090: 35 GB/s (NVIDIA/nccl#1639)"),
    Reference("RTX PRO 6000 Blackwell", 8, 8, _GEN5, 22.0,
              "8x RTX PRO 6000 Blackwell, dual socket: 22.2 GB/s @32 MiB at default settings, 37-41 with "
              "NCCL_MIN_NCHANNELS=8 (voipmonitor/rtx6kpro pcie-bandwidth.md, community)"),
    Reference(None, 2, 8, _GEN4, 15.0,
              "PCIe Gen4 hosts reach ~15-25 GB/s busbw, CPU/root-complex bound (captured: 8x RTX 4090 15.04, "
              "4x RTX 4090 with P2P 25.31; AzNHC 4x A100 PCIe 25); the low end is used"),
    Reference(None, 2, 8, _GEN5, 20.0,
              "PCIe Gen5 hosts reach ~20-45 GB/s busbw (rtx6kpro 22.2 default; NVIDIA/nccl#1639 28-35); "
              "the low end is used"),
)

_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), family)
    for pattern, family in (
        (r"\bGH200\b", "GH200"),
        (r"\bH100\b.*\bNVL\b", "H100 NVL"),
        (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
        (r"\bH100\b.*\b(?:SXM|HBM3)\b", "H100 SXM"),
        (r"\bH200\b.*\bNVL\b", "H200 NVL"),
        (r"\bH200\b", "H200 SXM"),
        (r"\bA100\b.*\bSXM", "A100 SXM"),
        (r"\bA100\b.*\bPCIE\b", "A100 PCIe"),
        (r"\bGB200\b", "GB200"),
        (r"\bB200\b", "B200"),
        (r"\bB300\b", "B300"),
        (r"\bRTX PRO 6000\b.*\bBlackwell\b", "RTX PRO 6000 Blackwell"),
        (r"\bRTX 4090\b", "RTX 4090"),
        (r"\bRTX 5090\b", "RTX 5090"),
        (r"\bL40S\b", "L40S"),
        (r"\bA40\b", "A40"),
    )
)


def gpu_family(name: str) -> str | None:
    """NVML product name -> table family (``NVIDIA H100 80GB HBM3`` -> ``H100 SXM``); None if unknown."""
    for pattern, family in _FAMILIES:
        if pattern.search(name):
            return family
    return None


def platform_text(gpu_name: str, gpus: int, interconnect: Interconnect) -> str:
    """``8x H100 SXM over NVSwitch`` (the raw name when the family is unknown)."""
    family = gpu_family(gpu_name) or gpu_name
    if interconnect is Interconnect.UNKNOWN:
        return f"{gpus}x {family}"
    return f"{gpus}x {family} over {interconnect.value}"


def lookup(gpu_name: str, gpus: int, interconnect: Interconnect) -> Reference | None:
    """The most specific row for the platform: the GPU's own row first, then a generic PCIe row."""
    family = gpu_family(gpu_name)
    for reference in REFERENCES:
        if reference.family is not None and reference.matches(family, gpus, interconnect):
            return reference
    for reference in REFERENCES:
        if reference.family is None and reference.matches(family, gpus, interconnect):
            return reference
    return None


def expected_busbw(
    gpu_name: str, gpus: int, interconnect: Interconnect, override_gbps: float | None = None
) -> Expectation | None:
    """What to judge against: the user's figure, else the table's, else None (figures only)."""
    platform = platform_text(gpu_name, gpus, interconnect)
    if override_gbps is not None:
        return Expectation(override_gbps, "given with --expect-busbw", platform)
    reference = lookup(gpu_name, gpus, interconnect)
    if reference is None:
        return None
    return Expectation(reference.busbw_gbps, reference.source, platform)


def classify_interconnect(layout: Layout, gpus: int, pcie_gen: int | None) -> Interconnect:
    """The slowest link class the ring crosses, from the job's layout as NVML reports it (never from the
    GPU's name) and the lowest maximum PCIe generation of its GPUs.

    Every GPU reaching NVSwitches is the NVSwitch class; two GPUs joined directly (a bridge, a board link)
    the bridge class; a direct mesh of more GPUs has no row (UNKNOWN); otherwise some hop crosses PCIe and
    its generation decides.
    """
    if gpus >= 2 and layout is Layout.NVSWITCH:
        return Interconnect.NVSWITCH
    if layout is Layout.NVLINK_ALL:
        return Interconnect.NVLINK_BRIDGE if gpus == 2 else Interconnect.UNKNOWN
    return {3: Interconnect.PCIE_GEN3, 4: Interconnect.PCIE_GEN4, 5: Interconnect.PCIE_GEN5}.get(
        pcie_gen or 0, Interconnect.UNKNOWN
    )


def job_busbw_expectation(gpus: Sequence[GpuInfo], layout: Layout, override_gbps: float | None = None,
                          ranks: int = 0) -> Expectation | None:
    """What the job's all-reduce is judged against: ``--expect-busbw``, else the table's row for the job's
    GPUs (their model and count; ``layout`` from NVML, :attr:`preflight.node.Node.fabric`), else None."""
    fallback = Expectation(float(override_gbps), "given with --expect-busbw", f"{ranks} ranks") \
        if override_gbps else None
    if len(gpus) < 2:
        return fallback
    gens = [g.pcie_max[0] for g in gpus if isinstance(g.pcie_max, tuple)]
    interconnect = classify_interconnect(layout, len(gpus), min(gens) if len(gens) == len(gpus) else None)
    return expected_busbw(str(gpus[0].name), len(gpus), interconnect, override_gbps)
