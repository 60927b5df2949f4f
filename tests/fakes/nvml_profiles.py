"""Named machines for the fake NVML, after real ones (figures from the shared captures).

A profile is data: GPU models, PCI bus ids, NVLink wiring and PCIe layout. ``tests/fakes/nvml.py``
turns one into a fake ``pynvml`` library. Device names start with "Fake" so a fake can never pass
for hardware in a report.
"""

from __future__ import annotations

from dataclasses import dataclass

# NVML_NVLINK_VERSION_* codes
NVLINK_2_0 = 2
NVLINK_3_0 = 4
NVLINK_4_0 = 6


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model as NVML describes it."""

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    nvlinks: int = 0  # links the GPU has (0: NVLink calls are "not supported")
    nvlink_version: int = 0
    pcie_max: tuple[int, int] = (4, 16)  # (generation, width) the GPU and slot allow
    idle_pcie_gen: int = 4  # PCIe cards drop to Gen1 at idle; SXM boards stay up
    ecc_enabled: bool = True
    row_remapping: bool = True  # Ampere and newer remap rows; older GPUs retire pages
    mig_capable: bool = False
    pcie_p2p: bool = True  # P2P over PCIe allowed below the CPU interconnect


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A whole machine: GPUs in NVML (PCI bus) order with their wiring."""

    name: str
    description: str
    gpus: tuple[GpuSpec, ...]
    bus_ids: tuple[str, ...]
    sockets: tuple[int, ...]  # CPU socket of each GPU (PCIe: same socket = NODE, else SYS)
    driver: str
    cuda: int
    nvswitch: bool = False  # every GPU's links go to NVSwitches: all pairs NVLink-connected
    bonds: tuple[tuple[int, int, int], ...] = ()  # direct NVLink bonds (gpu a, gpu b, links)
    pcie_switches: tuple[int, ...] = ()  # PCIe switch of each GPU (same switch = PIX); empty = none
    mig_enabled: tuple[int, ...] = ()
    mig_devices: int = 0  # MIG devices configured on each MIG-enabled GPU


H100_SXM = GpuSpec(
    "Fake NVIDIA H100 80GB HBM3",
    81559,
    (9, 0),
    nvlinks=18,
    nvlink_version=NVLINK_4_0,
    pcie_max=(5, 16),
    idle_pcie_gen=5,
    mig_capable=True,
)
A100_SXM = GpuSpec(
    "Fake NVIDIA A100-SXM4-80GB",
    81920,
    (8, 0),
    nvlinks=12,
    nvlink_version=NVLINK_3_0,
    pcie_max=(4, 16),
    idle_pcie_gen=4,
    mig_capable=True,
)
A100_PCIE = GpuSpec(
    "Fake NVIDIA A100 80GB PCIe",
    81920,
    (8, 0),
    nvlinks=12,
    nvlink_version=NVLINK_3_0,
    pcie_max=(4, 16),
    idle_pcie_gen=1,
    mig_capable=True,
)
L40S = GpuSpec("Fake NVIDIA L40S", 46068, (8, 9), pcie_max=(4, 16), idle_pcie_gen=1)
A10G = GpuSpec("Fake NVIDIA A10G", 23028, (8, 6), pcie_max=(4, 16), idle_pcie_gen=1)
V100_SXM2 = GpuSpec(
    "Fake Tesla V100-SXM2-16GB",
    16160,
    (7, 0),
    nvlinks=6,
    nvlink_version=NVLINK_2_0,
    pcie_max=(3, 16),
    idle_pcie_gen=3,
    row_remapping=False,
)
RTX_A6000 = GpuSpec("Fake NVIDIA RTX A6000", 46068, (8, 6), pcie_max=(4, 16), idle_pcie_gen=1, ecc_enabled=False)
H100_PCIE = GpuSpec(
    "Fake NVIDIA H100 PCIe",
    81559,
    (9, 0),
    pcie_max=(5, 16),
    idle_pcie_gen=1,
    mig_capable=True,
)

# DGX-1 V100 hybrid cube mesh as wired in shared/fixtures/topo/8xV100-SXM2-16GB-hybrid-cube-mesh-*.
_V100_CUBE_MESH = (
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 6, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 7, 2),
    (2, 3, 2),
    (2, 4, 1),
    (3, 5, 1),
    (4, 5, 2),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 1),
)

PROFILES: dict[str, ServerSpec] = {
    spec.name: spec
    for spec in (
        ServerSpec(
            "8x-h100-sxm",
            "HGX/DGX H100: 8 GPUs, 18 NVLink 4.0 links each to NVSwitches",
            (H100_SXM,) * 8,
            (
                "00000000:18:00.0",
                "00000000:2A:00.0",
                "00000000:3A:00.0",
                "00000000:5D:00.0",
                "00000000:9A:00.0",
                "00000000:AB:00.0",
                "00000000:BA:00.0",
                "00000000:DB:00.0",
            ),
            (0, 0, 0, 0, 1, 1, 1, 1),
            "550.54.15",
            12040,
            nvswitch=True,
        ),
        ServerSpec(
            "8x-a100-sxm",
            "HGX A100 80GB: 8 GPUs, 12 NVLink 3.0 links each to NVSwitches",
            (A100_SXM,) * 8,
            (
                "00000000:3F:00.0",
                "00000000:44:00.0",
                "00000000:62:00.0",
                "00000000:68:00.0",
                "00000000:A9:00.0",
                "00000000:AD:00.0",
                "00000000:D2:00.0",
                "00000000:D5:00.0",
            ),
            (0, 0, 0, 0, 1, 1, 1, 1),
            "550.163.01",
            12040,
            nvswitch=True,
        ),
        ServerSpec(
            "4x-a100-pcie-bridged",
            "Azure NC96ads A100 v4: 4 PCIe A100, NVLink bridges on 0-1 and 2-3",
            (A100_PCIE,) * 4,
            ("00000001:00:00.0", "00000002:00:00.0", "00000003:00:00.0", "00000004:00:00.0"),
            (0, 1, 2, 3),
            "535.154.05",
            12020,
            bonds=((0, 1, 12), (2, 3, 12)),
        ),
        ServerSpec(
            "8x-l40s",
            "8x L40S PCIe server, two sockets, no NVLink",
            (L40S,) * 8,
            (
                "00000000:01:00.0",
                "00000000:25:00.0",
                "00000000:41:00.0",
                "00000000:61:00.0",
                "00000000:81:00.0",
                "00000000:A1:00.0",
                "00000000:C1:00.0",
                "00000000:E1:00.0",
            ),
            (0, 0, 0, 0, 1, 1, 1, 1),
            "550.90.07",
            12040,
            pcie_switches=(0, 0, 1, 1, 2, 2, 3, 3),
        ),
        ServerSpec(
            "1x-a10g",
            "AWS g5.xlarge: one A10G",
            (A10G,),
            ("00000000:00:1E.0",),
            (0,),
            "535.183.01",
            12020,
        ),
        ServerSpec(
            "4x-a100-sxm-mixed-mig",
            "4x A100 SXM, MIG enabled on GPUs 0 and 1 (two 3g.40gb each)",
            (A100_SXM,) * 4,
            ("00000000:07:00.0", "00000000:0B:00.0", "00000000:48:00.0", "00000000:4C:00.0"),
            (0, 0, 0, 0),
            "535.129.03",
            12020,
            nvswitch=True,
            mig_enabled=(0, 1),
            mig_devices=2,
        ),
        ServerSpec(
            "8x-v100-sxm2",
            "DGX-1 V100: hybrid cube mesh, 6 NVLink 2.0 links per GPU, retired pages",
            (V100_SXM2,) * 8,
            (
                "00000000:06:00.0",
                "00000000:07:00.0",
                "00000000:0A:00.0",
                "00000000:0B:00.0",
                "00000000:85:00.0",
                "00000000:86:00.0",
                "00000000:89:00.0",
                "00000000:8A:00.0",
            ),
            (0, 0, 0, 0, 1, 1, 1, 1),
            "418.67",
            10010,
            bonds=_V100_CUBE_MESH,
        ),
        ServerSpec(
            "2x-mixed-a6000-h100",
            "Workstation: an RTX A6000 at the lower bus id, an H100 PCIe after it",
            (RTX_A6000, H100_PCIE),
            ("00000000:17:00.0", "00000000:65:00.0"),
            (0, 0),
            "550.127.05",
            12040,
        ),
    )
}

HEALTHY_PROFILES = ("8x-h100-sxm", "8x-a100-sxm", "4x-a100-pcie-bridged", "8x-l40s", "1x-a10g", "8x-v100-sxm2")
