"""Judging the peer-to-peer copy test (``preflight.workers.p2p``).

A copy that fails or delivers wrong data is a FAIL: NCCL would hang or corrupt gradients. A pair
without peer access still works (NCCL stages through host memory), at a fraction of the speed, so
that is a WARN, unless nvidia-smi shows NVLink for the pair, where it means the NVLink cannot be
used. A pair much slower than others on the same kind of link points to a degraded link.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from preflight.judge.ddp import judge_not_run
from preflight.launch.outcome import PhaseResult
from preflight.launch.phase_results import P2pPair, P2pResult
from preflight.outcome import Metric, Status, Verdict, VerdictParts, View, fail, passed, skip, warn
from preflight.parse.topo import TopoMatrix, nvlink_width
from preflight.probe.nvml_snapshot import GpuInfo

SLOW_FRACTION = 0.5
"""A pair below this fraction of the median of its link class is called slow."""
P2P_FIX = (
    "Check `nvidia-smi topo -p2p r` and `nvidia-smi topo -m`; in a VM or on bare metal with PCIe ACS or the "
    "IOMMU enabled, peer traffic can hang or be dropped (disable ACS / set iommu=pt, or ask the provider). "
    "As a workaround run the job with NCCL_P2P_DISABLE=1 (slower, but correct)."
)


def judge_p2p_copy_launch(launch: PhaseResult) -> Verdict | None:
    """FAIL when the copy worker hung (naming the pair it was copying) or crashed; None when it finished."""
    if launch.ok:
        return None
    stopped = judge_not_run(launch, "peer-to-peer copy test")
    if stopped is not None:
        return stopped
    rank = launch.ranks[0] if launch.ranks else None
    phase = rank.last_phase if rank else None
    evidence = launch.evidence()
    if launch.ranks_in("hung") or (launch.timed_out and not launch.ranks_in("crashed")):
        where = f" during '{phase}'" if phase else ""
        summary = f"peer-to-peer copy test hung{where}: {launch.describe()}"
        return fail("P2P_COPY_HUNG", summary, P2P_FIX, evidence=evidence)
    error = rank.error if rank and rank.error else launch.describe()
    return fail("P2P_TEST_CRASHED", f"peer-to-peer copy test crashed: {error}", P2P_FIX, evidence=evidence)


def judge_p2p_copies(result: P2pResult, names: Mapping[int, str] | None = None,
                     matrix: TopoMatrix | None = None) -> Verdict:
    """Judge the worker's result. ``names`` maps CUDA ordinals to nvidia-smi names (``GPU3``)."""
    if result.skipped is not None:
        return skip(result.skipped)
    pairs = result.pairs
    if not pairs:
        return skip("no GPU pair to test")
    name = {i: (names or {}).get(i, f"cuda{i}") for p in pairs for i in (p.src, p.dst)}
    link = {(p.src, p.dst): _link(matrix, name[p.src], name[p.dst]) for p in pairs}
    label = {(p.src, p.dst): f"{name[p.src]}->{name[p.dst]}" for p in pairs}
    key = [(p.src, p.dst) for p in pairs]
    view = _table(pairs, label, link)
    metrics = tuple(
        Metric("p2p_copy_bandwidth", round(p.gbps, 2), "GB/s", labels={"pair": label[k]})
        for p, k in zip(pairs, key, strict=True) if p.gbps is not None
    )
    extra: VerdictParts = {"views": (view,), "metrics": metrics}

    broken = [label[k] + f" ({p.error})" for p, k in zip(pairs, key, strict=True) if p.error]
    if broken:
        summary = f"copy failed on {len(broken)} pair(s): {'; '.join(broken[:4])}"
        return fail("P2P_COPY_FAILED", summary, P2P_FIX, **extra)
    corrupt = [f"{label[k]} ({p.mismatches} of {_values(p)} values wrong, first at {p.first_bad_index})"
               for p, k in zip(pairs, key, strict=True) if p.mismatches]
    if corrupt:
        return fail("P2P_DATA_CORRUPT", f"data arrived wrong on {len(corrupt)} pair(s): {'; '.join(corrupt[:4])}",
                    P2P_FIX, **extra)
    no_peer = [k for p, k in zip(pairs, key, strict=True) if not p.can_access_peer]
    nvlink_no_peer = [label[k] for k in no_peer if (link[k] or "").startswith("NV")]
    if nvlink_no_peer:
        return fail(
            "P2P_NVLINK_NOT_USABLE",
            f"nvidia-smi shows NVLink but CUDA reports no peer access on {_list(nvlink_no_peer)}",
            "On NVSwitch systems start nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`, versions must "
            "match the driver); check `nvidia-smi nvlink --status` and `nvidia-smi topo -p2p n`.",
            **extra,
        )
    slow = _slow_pairs(pairs, key, link)
    if no_peer:
        return warn(
            "P2P_NOT_SUPPORTED",
            f"no peer access on {len(no_peer)} of {len(pairs)} directed pairs ({_list([label[k] for k in no_peer])}): "
            "copies work but go through host memory, so NCCL uses shared memory instead of direct P2P",
            "Consumer GPUs and some VMs do not allow P2P; if these GPUs should have it, check ACS/IOMMU settings and "
            "`nvidia-smi topo -p2p r`. Expect lower all-reduce bandwidth.",
            **extra,
        )
    speeds = [p.gbps for p in pairs if p.gbps is not None]
    if slow:
        return warn(
            "P2P_SLOW_PAIR",
            f"{_list([label[k] + f' {g:.1f} GB/s' for k, g in slow])} below half the median of pairs on the same "
            "kind of link",
            "Compare `nvidia-smi nvlink --status` (a link down) and `nvidia-smi -q -d PCI` (link trained below its "
            "generation or width) for the GPUs named; reseat or report the slow GPU.",
            **extra,
        )
    span = f"; {min(speeds):.1f}-{max(speeds):.1f} GB/s" if speeds else ""
    gpus = len({i for k in key for i in k})
    return passed(f"{len(pairs)} directed copies between {gpus} GPUs verified, peer access on all{span}", **extra)


def _values(pair: P2pPair) -> int | str:
    """How many int32 values the pair's copy carried."""
    return pair.bytes // 4 if pair.bytes is not None else "?"


def _link(matrix: TopoMatrix | None, a: str, b: str) -> str | None:
    if matrix is None or a not in matrix.gpus or b not in matrix.gpus:
        return None
    return matrix.link(matrix.gpus.index(a), matrix.gpus.index(b))


def _slow_pairs(pairs: Sequence[P2pPair], key: Sequence[tuple[int, int]],
                link: Mapping[tuple[int, int], str | None]) -> list[tuple[tuple[int, int], float]]:
    """Pairs below SLOW_FRACTION of the median of their link class (NVLink width or PCIe level)."""
    classes: dict[str, list[tuple[tuple[int, int], float]]] = {}
    for p, k in zip(pairs, key, strict=True):
        if p.gbps is None or not p.can_access_peer:
            continue
        code = link[k]
        group = "any" if code is None else ("NV" if nvlink_width(code) else code)
        classes.setdefault(group, []).append((k, p.gbps))
    slow: list[tuple[tuple[int, int], float]] = []
    for members in classes.values():
        if len(members) < 3:
            continue
        median = statistics.median(g for _, g in members)
        slow.extend((k, g) for k, g in members if g < SLOW_FRACTION * median)
    return slow


def _table(pairs: Sequence[P2pPair], label: Mapping[tuple[int, int], str],
           link: Mapping[tuple[int, int], str | None]) -> View:
    rows: list[list[Any]] = []
    highlight: list[int] = []
    for index, p in enumerate(pairs):
        k = (p.src, p.dst)
        wrong = p.mismatches
        verified = "error" if p.error else ("yes" if wrong == 0 else f"{wrong} wrong")
        rows.append([label[k], link[k] or "", "yes" if p.can_access_peer else "no", verified,
                     None if p.gbps is None else round(p.gbps, 1)])
        if p.error or p.mismatches or not p.can_access_peer:
            highlight.append(index)
    return View("table", "Peer-to-peer copies (each verified element by element)",
                {"columns": ["pair", "link", "peer access", "data verified", "GB/s"], "rows": rows,
                 "highlight": highlight})


def _list(items: Sequence[str]) -> str:
    return ", ".join(items[:6]) + (f" and {len(items) - 6} more" if len(items) > 6 else "")


def judge_p2p_phase(launch: PhaseResult | None, gpus: Sequence[GpuInfo], matrix: TopoMatrix | None,
                    evidence: Mapping[str, str]) -> Verdict:
    """The P2P copy check: the launch's failure, else the copies judged with CUDA ordinals named as
    nvidia-smi names the GPUs (joined by PCI bus id), with the host's IOMMU/ACS ``evidence`` on a problem."""
    if launch is None:
        return skip("no NVIDIA GPU pair visible to CUDA: peer-to-peer copies need at least 2 GPUs")
    verdict = judge_p2p_copy_launch(launch)
    if verdict is None:
        result = launch.outputs(P2pResult)[0]
        by_bus = {g.pci_bus_id: f"GPU{g.index}" for g in gpus if isinstance(g.pci_bus_id, str)}
        names = {d.index: by_bus[d.pci_bus_id] for d in result.devices if d.pci_bus_id in by_bus}
        verdict = judge_p2p_copies(result, names=names, matrix=matrix)
    if verdict.status in (Status.FAIL, Status.WARN):
        verdict = verdict.with_extra(evidence=evidence)
    return verdict
