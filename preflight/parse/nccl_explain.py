"""Plain-words explanation of an analyzed NCCL log, as JSON-ready data.

Shared by ``preflight nccl-log`` and the bandwidth check, so a saved log and a live run are
explained with the same words: which transport each GPU pair used and what that means, what a
WARN line usually points at, and what a watchdog timeout says about the hang. The data is typed
(:class:`LogExplanation` and its parts, TypedDicts: plain dicts, so ``nccl-log --json`` prints them
as they are) so its readers use its keys as declared.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TypedDict

from preflight.parse.nccl_log import Connection, NcclLog, PairTransport, device_label

FAMILY_MEANING = {
    "P2P": "direct GPU-to-GPU copies (peer-to-peer over NVLink or PCIe)",
    "SHM": "staged through host shared memory: peer-to-peer was not used",
    "NET": "through a network transport (sockets, InfiniBand, EFA...): GPUs on different hosts, "
           "or both P2P and SHM unavailable",
    "NVLS": "NVLink SHARP: reductions done inside the NVSwitch",
    "COLLNET": "in-network reduction (CollNet/SHARP plugin)",
}

_WARN_HINTS: tuple[tuple[str, str], ...] = (
    # NCCL's env docs: NCCL_BUFFSIZE (4 MiB by default) is allocated per channel and peer; NCCL_MAX_NCHANNELS
    # caps the channels; NVLS (NVLink SHARP) keeps buffers of its own. Disabling P2P saves little memory and
    # costs most of the bandwidth (traffic then goes through host shared memory), so it is not offered.
    ("out of memory", "the GPU ran out of memory while NCCL allocated its buffers; leave headroom for NCCL "
                      "(create the process group and run a first collective before the model fills the GPU, "
                      "lower the batch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation) "
                      "or shrink NCCL's share: NCCL_BUFFSIZE=2097152 (half the default), fewer channels "
                      "(NCCL_MAX_NCHANNELS=8), NCCL_NVLS_ENABLE=0 on NVSwitch nodes; do not disable P2P, it "
                      "saves little memory and costs most of the bandwidth"),
    ("illegal memory access", "a CUDA kernel touched invalid memory; every later NCCL error follows from it "
                              "(a kernel bug, or an NCCL bug fixed in a newer release)"),
    ("unspecified launch failure", "a GPU kernel crashed (device-side assert/trap or an Xid); the teardown "
                                   "errors that follow are consequences: check `dmesg | grep -i xid`"),
    ("nvls.cc", "NVLink SHARP (NVLS) setup failed; NCCL falls back to other algorithms (seen when "
                "NCCL_CUMEM_ENABLE=0), so all-reduce is slower on NVSwitch systems"),
    ("calloc async", "a CUDA allocation inside NCCL failed, usually because the GPU is out of memory"),
    ("Cuda failure", "a CUDA call made by NCCL failed; the message names the CUDA error"),
)



class PairExplanation(TypedDict):
    """One GPU pair: its transports (transport text -> channels) and the sentence saying what they mean."""

    src_rank: int
    dst_rank: int | None
    src_gpu: str | None
    dst_gpu: str | None
    transports: dict[str, int]
    channels: int
    peer_to_peer: bool
    explanation: str


class ConnectionJson(TypedDict):
    """One channel connection of the log."""

    channel: int | None
    src_rank: int
    dst_rank: int | None
    direction: str | None
    family: str
    transport: str
    line_no: int


class NvlsJson(TypedDict):
    """Whether NVLS (NVLink SHARP) was set up, with how many channels, by how many ranks."""

    used: bool
    channels: int | None
    ranks: int


class WarningJson(TypedDict):
    """One ``NCCL WARN`` line and what it usually means."""

    line_no: int
    source: str | None
    function: str | None
    message: str
    line: str
    hint: str | None


class ErrorJson(TypedDict):
    """One NCCL error raised to the program and what it usually means."""

    line_no: int
    reason: str
    last_error: str | None
    line: str
    hint: str | None


class TimeoutJson(TypedDict):
    """One watchdog timeout: which rank, which collective, how long it ran."""

    rank: int | None
    collective: str | None
    seq_num: int | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_for_ms: int | None
    line_no: int
    line: str


class LogExplanation(TypedDict):
    """The whole log explained (:func:`explain`), in the key order ``nccl-log --json`` prints."""

    nccl_version: str | None
    nccl_versions: list[str]
    transports: dict[str, int]
    transport_details: dict[str, int]
    pairs: list[PairExplanation]
    connections: list[ConnectionJson]
    nvls: NvlsJson
    warnings: list[WarningJson]
    errors: list[ErrorJson]
    timeouts: list[TimeoutJson]
    findings: list[str]


def hint_for(text: str) -> str | None:
    """What a WARN or error text usually means, or None when it is not a known pattern."""
    for needle, hint in _WARN_HINTS:
        if needle.lower() in text.lower():
            return hint
    return None


def _gpu(log: NcclLog, rank: int | None, device: str | None) -> str | None:
    """``GPU3`` for a CUDA device; a bus id is turned into the device when the log maps it."""
    if device is not None and not (device.isdigit() and int(device) < 256):
        for info in log.ranks:
            if info.bus_id is not None and info.bus_id.lower().lstrip("0") == device.lower().lstrip("0"):
                return f"GPU{info.cuda_dev}"
    return device_label(device)


def _endpoint(log: NcclLog, rank: int | None, device: str | None) -> str:
    """``rank 0 (GPU0)``."""
    if rank is None:
        return "the network"
    gpu = _gpu(log, rank, device)
    return f"rank {rank} ({gpu})" if gpu else f"rank {rank}"


def explain_pair(log: NcclLog, pair: PairTransport) -> PairExplanation:
    """One GPU pair: its transports and a sentence saying whether peer-to-peer was used."""
    src = _endpoint(log, pair.src_rank, pair.src_device)
    dst = _endpoint(log, pair.dst_rank, pair.dst_device)
    families = pair.families
    channels = sum(pair.transports.values())
    used = ", ".join(f"{t} on {n} channel{'s' if n != 1 else ''}" for t, n in pair.transports.items())
    if families == ("SHM",):
        sentence = f"{src} -> {dst} over SHM: peer-to-peer was not used (data goes through host shared memory)"
    elif families == ("NET",):
        sentence = f"{src} -> {dst} over the network ({used}): peer-to-peer and shared memory were not used"
    elif "P2P" in families and len(families) == 1:
        sentence = f"{src} -> {dst} over {used}: direct peer-to-peer"
    else:
        sentence = f"{src} -> {dst} over {used}"
    return {
        "src_rank": pair.src_rank,
        "dst_rank": pair.dst_rank,
        "src_gpu": _gpu(log, pair.src_rank, pair.src_device),
        "dst_gpu": _gpu(log, pair.dst_rank, pair.dst_device),
        "transports": dict(pair.transports),
        "channels": channels,
        "peer_to_peer": "P2P" in families,
        "explanation": sentence,
    }


def _connection_json(connection: Connection) -> ConnectionJson:
    """One connection as JSON."""
    return {
        "channel": connection.channel,
        "src_rank": connection.src_rank,
        "dst_rank": connection.dst_rank,
        "direction": connection.direction,
        "family": connection.family,
        "transport": connection.transport,
        "line_no": connection.line_no,
    }


def timeout_findings(log: NcclLog) -> list[str]:
    """What the watchdog timeouts say together (first collective never finished, size mismatch)."""
    findings: list[str] = []
    by_seq: dict[tuple[int | None, str | None], set[int | None]] = defaultdict(set)
    for timeout in log.timeouts:
        by_seq[(timeout.seq_num, timeout.collective)].add(timeout.numel_in)
    for (seq, collective), sizes in sorted(by_seq.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or "")):
        if len(sizes) > 1:
            shown = ", ".join(str(s) for s in sorted(s for s in sizes if s is not None))
            findings.append(
                f"ranks timed out in the same {collective} (SeqNum {seq}) with different element counts "
                f"({shown}): the ranks called different collectives or sizes, a desync in the program rather "
                "than a hardware fault"
            )
        if seq == 1:
            findings.append(
                f"the very first collective ({collective}, SeqNum 1) never completed: the ranks could not "
                "exchange any data, typical of broken GPU peer-to-peer (try NCCL_P2P_DISABLE=1 to confirm) "
                "or a blocked network interface"
            )
    return findings


def explain(log: NcclLog) -> LogExplanation:
    """The whole log as JSON-ready data with plain-words findings."""
    pairs = [explain_pair(log, pair) for pair in log.pairs()]
    findings: list[str] = []
    transports = log.transports()
    if not transports and not log.nvls_used and not log.warnings and not log.timeouts and not log.errors:
        findings.append("no NCCL connections, WARN lines, errors or watchdog timeouts in this log "
                        "(NCCL_DEBUG=INFO shows the transports)")
    for family, count in transports.items():
        meaning = FAMILY_MEANING.get(family, "a transport this tool does not know")
        findings.append(f"{family}: {count} channel connection{'s' if count != 1 else ''}, {meaning}")
    if log.nvls_used:
        channels = f" with {log.nvls_channels} NVLS channels" if log.nvls_channels else ""
        ranks = f", set up by {log.nvls_ranks} rank{'s' if log.nvls_ranks != 1 else ''}" if log.nvls_ranks else ""
        findings.append(f"NVLS (NVLink SHARP) was used{channels}{ranks}: reductions done inside the NVSwitch")
    if "SHM" in transports and "P2P" not in transports:
        findings.append("no connection used peer-to-peer: NCCL_P2P_DISABLE may be set, or P2P is unsupported "
                        "between these GPUs (PCIe ACS/IOMMU, virtualization, consumer GPUs)")
    if log.warnings:
        plural = "s" if len(log.warnings) != 1 else ""
        findings.append(f"{len(log.warnings)} NCCL WARN line{plural}: NCCL hit a problem (listed below)")
    if log.errors:
        reasons = sorted({e.reason for e in log.errors})
        findings.append(f"NCCL returned an error to the program: {', '.join(reasons)}")
    if log.timeouts:
        collectives = sorted({t.collective or "unnamed collective" for t in log.timeouts})
        findings.append(f"{len(log.timeouts)} watchdog timeout{'s' if len(log.timeouts) != 1 else ''} "
                        f"({', '.join(collectives)}): a collective did not finish in time, the job hung")
    findings.extend(timeout_findings(log))
    return {
        "nccl_version": log.nccl_version,
        "nccl_versions": list(log.versions),
        "transports": transports,
        "transport_details": log.mechanisms(),
        "pairs": pairs,
        "connections": [_connection_json(c) for c in log.connections],
        "nvls": {"used": log.nvls_used, "channels": log.nvls_channels, "ranks": log.nvls_ranks},
        "warnings": [
            {"line_no": w.line_no, "source": w.source, "function": w.function, "message": w.message,
             "line": w.line, "hint": hint_for(f"{w.source or ''} {w.message}")}
            for w in log.warnings
        ],
        "errors": [
            {"line_no": e.line_no, "reason": e.reason, "last_error": e.last_error, "line": e.line,
             "hint": hint_for(f"{e.reason} {e.last_error or ''}")}
            for e in log.errors
        ],
        "timeouts": [
            {"rank": t.rank, "collective": t.collective, "seq_num": t.seq_num, "numel_in": t.numel_in,
             "numel_out": t.numel_out, "timeout_ms": t.timeout_ms, "ran_for_ms": t.ran_for_ms,
             "line_no": t.line_no, "line": t.line}
            for t in log.timeouts
        ],
        "findings": findings,
    }
