"""Named machines for the fake NVML C library, after real ones; each says where it comes from.

A profile is data: GPU models, PCI bus ids, NVLink wiring, PCIe layout, driver version.
``tests/fakes/nvml.py`` answers NVML C calls from one. Device names start with "Fake" so a fake can
never pass for hardware in a report. Captures cited live in ``../shared/fixtures`` (smi/, smi_q/,
topo/); issues are public GitHub threads.

Figures every profile shares (per GPU model, below):

- "FB Memory Usage" at idle, as ``nvidia-smi -q`` prints it from ``nvmlMemory_v2_t``: H100/H800
  80 GB: Reserved 516 MiB, Used 0 MiB (smi_q/H800-q-i0-driver525.105.17-...); RTX A6000: Reserved
  450 MiB, Used 1 MiB (smi_q/RTX-A6000-q-...-driver550.127.05-...); A100 80 GB: Used 1 MiB
  (smi/8xA100-SXM4-80GB-driver550.163.01-...) and a v1 "used" of 912 MB against 7.8 MB from v2
  (rust-nvml/nvml-wrapper#57), so about 904 MiB reserved; V100 on driver 418.67 (no v2 call):
  Used 10 MiB (smi_q/V100-SXM2-32GB-POWER9-q-driver418.67-...).
- Idle PCIe: PCIe cards train down to Gen1 at idle (smi_q RTX A6000: "Current: 1" of "Max: 4");
  SXM boards in these captures stay at their maximum (smi_q H800: Gen5 of 5, V100: Gen3 of 3).
- PCI device ids (``nvmlPciInfo_t.pciDeviceId``, device << 16 | 0x10DE): the public PCI ID database as
  tabulated in a GPU-product map of a public Go repository (find_string "GH100 [H20]"), agreeing with
  NVIDIA/go-nvml ``pkg/nvml/mock/gpus`` (H100 SXM 0x2330) and with the captures (smi_q H800 "Device Id :
  0x232410DE", smi_q RTX A6000 0x223010DE); NVSwitches: 0x22A3 on Hopper boards (NVIDIA/go-nvml#166,
  ``lspci -nn`` of an H20 node "GH100 [H100 NVSwitch] [10de:22a3]"), 0x1AF1 on A100 boards (PCI ID database).
- NVLink versions per generation (``NVML_NVLINK_VERSION_*``, pynvml and nvml.h): 2.0 = 2 on V100, 3.0 = 4
  on A100, 4.0 = 6 on H100/H800/H20/H200, 5.0 = 7 on B200.
"""

from __future__ import annotations

from dataclasses import dataclass

# NVML_NVLINK_VERSION_* codes
NVLINK_2_0 = 2
NVLINK_3_0 = 4
NVLINK_4_0 = 6
NVLINK_5_0 = 7
HOPPER_NVSWITCH = 0x22A310DE
AMPERE_NVSWITCH = 0x1AF110DE


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model as NVML describes it."""

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    nvlinks: int = 0  # links NVML lists (0: NVLink calls are "not supported")
    nvlink_version: int = 0
    pcie_max: tuple[int, int] = (4, 16)  # (generation, width) the GPU and slot allow
    idle_pcie_gen: int = 4  # PCIe cards drop to Gen1 at idle; SXM boards stay up
    ecc_enabled: bool = True
    row_remapping: bool = True  # Ampere and newer remap rows; older GPUs retire pages
    mig_capable: bool = False
    pcie_p2p: bool = True  # P2P over PCIe allowed below the CPU interconnect
    reserved_mib: int = 0  # FB "Reserved" (driver/firmware) as a 510+ driver reports it
    idle_used_mib: int = 1  # FB "Used" at idle with no process (v2 call)
    pci_device_id: int = 0  # nvmlPciInfo_t.pciDeviceId
    mig_profile: str = "3g.40gb"  # the slice a MIG-enabled GPU of this model is cut into here
    mig_memory_mib: int = 40192  # that slice's memory ("MIG devices" table: 19MiB / 40192MiB on A100 80GB)
    mig_idle_used_mib: int = 19


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A whole machine: GPUs in NVML (PCI bus) order with their wiring, and where it comes from."""

    name: str
    description: str
    source: str
    gpus: tuple[GpuSpec, ...]
    bus_ids: tuple[str, ...]
    sockets: tuple[int, ...]  # CPU socket of each GPU (PCIe: same socket = NODE, else SYS)
    driver: str
    cuda: int
    nvswitch: bool = False  # every GPU's links go to NVSwitches: all pairs NVLink-connected
    nvswitch_bus_ids: tuple[str, ...] = ()  # PCI bus ids of the NVSwitches (remote end of each link)
    bonds: tuple[tuple[int, int, int], ...] = ()  # direct NVLink bonds (gpu a, gpu b, links)
    bond_links: tuple[int, ...] = ()  # which link indices carry a bridge (default: the first ones)
    pcie_switches: tuple[int, ...] = ()  # PCIe switch of each GPU (same switch = PIX); empty = none
    mig_enabled: tuple[int, ...] = ()
    mig_devices: int = 0  # MIG devices configured on each MIG-enabled GPU
    hung_gpus: tuple[int, ...] = ()  # GPUs whose every NVML call blocks for ever
    nvswitch_device_id: int = HOPPER_NVSWITCH  # what the remote PCI info and sysfs say an NVSwitch is
    nvswitch_on_pci: bool = True  # the NVSwitches are PCI bridges the host sees (not on NVLink-5 boards)


H100_SXM = GpuSpec(
    "Fake NVIDIA H100 80GB HBM3",
    81559,
    (9, 0),
    nvlinks=18,
    nvlink_version=NVLINK_4_0,
    pcie_max=(5, 16),
    idle_pcie_gen=5,
    mig_capable=True,
    reserved_mib=516,
    idle_used_mib=0,
    pci_device_id=0x233010DE,
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
    reserved_mib=904,
    pci_device_id=0x20B210DE,
)
A100_PCIE = GpuSpec(
    "Fake NVIDIA A100 80GB PCIe",
    81920,
    (8, 0),
    nvlinks=12,  # listed with or without a bridge (NVIDIA/NVSentinel#1481: "all 12 links" down, no bridge)
    nvlink_version=NVLINK_3_0,
    pcie_max=(4, 16),
    idle_pcie_gen=1,
    mig_capable=True,
    reserved_mib=904,
    pci_device_id=0x20B510DE,
)
L40S = GpuSpec("Fake NVIDIA L40S", 46068, (8, 9), pcie_max=(4, 16), idle_pcie_gen=1, reserved_mib=450,
               pci_device_id=0x26B910DE)
A10G = GpuSpec("Fake NVIDIA A10G", 23028, (8, 6), pcie_max=(4, 16), idle_pcie_gen=1, reserved_mib=450,
               pci_device_id=0x223710DE)
L4 = GpuSpec("Fake NVIDIA L4", 23034, (8, 9), pcie_max=(4, 16), idle_pcie_gen=1, reserved_mib=450,
             pci_device_id=0x27B810DE)  # 23034MiB in public nvidia-smi captures of GCP g2 VMs
V100_SXM2 = GpuSpec(
    "Fake Tesla V100-SXM2-16GB",
    16160,
    (7, 0),
    nvlinks=6,
    nvlink_version=NVLINK_2_0,
    pcie_max=(3, 16),
    idle_pcie_gen=3,
    row_remapping=False,
    idle_used_mib=10,
    pci_device_id=0x1DB110DE,
)
RTX_A6000 = GpuSpec(
    "Fake NVIDIA RTX A6000", 46068, (8, 6), pcie_max=(4, 16), idle_pcie_gen=1, ecc_enabled=False, reserved_mib=450,
    pci_device_id=0x223010DE,
)
H800_SXM = GpuSpec(  # smi_q/H800-q-i0-driver525.105.17: "NVIDIA H800", 0x232410DE, 81559 MiB; NV8 in topo/8xH800-NV8-...
    "Fake NVIDIA H800", 81559, (9, 0), nvlinks=8, nvlink_version=NVLINK_4_0, pcie_max=(5, 16), idle_pcie_gen=5,
    mig_capable=True, reserved_mib=516, idle_used_mib=0, pci_device_id=0x232410DE,
)
H20_SXM = GpuSpec(  # a public lab note of an 8x H20 node: lspci 10de:2329, 97871 MiB, 18 links of 26.562 GB/s
    "Fake NVIDIA H20", 97871, (9, 0), nvlinks=18, nvlink_version=NVLINK_4_0, pcie_max=(5, 16), idle_pcie_gen=5,
    mig_capable=True, reserved_mib=516, idle_used_mib=0, pci_device_id=0x232910DE,
)
H200_SXM = GpuSpec(  # "NVIDIA H200 ... 1MiB / 143771MiB" in public nvidia-smi captures; PCI ID database 0x2335
    "Fake NVIDIA H200", 143771, (9, 0), nvlinks=18, nvlink_version=NVLINK_4_0, pcie_max=(5, 16), idle_pcie_gen=5,
    mig_capable=True, reserved_mib=516, idle_used_mib=1, pci_device_id=0x233510DE,
)
B200_SXM = GpuSpec(  # NVIDIA/nccl-tests#333: "NVIDIA B200 ... 0MiB / 183359MiB", NV18, driver 570.158.01
    "Fake NVIDIA B200", 183359, (10, 0), nvlinks=18, nvlink_version=NVLINK_5_0, pcie_max=(5, 16), idle_pcie_gen=5,
    mig_capable=True, reserved_mib=516, idle_used_mib=0, pci_device_id=0x290110DE,
)
UNKNOWN_SXM = GpuSpec(  # a board no table names: what NVML reports must decide, never the name
    "Fake NVIDIA X900 Accelerator", 98304, (9, 0), nvlinks=12, nvlink_version=NVLINK_4_0, pcie_max=(5, 16),
    idle_pcie_gen=5, reserved_mib=516, idle_used_mib=0, pci_device_id=0x2F0010DE,
)
H100_PCIE = GpuSpec(
    "Fake NVIDIA H100 PCIe",
    81559,
    (9, 0),
    nvlinks=18,  # 18 link indices on H100 PCIe-class cards (Azure/azurehpc-health-checks#162)
    nvlink_version=NVLINK_4_0,
    pcie_max=(5, 16),
    idle_pcie_gen=1,
    mig_capable=True,
    reserved_mib=516,
    idle_used_mib=0,
    pci_device_id=0x233110DE,
)
H100_NVL = GpuSpec(
    "Fake NVIDIA H100 NVL",
    95830,  # nvidia-smi lists "95830MiB" for H100 NVL
    (9, 0),
    nvlinks=18,
    nvlink_version=NVLINK_4_0,
    pcie_max=(5, 16),
    idle_pcie_gen=1,
    mig_capable=True,
    reserved_mib=516,
    idle_used_mib=0,
    pci_device_id=0x232110DE,
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
# NVSwitches of an HGX board appear as their own PCI domains at the far end of each GPU link
# (NVIDIA/go-nvml#166: "Link 0: Remote Device 00000008:00:00.0" on an A100 SXM4 node).
_HGX_H100_SWITCHES = ("00000005:00:00.0", "00000006:00:00.0", "00000007:00:00.0", "00000008:00:00.0")
_H100_8_BUS_IDS = ("00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
                   "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0")
_HGX_A100_SWITCHES = tuple(f"0000000{d}:00:00.0" for d in range(6, 10)) + ("0000000A:00:00.0", "0000000B:00:00.0")
_A100_SXM_8_BUS_IDS = (
    "00000000:3F:00.0",
    "00000000:44:00.0",
    "00000000:62:00.0",
    "00000000:68:00.0",
    "00000000:A9:00.0",
    "00000000:AD:00.0",
    "00000000:D2:00.0",
    "00000000:D5:00.0",
)
# Links an Azure NCv5 H100 NVL bridge leaves unused by design (Azure/azurehpc-health-checks#162:
# "Link 4/5/10/11/16: Inactive", 12 of 18 usable).
_NCV5_BRIDGE_LINKS = (0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15)

PROFILES: dict[str, ServerSpec] = {
    spec.name: spec
    for spec in (
        ServerSpec(
            "8x-h100-sxm",
            "HGX/DGX H100: 8 GPUs, 18 NVLink 4.0 links each to NVSwitches",
            "topo/8xH100-AWS-p5.48xlarge-NV18-... (NV18 every pair, two sockets); idle memory of smi_q/H800",
            (H100_SXM,) * 8,
            _H100_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "550.54.15",
            12040,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "8x-a100-sxm",
            "HGX A100 80GB: 8 GPUs, 12 NVLink 3.0 links each to NVSwitches",
            "smi/8xA100-SXM4-80GB-driver550.163.01-cuda12.4 (driver, 1 MiB used); topo/8xA100-SXM4-80GB-NV12-...",
            (A100_SXM,) * 8,
            _A100_SXM_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "550.163.01",
            12040,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_A100_SWITCHES,
            nvswitch_device_id=AMPERE_NVSWITCH,
        ),
        ServerSpec(
            "4x-a100-pcie-bridged",
            "Azure NC96ads A100 v4: 4 PCIe A100, NVLink bridges on 0-1 and 2-3",
            "topo/4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads (NV12 pairs, SYS between, 4 NUMA nodes)",
            (A100_PCIE,) * 4,
            ("00000001:00:00.0", "00000002:00:00.0", "00000003:00:00.0", "00000004:00:00.0"),
            (0, 1, 2, 3),
            "535.154.05",
            12020,
            bonds=((0, 1, 12), (2, 3, 12)),
        ),
        ServerSpec(
            "4x-a100-pcie-no-bridge",
            "4 PCIe A100 80GB without NVLink bridges: NVML lists 12 links per GPU, every one inactive",
            "NVIDIA/NVSentinel#1481 (A100 80GB PCIe, no bridge, driver 570.133.20: all 12 links down); "
            "NVIDIA/DCGM#49 (every NvLink link down on A100 without NVLink); PCIe layout of "
            "topo/4xL40S-NODE-SYS-2NICs-no-NVLink (NODE within a socket, SYS across)",
            (A100_PCIE,) * 4,
            ("00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0", "00000000:CA:00.0"),
            (0, 0, 1, 1),
            "570.133.20",
            12080,
        ),
        ServerSpec(
            "2x-h100-pcie-no-bridge",
            "2 H100 PCIe without an NVLink bridge: 18 links listed per GPU, every one inactive",
            "issue 14 item 1 (18 inactive links on H100 PCIe, NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49); "
            "18 link indices per card: Azure/azurehpc-health-checks#162",
            (H100_PCIE,) * 2,
            ("00000000:4F:00.0", "00000000:52:00.0"),
            (0, 0),
            "550.127.05",
            12040,
        ),
        ServerSpec(
            "2x-h100-nvl-bridged",
            "Azure NC80adis H100 v5: 2 H100 NVL, one bridge using 12 of the 18 links (6 inactive by design)",
            "Azure/azurehpc-health-checks#162 (NCv5: links 4, 5, 10, 11, 16 inactive, 12 of 18 usable); "
            "NV12 between an H100 NVL pair: NVIDIA/open-gpu-kernel-modules#1333",
            (H100_NVL,) * 2,
            ("00000001:00:00.0", "00000002:00:00.0"),
            (0, 0),
            "550.127.05",
            12040,
            bonds=((0, 1, 12),),
            bond_links=_NCV5_BRIDGE_LINKS,
        ),
        ServerSpec(
            "8x-l40s",
            "8x L40S PCIe server, two sockets, no NVLink",
            "L40S has no NVLink (NVML answers NOT_SUPPORTED, NVIDIA/NVSentinel#1481); PIX pairs as in "
            "topo/8xGPU-PCIe-PIX-PHB-SYS-no-NIC",
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
            "AWS g5.xlarge (bus id 00000000:00:1E.0); idle memory figures of the RTX A6000 capture (same GA10x family)",
            (A10G,),
            ("00000000:00:1E.0",),
            (0,),
            "535.183.01",
            12020,
        ),
        ServerSpec(
            "4x-a100-sxm-mixed-mig",
            "4x A100 SXM, MIG enabled on GPUs 0 and 1 (two 3g.40gb each)",
            "mixed MIG/non-MIG nodes: fixtures/INDEX.md (nvidia-smi MIG M. column, MIG devices table); "
            "MIG-<uuid> names since R470 (CUDA environment variables docs)",
            (A100_SXM,) * 4,
            ("00000000:07:00.0", "00000000:0B:00.0", "00000000:48:00.0", "00000000:4C:00.0"),
            (0, 0, 0, 0),
            "535.129.03",
            12020,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_A100_SWITCHES,
            nvswitch_device_id=AMPERE_NVSWITCH,
            mig_enabled=(0, 1),
            mig_devices=2,
        ),
        ServerSpec(
            "8x-v100-sxm2",
            "DGX-1 V100: hybrid cube mesh, 6 NVLink 2.0 links per GPU, retired pages, driver 418",
            "topo/8xV100-SXM2-16GB-hybrid-cube-mesh-TABS-... (wiring); smi_q/V100-SXM2-32GB-POWER9-q-driver418.67 "
            "(driver, 10 MiB used at idle, no Reserved line)",
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
            "8x-a100-sxm-driver470",
            "HGX A100 80GB on driver 470: no _v3 process call, no memory v2, no clocks-event call",
            "driver 470.161.03 lacks nvmlDeviceGetComputeRunningProcesses_v3 (rust-nvml/nvml-wrapper#46); "
            "memory v2 and process v3 arrived in 510.39.01 (NVIDIA/nvidia-settings#78, XuehaiPan/nvitop#89); "
            "'Clocks Event Reasons' replaced 'Clocks Throttle Reasons' in 535 (fixtures/INDEX.md smi_q notes)",
            (A100_SXM,) * 8,
            _A100_SXM_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "470.161.03",
            11040,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_A100_SWITCHES,
            nvswitch_device_id=AMPERE_NVSWITCH,
        ),
        ServerSpec(
            "2x-h100-nvl-hung",
            "2 H100 NVL on an NV12 bridge whose GPU 1 driver lock is orphaned: every NVML call on it blocks",
            "NVIDIA/open-gpu-kernel-modules#1333 (H100 NVL pair, driver 595.71.05: all subsequent NVML calls hang "
            "in D state); NVIDIA/go-nvml#152 (nvml init hangs, 570.148.08); leptonai/gpud#117 (nvidia-smi stuck)",
            (H100_NVL,) * 2,
            ("00000000:41:00.0", "00000000:61:00.0"),
            (0, 0),
            "595.71.05",
            13000,
            bonds=((0, 1, 12),),
            bond_links=_NCV5_BRIDGE_LINKS,
            hung_gpus=(1,),
        ),
        ServerSpec(
            "1x-h100-pod-memory-held",
            "One H100 in a Kubernetes pod: 74 GB in use, no process visible (another pid namespace holds it)",
            "smi/1xH100-k8s-pod-driver580.105.08-cuda13.0-memory-used-but-no-processes (74199 of 81559 MiB, "
            "'No running processes found')",
            (GpuSpec("Fake NVIDIA H100 80GB HBM3", 81559, (9, 0), nvlinks=18, nvlink_version=NVLINK_4_0,
                     pcie_max=(5, 16), idle_pcie_gen=5, mig_capable=True, reserved_mib=516, idle_used_mib=74199,
                     pci_device_id=0x233010DE),),
            ("00000000:B9:00.0",),
            (0,),
            "580.105.08",
            13000,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "8x-h800-hgx",
            "HGX H800 (export part, no 'SXM' in its name): 8 NVLink 4.0 links per GPU to NVSwitches",
            "smi_q/H800-q-i0-driver525.105.17 ('NVIDIA H800', Device Id 0x232410DE, bus 00000000:18:00.0, "
            "Fabric State Completed / Status Success); topo/8xH800-NV8-... (NV8 every pair, NUMA 0-3 / 4-7)",
            (H800_SXM,) * 8,
            _H100_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "525.105.17",
            12000,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "8x-h20-hgx",
            "HGX H20: 18 NVLink 4.0 links per GPU to NVSwitches, 96 GB per GPU",
            "a public lab note of an 8x H20 node (find_string 'GH100 [H20]'): NVIDIA H20 [10de:2329], 97871 MiB, "
            "driver 570.133.20, NV18 every pair, 'GH100 [H100 NVSwitch] [10de:22a3]' on the bus, NUMA 0-3 / 4-7",
            (H20_SXM,) * 8,
            _H100_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "570.133.20",
            12080,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "8x-h200-hgx",
            "HGX H200: 18 NVLink 4.0 links per GPU to NVSwitches, 141 GB per GPU",
            "'NVIDIA H200 ... 143771MiB' in public nvidia-smi captures; NVIDIA/go-nvml mock dgxh200; "
            "driver 570.86.15 as an H200 node spec in a public repository requires it (with fabric manager 570.86.15)",
            (H200_SXM,) * 8,
            _H100_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "570.86.15",
            12080,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "8x-b200-hgx",
            "HGX B200: 18 NVLink 5.0 links per GPU to NVLink-5 switches that the host does not see as PCI devices",
            "NVIDIA/nccl-tests#333 (8x NVIDIA B200, 183359 MiB, driver 570.158.01 / CUDA 12.9, these bus ids, NV18, "
            "NUMA 0-3 / 4-7); NVLink-5 switches are managed over InfiniBand by NVLSM (Fabric Manager guide via "
            "siderolabs/extensions#717, #893)",
            (B200_SXM,) * 8,
            ("00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:61:00.0",
             "00000000:9D:00.0", "00000000:C3:00.0", "00000000:D1:00.0", "00000000:DF:00.0"),
            (0, 0, 0, 0, 1, 1, 1, 1),
            "570.158.01",
            12090,
            nvswitch=True,
            nvswitch_bus_ids=(),
            nvswitch_device_id=0,
            nvswitch_on_pci=False,
        ),
        ServerSpec(
            "8x-unknown-nvswitch",
            "An NVSwitch board of a model no table knows: 12 NVLink 4.0 links per GPU, fabric from NVML",
            "made up on purpose (issue 24 item 2: 'boards you have not seen'); its NVML answers are those of the "
            "HGX H100 profile, the name and PCI device id are unknown to every table",
            (UNKNOWN_SXM,) * 8,
            _H100_8_BUS_IDS,
            (0, 0, 0, 0, 1, 1, 1, 1),
            "580.105.08",
            13000,
            nvswitch=True,
            nvswitch_bus_ids=_HGX_H100_SWITCHES,
        ),
        ServerSpec(
            "2x-l4",
            "GCP g2-standard-24: 2 L4 (PCIe, no NVLink)",
            "a public nvidia-smi capture of a g2 VM: two 'NVIDIA L4' at 00000000:00:03.0 and :04.0, 23034MiB, "
            "driver 535.161.07 / CUDA 12.2; L4 has no NVLink (NVML answers NOT_SUPPORTED, NVIDIA/NVSentinel#1481)",
            (L4,) * 2,
            ("00000000:00:03.0", "00000000:00:04.0"),
            (0, 0),
            "535.161.07",
            12020,
        ),
        ServerSpec(
            "4x-h100-nvl-bridged-pairs",
            "4 H100 NVL in two NVLink-bridged pairs (0-1, 2-3), one pair per socket",
            "H100 NVL product brief (PB-11773: cards bridged in pairs); bridge links of the NCv5 pair "
            "(Azure/azurehpc-health-checks#162: 12 of 18 usable), NV12 pair: NVIDIA/open-gpu-kernel-modules#1333",
            (H100_NVL,) * 4,
            ("00000000:41:00.0", "00000000:61:00.0", "00000000:A1:00.0", "00000000:C1:00.0"),
            (0, 0, 1, 1),
            "550.127.05",
            12040,
            bonds=((0, 1, 12), (2, 3, 12)),
            bond_links=_NCV5_BRIDGE_LINKS,
        ),
        ServerSpec(
            "2x-mixed-a6000-h100",
            "Workstation: an RTX A6000 at the lower bus id, an H100 PCIe (no bridge) after it",
            "smi/1xRTX-A6000-workstation-driver535.171.04 (A6000 without ECC, persistence, PCIe Gen1 idle); "
            "driver of smi/9xRTX-A6000-driver550.127.05",
            (RTX_A6000, H100_PCIE),
            ("00000000:17:00.0", "00000000:65:00.0"),
            (0, 0),
            "550.127.05",
            12040,
        ),
    )
}

HEALTHY_PROFILES = (
    "8x-h100-sxm",
    "8x-a100-sxm",
    "4x-a100-pcie-bridged",
    "4x-a100-pcie-no-bridge",
    "2x-h100-pcie-no-bridge",
    "2x-h100-nvl-bridged",
    "8x-l40s",
    "1x-a10g",
    "8x-v100-sxm2",
    "8x-a100-sxm-driver470",
    "8x-h800-hgx",
    "8x-h20-hgx",
    "8x-h200-hgx",
    "8x-b200-hgx",
    "8x-unknown-nvswitch",
    "2x-l4",
    "4x-h100-nvl-bridged-pairs",
)
"""Machines with nothing wrong: every check must PASS or SKIP, whatever the interconnect (issue 24 item 4)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One machine of issue 24's table: a profile, the faults on it, the job's environment, and the source."""

    profile: str
    faults: dict[str, object]
    environ: dict[str, str]
    source: str


ROWS: dict[str, Row] = {
    "h800-fabric-manager-down": Row(
        "8x-h800-hgx", {"fabric_manager_down": True}, {},
        "HGX H800 as smi_q/H800-... shows it, with the fabric manager not running: fabric state In Progress "
        "(Fabric Manager guide quoted in siderolabs/extensions#717; NVIDIA/NVSentinel#883/#889: FM dead for days, "
        "'fabric.state stays In Progress indefinitely'), NVSwitches left untrained so the links stay down"),
    "h800-gpu3-links-down": Row(
        "8x-h800-hgx", {"nvlinks_missing": [3]}, {},
        "one GPU of an NVSwitch board with every link down (NVIDIA/NVSentinel#1481-style link faults; topo -m shows "
        "the healthy NV8 elsewhere: topo/8xH800-NV8-...)"),
    "h100-gpu5-links-down-job-0-3": Row(
        "8x-h100-sxm", {"nvlinks_missing": [5]}, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        "an 8x H100 node (topo/8xH100-AWS-p5.48xlarge-...) with GPU5's links down and a job on half the node"),
    "a100-mig-on-gpu0": Row(
        "8x-a100-sxm", {"mig_enabled": [0]}, {},
        "MIG on one GPU of an HGX A100 (a 3g.40gb slice: 40192 MiB in the 'MIG devices' table of public nvidia-smi "
        "captures); CUDA enumerates one MIG device per process (MIG user guide via pytorch/pytorch#92315)"),
    "h100-compute-prohibited-gpu2": Row(
        "8x-h100-sxm", {"compute_mode": {str(i): 3 for i in range(8)} | {"2": 2}}, {},
        "nvidia-smi -c EXCLUSIVE_PROCESS on the node and -c PROHIBITED on GPU2 (pynvml NVML_COMPUTEMODE_*; "
        "'E. Process' in the nvidia-smi of NVIDIA/DIGITS#2005 and jade-hpc-gpu#59)"),
    "l4-pair": Row("2x-l4", {}, {}, "GCP g2 with 2 L4 (a public nvidia-smi capture)"),
    "a100-pcie-no-bridges": Row("4x-a100-pcie-no-bridge", {}, {}, "NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49"),
    "h100-nvl-bridged-pairs": Row("4x-h100-nvl-bridged-pairs", {}, {}, "H100 NVL product brief; azurehpc#162"),
    "two-gpus-off-the-bus": Row(
        "8x-h100-sxm", {"lost_at_handle": [3, 6]}, {},
        "nvml.h nvmlDeviceGetHandleByIndex_v2: NVML_ERROR_GPU_IS_LOST 'if the target GPU has fallen off the bus'"),
    "hung-driver": Row(
        "2x-h100-nvl-hung", {}, {},
        "NVIDIA/open-gpu-kernel-modules#1333 (every NVML call hangs in D state), leptonai/gpud#117 (nvidia-smi stuck); "
        "run through the NVML child with --nvml-timeout 10: tests/test_nvml_timeout_e2e.py"),
}
"""Issue 24's table (the PYTHONPATH row is the torch probe's, tests of node/torch.py), each row's machine
and where its behaviour comes from; tests/test_verdict_rows.py runs them end to end."""
