"""What the GPU interconnect means for a DDP/FSDP/DeepSpeed job.

FSDP and ZeRO-3 exchange parameters and gradients at every layer, so whether every GPU pair talks
over NVLink (through NVSwitch or direct links) or some traffic crosses PCIe decides whether the job
is compute-bound or link-bound. NCCL builds rings through all GPUs; the slowest hop of the best ring
sets all-reduce speed, so the judge looks for a ring that stays on NVLink, and otherwise names the
PCIe level the ring must cross. A GPU with fewer active NVLinks than its peers silently slows every
collective, so that is a FAIL naming it, but only where links are expected: an A100 or H100 PCIe
card without an NVLink bridge lists all its links and reports each one inactive
(NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49), and that is a healthy PCIe node.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from preflight.judge.busbw_reference import NVSWITCH_FAMILIES, gpu_family
from preflight.outcome import Metric, Verdict, View, error, fail, passed, skip, warn
from preflight.parse.topo import TopoMatrix, nvlink_width
from preflight.probe.nvml import Absent
from preflight.probe.nvml_snapshot import GpuInfo, GpuPair

PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
"""PCIe path levels from nearest to farthest; ``SOC`` is the old name of ``SYS``."""

PCIE_PHRASE = {
    "PIX": "through a single PCIe switch",
    "PXB": "through several PCIe switches",
    "PHB": "through the CPU's PCIe host bridge",
    "NODE": "between the PCIe host bridges of one socket",
    "SYS": "across CPU sockets",
}
MAX_NVLINKS_PER_GPU = 18
"""Most NVLinks one GPU has (H100/H200/B200/B300: 18, A100: 12, V100: 6). Equal NV# on every pair
of 3+ GPUs adding up to more than this can only come from NVSwitch, which shows each GPU's full
link count on every pair."""
RING_SEARCH_MAX_GPUS = 12
NVLINK_VERSION_NAMES = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
PCIE_REMEDIATION = (
    "Expect all-reduce at PCIe speed (roughly 15-45 GB/s bus bandwidth, against 200+ GB/s over NVSwitch). "
    "Prefer DDP or ZeRO-1/2 over FSDP/ZeRO-3 full sharding, all-reduce less often (gradient accumulation), "
    "keep tensor parallelism inside NVLink-connected GPUs, or rent an NVSwitch (SXM) node if communication dominates."
)


class Layout(str, enum.Enum):
    """How the GPUs of a node are connected."""

    SINGLE = "single-gpu"
    NVSWITCH = "nvswitch"
    NVLINK_ALL = "nvlink-all-pairs"
    NVLINK_PAIRS = "nvlink-pairs"
    MIXED = "mixed"
    PCIE = "pcie-only"


@dataclass(frozen=True, slots=True)
class Classification:
    """The layout of one matrix and the facts the summary is made of."""

    layout: Layout
    gpu_count: int
    nvlink_pairs: tuple[tuple[int, int, str], ...]
    pcie_pairs: tuple[tuple[int, int, str], ...]
    worst_pcie: str | None
    ring_on_nvlink: bool | None
    ring_worst_pcie: str | None
    summary: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report and ``preflight topology --json``."""
        return {
            "layout": self.layout.value,
            "gpu_count": self.gpu_count,
            "nvlink_pairs": [[a, b, code] for a, b, code in self.nvlink_pairs],
            "pcie_pairs": [[a, b, code] for a, b, code in self.pcie_pairs],
            "worst_pcie": self.worst_pcie,
            "ring_on_nvlink": self.ring_on_nvlink,
            "ring_worst_pcie": self.ring_worst_pcie,
            "summary": self.summary,
        }


def classify(matrix: TopoMatrix) -> Classification:
    """Put the GPU link matrix in one of the :class:`Layout` classes, with a one-line summary."""
    count = len(matrix.gpus)
    nvlink = tuple((a, b, c) for a, b, c in matrix.pairs() if nvlink_width(c) is not None)
    pcie = tuple((a, b, c) for a, b, c in matrix.pairs() if nvlink_width(c) is None)
    worst = _normal(max((c for _, _, c in pcie), key=PCIE_RANK.__getitem__)) if pcie else None
    ring_on_nvlink, ring_worst = _best_ring(matrix)
    if count == 1:
        layout = Layout.SINGLE
    elif not nvlink:
        layout = Layout.PCIE
    elif not pcie:
        codes = {c for _, _, c in nvlink}
        width = nvlink_width(next(iter(codes))) or 0
        switched = len(codes) == 1 and count > 2 and width * (count - 1) > MAX_NVLINKS_PER_GPU
        layout = Layout.NVSWITCH if switched else Layout.NVLINK_ALL
    elif all(sum(1 for a, b, _ in nvlink if g in (a, b)) <= 1 for g in range(count)):
        layout = Layout.NVLINK_PAIRS
    else:
        layout = Layout.MIXED
    facts = Classification(layout, count, nvlink, pcie, worst, ring_on_nvlink, ring_worst, "")
    return Classification(layout, count, nvlink, pcie, worst, ring_on_nvlink, ring_worst, _summary(matrix, facts))


def judge_layout(matrix: TopoMatrix) -> Verdict:
    """PASS when collectives can stay on NVLink (or there is one GPU); WARN when they cross PCIe."""
    facts = classify(matrix)
    extra: dict[str, Any] = {
        "metrics": (
            Metric("gpu_count", facts.gpu_count),
            Metric("nvlink_pairs", len(facts.nvlink_pairs)),
            Metric("pcie_pairs", len(facts.pcie_pairs)),
        ),
        "views": (matrix_view(matrix, facts.summary),),
        "details": {"topology": facts.as_dict()},
    }
    if facts.layout in (Layout.SINGLE, Layout.NVSWITCH, Layout.NVLINK_ALL) or facts.ring_on_nvlink:
        return passed(facts.summary, **extra)
    code = {
        Layout.PCIE: "TOPOLOGY_PCIE_ONLY",
        Layout.NVLINK_PAIRS: "TOPOLOGY_NVLINK_PAIRS_ONLY",
    }.get(facts.layout, "TOPOLOGY_RING_CROSSES_PCIE")
    remedy = PCIE_REMEDIATION
    if facts.ring_worst_pcie == "SYS" or (facts.ring_worst_pcie is None and facts.worst_pcie == "SYS"):
        remedy += " If you can choose GPUs, keep a small job on one socket (CUDA_VISIBLE_DEVICES) to avoid SYS hops."
    return warn(code, facts.summary, remedy, **extra)


def judge_nvlink_balance(matrix: TopoMatrix) -> Verdict:
    """From the matrix alone: every GPU should have as many NVLinks to its peers as the best GPU."""
    totals = _nvlink_totals(matrix)
    if not any(totals):
        return skip("no NVLink between any GPUs in the topology matrix")
    best = max(totals)
    low = [i for i, total in enumerate(totals) if total < best]
    metrics = tuple(Metric("nvlinks_to_peers", t, labels={"gpu": matrix.gpus[i]}) for i, t in enumerate(totals))
    if not low:
        return passed(f"every GPU has the same NVLinks to its peers ({_codes_text(matrix)})", metrics=metrics)
    named = ", ".join(f"{matrix.gpus[i]} {totals[i]}" for i in low)
    return warn(
        "NVLINK_UNEVEN",
        f"{_join([matrix.gpus[i] for i in low])} show fewer NVLinks to peers than the others "
        f"(summed over peers: {named}; best {best}): a link may be down",
        "Confirm with `nvidia-smi nvlink --status` (every link of every GPU should show the same speed). "
        "Links that are down after a reboot need a GPU reset or a hardware ticket with the provider; "
        "if that GPU has no NVLink bridge by design, ignore this.",
        metrics=metrics,
    )


@dataclass(frozen=True, slots=True)
class NvlinkExpectation:
    """One GPU's NVLinks: how many NVML lists and how many are up, and why they should be up.

    ``reason`` is None when nothing says the links are wired: a PCIe card without a bridge.
    """

    gpu: int
    active: int
    present: int
    version: int | None
    reason: str | None


def board_wires_nvlinks(name: str) -> bool:
    """SXM/HGX boards wire every NVLink on the board itself (to NVSwitches or, on V100, to peers)."""
    return "SXM" in name.upper() or gpu_family(name) in NVSWITCH_FAMILIES


def nvlink_expectations(
    gpus: Sequence[GpuInfo], matrix: TopoMatrix | None = None, expected: int | None = None
) -> tuple[NvlinkExpectation, ...]:
    """Per GPU: its link counts and why its links should be up (None: no reason to expect any).

    Links are expected on a GPU when ``expected`` (``--expect-nvlinks``) is given, on SXM/NVSwitch
    SKUs, when an active link reaches an NVSwitch, and on both GPUs of a bridged pair: NVML's
    remote PCI info of an active link names the peer, or ``nvidia-smi topo -m`` shows NV# between them.
    """
    by_bus = {g.pci_bus_id: g.index for g in gpus if isinstance(g.pci_bus_id, str)}
    peers: dict[int, set[int]] = {}
    switched: set[int] = set()
    for gpu in gpus:
        for link in () if isinstance(gpu.nvlinks, Absent) else gpu.nvlinks:
            if not (link.active and isinstance(link.remote_bus_id, str)):
                continue
            peer = by_bus.get(link.remote_bus_id)
            if peer is None:
                switched.add(gpu.index)
            elif peer != gpu.index:
                peers.setdefault(gpu.index, set()).add(peer)
                peers.setdefault(peer, set()).add(gpu.index)
    if matrix is not None and len(matrix.gpus) == len(gpus):
        for a, b, code in matrix.pairs():
            if nvlink_width(code):
                peers.setdefault(gpus[a].index, set()).add(gpus[b].index)
                peers.setdefault(gpus[b].index, set()).add(gpus[a].index)
    found = []
    for gpu in gpus:
        links = () if isinstance(gpu.nvlinks, Absent) else gpu.nvlinks
        versions = {link.version for link in links if link.active and isinstance(link.version, int)}
        if expected is not None:
            reason: str | None = f"--expect-nvlinks {expected}"
        elif isinstance(gpu.name, str) and board_wires_nvlinks(gpu.name) and links:
            reason = "an SXM board wires its NVLinks"
        elif gpu.index in switched:
            reason = "its links reach an NVSwitch"
        elif gpu.index in peers:
            reason = "bridged to " + ", ".join(f"GPU{p}" for p in sorted(peers[gpu.index]))
        else:
            reason = None
        found.append(NvlinkExpectation(gpu.index, gpu.nvlinks_active, len(links),
                                       max(versions) if versions else None, reason))
    return tuple(found)


def judge_nvlink_counts(
    gpus: Sequence[GpuInfo], matrix: TopoMatrix | None = None, expected: int | None = None
) -> Verdict:
    """FAIL naming every GPU whose links are expected up but fewer are than on its best peer (or
    than ``expected``); NVLinks that nothing says are wired (bridge-less PCIe cards) are no finding."""
    failed = [g for g in gpus if "nvlinks" in g.query_errors]
    if failed:
        detail = "; ".join(f"GPU{g.index}: {g.query_errors['nvlinks']}" for g in failed)
        return error(f"NVML NVLink query failed: {detail}", code="NVLINK_QUERY_FAILED")
    if len(gpus) < 2 and expected is None:
        return skip("fewer than 2 GPUs: no NVLink peers to compare")
    states = nvlink_expectations(gpus, matrix, expected)
    if not any(s.present for s in states):
        return skip("no NVLink on this node (PCIe only)")
    metrics = tuple(Metric("nvlink_active", s.active, labels={"gpu": f"GPU{s.gpu}"}) for s in states)
    wired = [s for s in states if s.reason is not None]
    if not wired:
        listed = sorted({s.present for s in states})
        return skip(
            f"PCIe cards without NVLink bridges: NVML lists {'/'.join(map(str, listed))} NVLinks per GPU, "
            f"{sum(s.active for s in states)} active, and nothing says any is wired (no bridge in NVML's remote "
            "link info or nvidia-smi topo -m, not an SXM/NVSwitch part); pass --expect-nvlinks N if bridges "
            "are installed",
            metrics=metrics,
        )
    reference = max(s.active for s in wired) if expected is None else expected
    if reference == 0:
        return fail(
            "NVLINK_ALL_DOWN",
            f"NVLink expected on {len(wired)} GPUs ({wired[0].reason}) but no link is up on any",
            "Check `nvidia-smi nvlink --status` and, on NVSwitch systems, that nvidia-fabricmanager is "
            "running (`systemctl status nvidia-fabricmanager`); a GPU reset or reboot may bring links up.",
            metrics=metrics,
        )
    short = [s for s in wired if s.active < reference]
    version = _version_text(wired)
    unbridged = [s for s in states if s.reason is None]
    aside = f"; {_gpu_span([s.gpu for s in unbridged])} without a bridge" if unbridged else ""
    if not short:
        return passed(f"{len(wired)} GPUs, {reference} active NVLinks each{version}{aside}", metrics=metrics)
    parts = [
        f"GPU{s.gpu} has {'no active NVLink' if s.active == 0 else f'{s.active} of {reference} NVLinks active'}"
        for s in short
    ]
    basis = f"expected {expected}" if expected is not None else f"peers have {reference}"
    return fail(
        "NVLINK_LINKS_MISSING",
        f"{'; '.join(parts)} ({basis}): every collective through {'them' if len(short) > 1 else 'it'} slows down",
        f"Run `nvidia-smi nvlink --status -i {short[0].gpu}` to see which links are down; reset the GPU "
        f"(`sudo nvidia-smi -r -i {short[0].gpu}` with no process on it) or reboot, and if links stay down "
        "open a hardware ticket naming the GPU's serial (`nvidia-smi -q -i N | grep Serial`) or reseat the "
        "NVLink bridge.",
        metrics=metrics,
    )


def judge_cross_check(smi: TopoMatrix, nvml_pairs: Sequence[GpuPair], nvml_gpu_count: int) -> Verdict:
    """WARN when NVML and ``nvidia-smi topo -m`` describe a GPU pair differently."""
    failed = [p for p in nvml_pairs if p.query_errors]
    if failed:
        detail = "; ".join(f"GPU{p.a}-GPU{p.b}: {next(iter(p.query_errors.values()))}" for p in failed[:4])
        return error(f"NVML pair query failed: {detail}", code="NVLINK_QUERY_FAILED")
    if nvml_gpu_count != len(smi.gpus):
        return warn(
            "TOPOLOGY_SOURCES_DISAGREE",
            f"nvidia-smi topo -m shows {len(smi.gpus)} GPUs, NVML counts {nvml_gpu_count}",
            "Run `nvidia-smi -L` and `nvidia-smi topo -m` again; a count that changes between calls "
            "points to a GPU falling off the bus (see `sudo dmesg | grep -i xid`).",
        )
    disagreements: list[str] = []
    for pair in nvml_pairs:
        code = smi.link(pair.a, pair.b)
        smi_nvlink = nvlink_width(code) is not None
        name = f"GPU{pair.a}-GPU{pair.b}"
        if pair.nvlink is not None and pair.nvlink != smi_nvlink:
            said = "NVLink P2P available" if pair.nvlink else "NVLink P2P not available"
            disagreements.append(f"{name}: nvidia-smi {code}, NVML {said}")
        elif not smi_nvlink and pair.pcie_level is not None and _normal(pair.pcie_level) != _normal(code):
            disagreements.append(f"{name}: nvidia-smi {code}, NVML common PCIe ancestor {pair.pcie_level}")
    if not disagreements:
        return passed(f"NVML and nvidia-smi topo -m agree on all {len(nvml_pairs)} GPU pairs")
    return warn(
        "TOPOLOGY_SOURCES_DISAGREE",
        f"{len(disagreements)} GPU pair(s) differ between NVML and nvidia-smi: {'; '.join(disagreements[:4])}"
        + (" ..." if len(disagreements) > 4 else ""),
        "Trust the peer-to-peer copy test for what works. NVLink that nvidia-smi shows but NVML cannot use "
        "usually means the fabric manager is down (NVSwitch nodes) or P2P is blocked in a VM; check "
        "`nvidia-smi nvlink --status` and `nvidia-smi topo -p2p n`.",
        details={"disagreements": disagreements},
    )


def judge_affinity(matrix: TopoMatrix) -> Verdict:
    """Report which CPUs and NUMA node each GPU is close to (for pinning data loaders)."""
    columns = {
        "CPU affinity": matrix.cpu_affinity,
        "NUMA affinity": matrix.numa_affinity,
        "GPU NUMA ID": matrix.gpu_numa_id,
    }
    present = {name: values for name, values in columns.items() if values is not None}
    if not present:
        return skip("the topology matrix has no CPU/NUMA affinity columns")
    rows = [[gpu, *[values[i] for values in present.values()]] for i, gpu in enumerate(matrix.gpus)]
    view = View("table", "GPU to CPU/NUMA affinity", {"columns": ["GPU", *present], "rows": rows})
    groups: dict[tuple[str | None, ...], list[int]] = {}
    for i in range(len(matrix.gpus)):
        key = (
            None if matrix.numa_affinity is None else matrix.numa_affinity[i],
            None if matrix.cpu_affinity is None else matrix.cpu_affinity[i],
        )
        groups.setdefault(key, []).append(i)
    parts = []
    for (numa, cpus), members in groups.items():
        where = []
        if numa is not None:
            where.append(f"NUMA {numa}")
        if cpus is not None:
            where.append(f"CPUs {cpus}")
        parts.append(f"{_gpu_span(members)}: {', '.join(where) or 'affinity not shown'}")
    summary = "; ".join(parts)
    if matrix.notes:
        summary += f" ({len(matrix.notes)} row(s) of affinity could not be read, see evidence)"
    return passed(summary, views=(view,), evidence={"notes": "\n".join(matrix.notes)} if matrix.notes else {})


def matrix_view(matrix: TopoMatrix, summary: str) -> View:
    """The GPU x GPU grid for the HTML report (``views/matrix.html.j2``)."""
    return View(
        "matrix",
        "GPU interconnect (nvidia-smi topo -m)",
        {"labels": list(matrix.gpus), "cells": [list(row) for row in matrix.links], "summary": summary},
    )


def _normal(code: str) -> str:
    """``SOC`` (old drivers) is ``SYS``; NVML's ``HOSTBRIDGE``-style names map to nvidia-smi's."""
    return {"SOC": "SYS", "SINGLE": "PIX", "MULTIPLE": "PXB", "HOSTBRIDGE": "PHB", "SYSTEM": "SYS"}.get(code, code)


def _cost(code: str) -> int:
    """0 for NVLink, else the PCIe rank (higher is slower)."""
    return 0 if nvlink_width(code) is not None else PCIE_RANK[code]


def _best_ring(matrix: TopoMatrix) -> tuple[bool | None, str | None]:
    """Can a ring through all GPUs stay on NVLink? If not, the slowest PCIe level the best ring needs."""
    count = len(matrix.gpus)
    if count < 2 or count > RING_SEARCH_MAX_GPUS:
        return None, None
    for threshold in sorted({0, *(_cost(c) for _, _, c in matrix.pairs())}):
        adjacency = [
            sum(1 << j for j in range(count) if j != i and _cost(matrix.links[i][j]) <= threshold) for i in range(count)
        ]
        if _has_cycle_through_all(adjacency):
            if threshold == 0:
                return True, None
            level = next(name for name, rank in PCIE_RANK.items() if rank == threshold)
            return False, level
    return False, None


def _has_cycle_through_all(adjacency: Sequence[int]) -> bool:
    """Hamiltonian cycle test by dynamic programming over subsets (fine up to ~12 GPUs)."""
    count = len(adjacency)
    if count == 2:
        return bool(adjacency[0] & 0b10)
    ends = [0] * (1 << count)
    ends[1] = 1
    for mask in range(1, 1 << count, 2):
        reached, vertex = ends[mask], 0
        while reached:
            if reached & 1:
                step = adjacency[vertex] & ~mask
                while step:
                    low = step & -step
                    ends[mask | low] |= low
                    step ^= low
            reached >>= 1
            vertex += 1
    return bool(ends[(1 << count) - 1] & adjacency[0])


def _nvlink_totals(matrix: TopoMatrix) -> list[int]:
    """Per GPU, the NV# widths to its peers added up."""
    return [sum(nvlink_width(code) or 0 for code in row) for row in matrix.links]


def _codes_text(matrix: TopoMatrix) -> str:
    codes = sorted({c for _, _, c in matrix.pairs() if nvlink_width(c)}, key=lambda c: nvlink_width(c) or 0)
    return "/".join(codes)


def _summary(matrix: TopoMatrix, facts: Classification) -> str:
    count = facts.gpu_count
    codes = _codes_text(matrix)
    if facts.layout is Layout.SINGLE:
        return "1 GPU: no GPU-to-GPU traffic, so the interconnect does not limit this job"
    if facts.layout is Layout.NVSWITCH:
        return f"{count} GPUs, all pairs {codes} (NVSwitch): FSDP and ZeRO-3 will not be link-bound"
    if facts.layout is Layout.NVLINK_ALL:
        if count == 2:
            return f"2 GPUs joined by NVLink ({codes}): all-reduce runs over NVLink, not PCIe"
        return f"{count} GPUs, every pair joined directly by NVLink ({codes}, no NVSwitch): all-reduce runs over NVLink"
    level = facts.ring_worst_pcie or facts.worst_pcie or "SYS"
    hop = f"{PCIE_PHRASE[_normal(level)]} ({level})"
    crossing = f"over PCIe {hop}"
    if facts.layout is Layout.PCIE:
        return (
            f"{count} GPUs, no NVLink: all GPU-to-GPU traffic over PCIe, the slowest hop {hop}: "
            "expect all-reduce at PCIe speed; FSDP and ZeRO-3 will be link-bound"
        )
    if facts.layout is Layout.NVLINK_PAIRS:
        pairs = ", ".join(f"{a}-{b}" for a, b, _ in facts.nvlink_pairs)
        alone = [i for i in range(count) if not any(i in (a, b) for a, b, _ in facts.nvlink_pairs)]
        lonely = f"; {_join([matrix.gpus[i] for i in alone])} without NVLink" if alone else ""
        return (
            f"{count} GPUs, NVLink ({codes}) only within pairs ({pairs}){lonely}, the rest {crossing}: "
            "expect all-reduce to run at PCIe speed"
        )
    total = len(facts.nvlink_pairs) + len(facts.pcie_pairs)
    share = f"{len(facts.nvlink_pairs)} of {total} pairs over NVLink ({codes})"
    if facts.ring_on_nvlink:
        return (
            f"{count} GPUs, partial NVLink mesh: {share}, the rest over PCIe (up to {facts.worst_pcie}): "
            "NCCL rings can stay on NVLink, but all-to-all traffic between unlinked pairs crosses PCIe"
        )
    return (
        f"{count} GPUs, partial NVLink: {share}, but any ring through all GPUs goes {crossing}: "
        "expect all-reduce at PCIe speed"
    )


def _version_text(states: Sequence[NvlinkExpectation]) -> str:
    versions = {s.version for s in states if s.version}
    if len(versions) != 1:
        return ""
    version = next(iter(versions))
    return f" (NVLink {NVLINK_VERSION_NAMES.get(version, f'version code {version}')})"


def _gpu_span(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 3]`` -> ``GPU0-3``; ``[0, 2]`` -> ``GPU0, GPU2``."""
    if len(indices) > 1 and list(indices) == list(range(indices[0], indices[-1] + 1)):
        return f"GPU{indices[0]}-{indices[-1]}"
    return ", ".join(f"GPU{i}" for i in indices)


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

