"""What the GPU interconnect means for a DDP/FSDP/DeepSpeed job, judged over the job's GPUs.

FSDP and ZeRO-3 exchange parameters and gradients at every layer, so whether every GPU pair talks
over NVLink (through NVSwitch or direct links) or some traffic crosses PCIe decides whether the job
is compute-bound or link-bound. NCCL builds rings through all GPUs; the slowest hop of the best ring
sets all-reduce speed, so the judge looks for a ring that stays on NVLink, and otherwise names the
PCIe level the ring must cross. A PCIe-only or bridged-pair node is what those SKUs are: a PASS that
says what it means, unless the plan is link-bound (``--model-params`` with FSDP/ZeRO-3), when the
WARN says the seconds per step the link costs (DESIGN.md: a WARN names its cost).

Whether NVLinks should be up comes from the driver (:mod:`preflight.node.fabric`): a link's remote
device type (NVSwitch, GPU), its remote PCI bus id, the GPU's fabric registration, the NVSwitches on
the PCI bus, peers of the same model. A GPU with fewer active NVLinks than its peers silently slows
every collective, so that is a FAIL naming it, but only where links are expected: an A100 or H100 PCIe
card without an NVLink bridge lists all its links and reports each one inactive
(NVIDIA/NVSentinel#1481, NVIDIA/DCGM#49), and that is a healthy PCIe node. A fabric that is not up on
an NVSwitch board (the fabric manager not running: "In Progress", Fabric Manager guide via
siderolabs/extensions#717) stops CUDA itself (error 802, aws-samples/aws-deep-learning-ami-ubuntu-dcv-
desktop#33): one FAIL, and the layout and cross-check SKIP on it. A GPU outside the job is a fact in the
summary, never the job's finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from preflight.judge.busbw_reference import Expectation
from preflight.judge.rehearse import SHARDED, CommModel, human_bytes, human_seconds
from preflight.node.fabric import JobTopology, Layout
from preflight.outcome import Metric, Verdict, VerdictParts, View, error, fail, passed, skip, warn
from preflight.parse.topo import TopoMatrix, nvlink_width
from preflight.probe.nvml_snapshot import GpuPair

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
LINK_MEANING = ("training works either way; how much the link costs depends on how often the GPUs exchange data "
                "(DDP once per step, overlapped with backward; FSDP and ZeRO-3 at every layer): pass --model-params "
                "to see the seconds per step it costs")
PCIE_REMEDIATION = (
    "Expect all-reduce at PCIe speed (roughly 15-45 GB/s bus bandwidth, against 200+ GB/s over NVSwitch). "
    "Prefer DDP or ZeRO-1/2 over FSDP/ZeRO-3 full sharding, all-reduce less often (gradient accumulation), "
    "keep tensor parallelism inside NVLink-connected GPUs, or rent an NVSwitch (SXM) node if communication dominates."
)


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


def classify(matrix: TopoMatrix, switched: bool | None = None) -> Classification:
    """Put the GPU link matrix in one of the :class:`Layout` classes, with a one-line summary. ``switched``
    is what NVML says (links reaching NVSwitches); without it a matrix alone decides by the link widths."""
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
        if switched is None:
            switched = len(codes) == 1 and count > 2 and width * (count - 1) > MAX_NVLINKS_PER_GPU
        layout = Layout.NVSWITCH if switched else Layout.NVLINK_ALL
    elif all(sum(1 for a, b, _ in nvlink if g in (a, b)) <= 1 for g in range(count)):
        layout = Layout.NVLINK_PAIRS
    else:
        layout = Layout.MIXED
    facts = Classification(layout, count, nvlink, pcie, worst, ring_on_nvlink, ring_worst, "")
    return Classification(layout, count, nvlink, pcie, worst, ring_on_nvlink, ring_worst, _summary(matrix, facts))


@dataclass(frozen=True, slots=True)
class LinkCost:
    """What a link-bound plan spends on the GPU interconnect per step (a prediction, see ``CommModel``)."""

    model: CommModel
    ranks: int
    why: str  # why the plan is link-bound: "--model-params 70B fits only sharded (FSDP)"

    @property
    def seconds(self) -> float:
        """Predicted seconds of communication per step."""
        return self.model.seconds(self.ranks)

    def describe(self) -> str:
        """``FSDP of 7.0B parameters: 31.5 GB per rank per step (...): about 2.1 s per step at 15 GB/s``."""
        moved = self.model.grad_bytes * self.model.volume_factor(self.ranks)
        return (f"{self.why}: {self.model.strategy.upper()} moves {human_bytes(moved)} per rank per step (all-gather "
                f"x2 + reduce-scatter of {self.model.params / 1e9:.1f}B parameters at "
                f"{self.model.bytes_per_param:g} B), about {human_seconds(self.seconds)} per step on the link at "
                f"{self.model.busbw_gbps:.3g} GB/s busbw ({self.model.busbw_source}), less what overlaps with compute")


def link_cost(*, params: int | None, bytes_per_param: float, recommended: str | None, explicit: Sequence[str],
              ranks: int, expectation: Expectation | None) -> LinkCost | None:
    """The link cost of the job's plan when it is link-bound: ``--model-params`` given and the model fits
    only sharded (the memory fit's least sharding is FSDP/ZeRO-3), or ``--strategy`` asks only for those.
    None when the plan is not link-bound or no busbw figure is known for the job's GPUs."""
    if params is None or ranks < 2 or expectation is None:
        return None
    if recommended in SHARDED:
        strategy, why = recommended, f"{params / 1e9:.1f}B parameters fit only sharded ({recommended.upper()})"
    elif explicit and all(name in SHARDED for name in explicit):
        strategy, why = explicit[0], f"--strategy {explicit[0]} with {params / 1e9:.1f}B parameters"
    else:
        return None
    model = CommModel(params, bytes_per_param, strategy, expectation.busbw_gbps,
                      f"expected for {expectation.platform}", "from --model-params")
    return LinkCost(model, ranks, why)


def judge_layout(matrix: TopoMatrix, cost: LinkCost | None = None, switched: bool | None = None,
                 shown: TopoMatrix | None = None, notes: str = "") -> Verdict:
    """PASS for any healthy layout, saying what it means; WARN only when collectives cross PCIe and the
    plan is link-bound (``cost``), with the seconds per step the link costs. ``shown`` is the matrix the
    report draws (default ``matrix``), ``notes`` facts about GPUs outside the judgement."""
    facts = classify(matrix, switched)
    facts = dataclasses.replace(facts, summary=facts.summary + notes)
    extra: VerdictParts = {
        "metrics": (
            Metric("gpu_count", facts.gpu_count),
            Metric("nvlink_pairs", len(facts.nvlink_pairs)),
            Metric("pcie_pairs", len(facts.pcie_pairs)),
        ),
        "views": (matrix_view(shown or matrix, facts.summary),),
        "details": {"topology": facts.as_dict()},
    }
    if facts.layout in (Layout.SINGLE, Layout.NVSWITCH, Layout.NVLINK_ALL) or facts.ring_on_nvlink:
        return passed(facts.summary, **extra)
    if cost is None:
        return passed(f"{facts.summary}; {LINK_MEANING}", **extra)
    code = {
        Layout.PCIE: "TOPOLOGY_PCIE_ONLY",
        Layout.NVLINK_PAIRS: "TOPOLOGY_NVLINK_PAIRS_ONLY",
    }.get(facts.layout, "TOPOLOGY_RING_CROSSES_PCIE")
    remedy = PCIE_REMEDIATION
    if facts.ring_worst_pcie == "SYS" or (facts.ring_worst_pcie is None and facts.worst_pcie == "SYS"):
        remedy += " If you can choose GPUs, keep a small job on one socket (CUDA_VISIBLE_DEVICES) to avoid SYS hops."
    extra["metrics"] += (Metric("link_seconds_per_step", round(cost.seconds, 3), "s"),)
    return warn(code, f"{facts.summary}; {cost.describe()}", remedy, **extra)


def judge_interconnect(topo: JobTopology, cost: LinkCost | None = None) -> Verdict:
    """How the job's GPUs are linked (from NVML; ``nvidia-smi topo -m`` fills what NVML lacks and is the
    evidence), judged by :func:`judge_layout`. One failure, one finding: a fabric that is not up or a
    lost GPU is the NVLink and NVML checks' finding, so this one SKIPs on it."""
    if topo.no_gpu is not None:
        return skip(topo.no_gpu)
    down = topo.fabric_down
    if down:
        return skip(f"the NVLink fabric is not up on {_gpu_span([i for i, _ in down])} ({down[0][1]}): the "
                    "layout is judged once the fabric is (see test_nvlinks_all_active)")
    if len(topo.job) < 2:
        lost = f" ({topo.lost_text()[2:]}: see test_gpu_responds)" if topo.lost else ""
        return passed(f"{len(topo.job)} GPU in the job{lost}: no GPU-to-GPU traffic, so the interconnect does not "
                      "limit this job")
    matrix = topo.matrix or topo.smi_matrix
    evidence = {"nvidia-smi topo -m": topo.smi_raw} if topo.smi_raw else {}
    if matrix is None:
        if topo.smi_missing:
            return skip(f"{topo.smi_problem}: no topology matrix, and NVML cannot name every pair's link")
        return error(f"the GPUs' links could not be read from NVML nor from nvidia-smi: {topo.smi_problem}",
                     code="TOPOLOGY_UNREADABLE", evidence=evidence)
    switched = topo.layout is Layout.NVSWITCH if topo.layout is not Layout.UNKNOWN else None
    verdict = judge_layout(matrix, cost, switched, shown=topo.smi_matrix, notes=topo.lost_text() + _others_text(topo))
    return verdict.with_extra(evidence=evidence)


def _others_text(topo: JobTopology) -> str:
    return f"; {_gpu_span(list(topo.others))} not used by this job" if topo.others else ""


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


def nvlink_expectations(topo: JobTopology, indices: Sequence[int], expected: int | None = None
                        ) -> tuple[NvlinkExpectation, ...]:
    """Per GPU at ``indices``: its link counts and why its links should be up (None: nothing says so).

    Links are expected when ``expected`` (``--expect-nvlinks``) is given, and wherever the driver says
    they are wired (:meth:`preflight.node.fabric.Fabric.expectation`: the fabric registration, links
    reaching NVSwitches, a bridged peer, same-model peers reaching NVSwitches, NVSwitches on the PCI bus),
    or ``nvidia-smi topo -m`` shows NV# between two of them. A GPU's name never decides.
    """
    smi_peers: set[int] = set()
    matrix = topo.smi_all
    if matrix is not None:
        for a, b, code in matrix.pairs():
            if nvlink_width(code):
                smi_peers.update(_label_index(matrix.gpus[i]) for i in (a, b))
    found = []
    for index in indices:
        gpu = topo.fabric.gpu(index)
        if gpu is None:
            continue
        reason = topo.fabric.expectation(index)
        if expected is not None:
            reason = f"--expect-nvlinks {expected}"
        elif reason is None and gpu.listed and index in smi_peers:
            reason = "nvidia-smi topo -m shows NV# links to it"
        found.append(NvlinkExpectation(index, gpu.up, gpu.listed, gpu.version, reason))
    return tuple(found)


def _label_index(label: str) -> int:
    return int(label[3:]) if label.startswith("GPU") and label[3:].isdigit() else -1


FABRIC_FIX = (
    "Start the fabric manager and find why it stopped: `sudo systemctl status nvidia-fabricmanager`, `sudo journalctl "
    "-u nvidia-fabricmanager`; its version must match the driver's (driver {driver}; `nvidia-smi -q | grep -i -A2 "
    "fabric` shows State Completed once it runs; B200-class boards also need NVLSM). Then `sudo systemctl restart "
    "nvidia-fabricmanager`, or ask the provider: without it CUDA fails with error 802 (system not yet initialized) "
    "or NCCL falls back to PCIe."
)


def judge_nvlink_counts(topo: JobTopology, expected: int | None = None, driver: str | None = None) -> Verdict:
    """The job's GPUs have their NVLinks up: FAIL when the NVSwitch fabric is not up on a job GPU (even for
    one GPU: CUDA cannot start), or when links that should be up are not (naming each GPU). A GPU outside
    the job is a fact in the summary ("GPU5 has 0 of 18 NVLinks up; not used by this job")."""
    if topo.no_gpu is not None:
        return skip(topo.no_gpu)
    down = topo.fabric_down
    if down:
        return fail(
            "FABRIC_NOT_READY",
            f"the NVLink fabric is not up on {_gpu_span([i for i, _ in down])} of the job ({down[0][1]}; NVML fabric "
            "state): the fabric manager is not running or failed, so CUDA cannot start on these GPUs or NCCL falls "
            "back to PCIe",
            FABRIC_FIX.format(driver=driver or "?"),
            details={"fabric": {f"GPU{i}": problem for i, problem in down}},
        )
    failed = [g for g in (topo.fabric.gpu(i) for i in topo.job) if g is not None and g.query_error]
    if failed:
        detail = "; ".join(f"GPU{g.index}: {g.query_error}" for g in failed)
        return error(f"NVML NVLink query failed: {detail}", code="NVLINK_QUERY_FAILED")
    states = nvlink_expectations(topo, topo.job, expected)
    outside = _outside_text(topo, expected)
    lost = topo.lost_text()
    metrics = tuple(Metric("nvlink_active", s.active, labels={"gpu": f"GPU{s.gpu}"}) for s in states)
    if len(topo.job) < 2 and expected is None:
        return skip(f"{len(topo.job)} GPU in the job: its NVLinks carry none of this job's traffic{lost}{outside}",
                    metrics=metrics)
    if not any(s.present for s in states):
        return skip(f"no NVLink on the job's GPUs (PCIe only){lost}{outside}")
    wired = [s for s in states if s.reason is not None]
    if not wired:
        listed = sorted({s.present for s in states})
        return skip(
            f"PCIe cards without NVLink bridges: NVML lists {'/'.join(map(str, listed))} NVLinks per GPU, "
            f"{sum(s.active for s in states)} active, and nothing says any is wired (no NVSwitch, no bridge in NVML's "
            f"remote link info or nvidia-smi topo -m, no fabric registration); pass --expect-nvlinks N if bridges "
            f"are installed{lost}{outside}",
            metrics=metrics,
        )
    reference = max(s.active for s in wired) if expected is None else expected
    if reference == 0:
        return fail(
            "NVLINK_ALL_DOWN",
            f"NVLink expected on {len(wired)} GPUs of the job ({wired[0].reason}) but no link is up on any",
            "Check `nvidia-smi nvlink --status` and, on NVSwitch systems, that nvidia-fabricmanager is "
            "running (`systemctl status nvidia-fabricmanager`, its version matching the driver's); a GPU reset or "
            "reboot may bring links up.",
            metrics=metrics,
        )
    short = [s for s in wired if s.active < reference]
    version = _version_text(wired)
    unbridged = [s for s in states if s.reason is None]
    aside = f"; {_gpu_span([s.gpu for s in unbridged])} without a bridge" if unbridged else ""
    if not short:
        return passed(f"{len(wired)} GPUs, {reference} active NVLinks each{version}{aside}{lost}{outside}",
                      metrics=metrics)
    parts = [
        f"GPU{s.gpu} has {'no active NVLink' if s.active == 0 else f'{s.active} of {reference} NVLinks active'}"
        for s in short
    ]
    basis = f"expected {expected}" if expected is not None else f"peers have {reference}; {short[0].reason}"
    return fail(
        "NVLINK_LINKS_MISSING",
        f"{'; '.join(parts)} ({basis}): every collective through "
        f"{'them' if len(short) > 1 else 'it'} slows down{outside}",
        f"Run `nvidia-smi nvlink --status -i {short[0].gpu}` to see which links are down; reset the GPU "
        f"(`sudo nvidia-smi -r -i {short[0].gpu}` with no process on it) or reboot, and if links stay down "
        "open a hardware ticket naming the GPU's serial (`nvidia-smi -q -i N | grep Serial`) or reseat the "
        "NVLink bridge.",
        metrics=metrics,
    )


def _outside_text(topo: JobTopology, expected: int | None) -> str:
    """Link faults on GPUs the job does not use, as facts: ``; GPU5 has 0 of 18 NVLinks up; not used by this job``."""
    notes = []
    for index in topo.others:
        gpu = topo.fabric.gpu(index)
        problem = topo.fabric.fabric_problem(index)
        if gpu is None or gpu.lost:
            notes.append(f"GPU {index} is lost; not used by this job")
        elif problem is not None:
            notes.append(f"GPU{index}: {problem}; not used by this job")
        elif gpu.listed and (expected is not None or topo.fabric.expectation(index)):
            best = expected if expected is not None else max((g.up for g in topo.fabric.gpus
                                                              if g.device_id == gpu.device_id), default=gpu.up)
            if gpu.up < best:
                notes.append(f"GPU{index} has {gpu.up} of {best} NVLinks up; not used by this job")
    return "".join(f"; {note}" for note in notes)


def judge_topology_sources(topo: JobTopology) -> Verdict:
    """NVML and ``nvidia-smi topo -m`` describe the job's GPU pairs the same way (WARN when they do not).
    SKIP when either source has nothing, a job GPU is lost or the fabric is down (their own findings)."""
    if topo.no_gpu is not None:
        return skip(topo.no_gpu)
    if topo.lost:
        return skip(f"{topo.lost_text()[2:]}: NVML cannot describe its links (see test_gpu_responds)")
    down = topo.fabric_down
    if down:
        return skip(f"the NVLink fabric is not up on {_gpu_span([i for i, _ in down])} (see test_nvlinks_all_active)")
    if topo.smi_all is None:
        if topo.smi_missing:
            return skip(f"{topo.smi_problem}: no topology matrix to compare with NVML")
        evidence = {"nvidia-smi topo -m": topo.smi_raw} if topo.smi_raw else {}
        return error(f"GPUs are present but the topology could not be read: {topo.smi_problem}",
                     code="TOPOLOGY_UNREADABLE", evidence=evidence)
    listed = len(topo.job) + len(topo.others)
    if listed != len(topo.smi_all.gpus):
        return warn(
            "TOPOLOGY_SOURCES_DISAGREE",
            f"nvidia-smi topo -m shows {len(topo.smi_all.gpus)} GPUs, NVML counts {listed}",
            "Run `nvidia-smi -L` and `nvidia-smi topo -m` again; a count that changes between calls "
            "points to a GPU falling off the bus (see `sudo dmesg | grep -i xid`).",
        )
    short = short_of_links(topo)
    job = set(topo.job) - short
    pairs = [p for p in topo.fabric.pairs if p.a in job and p.b in job]
    failed = [p for p in pairs if p.query_errors]
    if failed:
        detail = "; ".join(f"GPU{p.a}-GPU{p.b}: {next(iter(p.query_errors.values()))}" for p in failed[:4])
        return error(f"NVML pair query failed: {detail}", code="NVLINK_QUERY_FAILED")
    disagreements = _disagreements(topo.smi_all, pairs)
    outside = _disagreements(topo.smi_all, [p for p in topo.fabric.pairs if not (p.a in job and p.b in job)])
    aside = f"; {len(outside)} pair(s) outside the job differ ({outside[0]}): not used by this job" if outside else ""
    if short:
        aside = (f"; {_gpu_span(sorted(short))} left out: NVLinks down (see test_nvlinks_all_active)") + aside
    if not disagreements:
        return passed(f"NVML and nvidia-smi topo -m agree on all {len(pairs)} GPU pairs of the job{aside}")
    return warn(
        "TOPOLOGY_SOURCES_DISAGREE",
        f"{len(disagreements)} GPU pair(s) of the job differ between NVML and nvidia-smi: "
        f"{'; '.join(disagreements[:4])}" + (" ..." if len(disagreements) > 4 else ""),
        "Trust the peer-to-peer copy test for what works. NVLink that nvidia-smi shows but NVML cannot use "
        "usually means the fabric manager is down (NVSwitch nodes) or P2P is blocked in a VM; check "
        "`nvidia-smi nvlink --status` and `nvidia-smi topo -p2p n`.",
        details={"disagreements": disagreements},
    )


def short_of_links(topo: JobTopology) -> set[int]:
    """The job's GPUs whose NVLinks should be up and fewer are than on their best peer (the NVLink check's
    finding: the cross-check leaves their pairs out rather than report the same fault twice)."""
    states = [s for s in nvlink_expectations(topo, topo.job) if s.reason is not None]
    best = max((s.active for s in states), default=0)
    return {s.gpu for s in states if s.active < best}


def _disagreements(smi: TopoMatrix, pairs: Sequence[GpuPair]) -> list[str]:
    found: list[str] = []
    for pair in pairs:
        labels = (f"GPU{pair.a}", f"GPU{pair.b}")
        if not all(label in smi.gpus for label in labels):
            continue
        code = smi.link(smi.gpus.index(labels[0]), smi.gpus.index(labels[1]))
        smi_nvlink = nvlink_width(code) is not None
        name = f"GPU{pair.a}-GPU{pair.b}"
        if pair.nvlink is not None and pair.nvlink != smi_nvlink:
            said = "NVLink P2P available" if pair.nvlink else "NVLink P2P not available"
            found.append(f"{name}: nvidia-smi {code}, NVML {said}")
        elif not smi_nvlink and pair.pcie_level is not None and _normal(pair.pcie_level) != _normal(code):
            found.append(f"{name}: nvidia-smi {code}, NVML common PCIe ancestor {pair.pcie_level}")
    return found


def judge_job_affinity(topo: JobTopology) -> Verdict:
    """Which CPUs and NUMA node each of the job's GPUs sits next to (``nvidia-smi topo -m``)."""
    if topo.no_gpu is not None:
        return skip(topo.no_gpu)
    if topo.smi_matrix is not None:
        return judge_affinity(topo.smi_matrix)
    if topo.smi_all is not None:
        return skip("nvidia-smi topo -m does not list the job's GPUs")
    if topo.smi_missing:
        return skip(f"{topo.smi_problem}: the GPUs' CPU/NUMA affinity comes from nvidia-smi topo -m")
    return error(f"GPUs are present but the topology could not be read: {topo.smi_problem}",
                 code="TOPOLOGY_UNREADABLE", evidence={"nvidia-smi topo -m": topo.smi_raw} if topo.smi_raw else {})


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

