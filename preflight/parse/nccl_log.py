"""Read what NCCL and torch's ProcessGroupNCCL wrote to a log.

NCCL_DEBUG=INFO says, per channel, which transport each GPU pair uses (``via P2P/CUMEM``, ``via
SHM/direct/direct``, ``via NET/Socket/0``...). That line is the only place that tells a user whether
peer-to-peer was really used, so the analyzer keeps every connection, the NCCL version, the
``NCCL WARN`` lines, NCCL error summaries and torch watchdog timeouts. Lines may carry launcher
prefixes (``[rank0]:``, ``[1,0]<stdout>:``, `` 0: ``, ``(RayWorker pid=1)``, timestamps), so every
pattern is searched inside the line, never anchored at its start.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from preflight.parse.nccl_watchdog import WatchdogReader, WatchdogTimeout
from preflight.parse.pasted import strip_quoting

__all__ = ["Connection", "NcclError", "NcclLog", "NcclLogError", "NcclWarning", "PairTransport", "RankInfo",
           "WatchdogTimeout", "analyze", "analyze_lines", "device_label", "transport_family"]



def transport_family(transport: str) -> str:
    """``P2P/CUMEM/read`` -> ``P2P``; ``COLLNET/SHARP/0`` -> ``COLLNET``; an unknown first word as written."""
    head = transport.split("/", 1)[0].strip().upper()
    return "COLLNET" if head in ("COLLNET", "COLL") else head


class NcclLogError(ValueError):
    """The text is not a log this module can read (binary data, for instance)."""


@dataclass(frozen=True, slots=True)
class Connection:
    """One channel connection, e.g. ``Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read``."""

    channel: int | None
    src_rank: int
    dst_rank: int | None
    src_device: str | None
    dst_device: str | None
    direction: str | None
    transport: str
    line_no: int

    @property
    def family(self) -> str:
        """``P2P``, ``SHM``, ``NET``, ``NVLS`` or ``COLLNET`` (another first word as written)."""
        return transport_family(self.transport)

    @property
    def mechanism(self) -> str:
        """The transport without its family: ``CUMEM/read``, ``direct pointer``, ``Socket/0``."""
        parts = self.transport.split("/", 1)
        return parts[1] if len(parts) > 1 else ""

    @property
    def key(self) -> tuple[object, ...]:
        """Identity used to count a connection once even when several lines report it."""
        return (self.channel, self.src_rank, self.dst_rank, self.direction, self.transport)


@dataclass(frozen=True, slots=True)
class NcclWarning:
    """One ``NCCL WARN`` line."""

    message: str
    source: str | None
    function: str | None
    line: str
    line_no: int


@dataclass(frozen=True, slots=True)
class NcclError:
    """An NCCL error raised to the caller: ``NCCL error in: ..., unhandled cuda error``."""

    reason: str
    last_error: str | None
    line: str
    line_no: int


@dataclass(frozen=True, slots=True)
class RankInfo:
    """``comm 0x... rank 0 nranks 8 cudaDev 0 busId 18000``: which GPU a rank drives."""

    rank: int
    nranks: int
    cuda_dev: int
    bus_id: str | None


@dataclass(frozen=True, slots=True)
class NcclLog:
    """Everything the analyzer found in one log."""

    versions: tuple[str, ...]
    connections: tuple[Connection, ...]
    nvls_lines: tuple[str, ...]
    nvls_ranks: int
    nvls_channels: int | None
    warnings: tuple[NcclWarning, ...]
    timeouts: tuple[WatchdogTimeout, ...]
    errors: tuple[NcclError, ...]
    ranks: tuple[RankInfo, ...]
    nccl_line_count: int

    @property
    def nccl_version(self) -> str | None:
        """The NCCL version when the log states exactly one (None when absent or conflicting)."""
        return self.versions[0] if len(self.versions) == 1 else None

    @property
    def nvls_used(self) -> bool:
        """True when NCCL set up NVLink SHARP (NVLS) communicators."""
        return bool(self.nvls_lines)

    def transports(self) -> dict[str, int]:
        """Family -> distinct channel connections. NVLS set-up lines (``NVLS comm ... headRank``, one
        per rank) are not connections: :attr:`nvls_used` and :attr:`nvls_channels` say NVLS was used."""
        counts: Counter[str] = Counter(c.family for c in self.connections)
        return dict(sorted(counts.items()))

    def mechanisms(self) -> dict[str, int]:
        """Full transport text (``P2P/CUMEM``, ``NET/Socket/0``) -> connections."""
        return dict(sorted(Counter(c.transport for c in self.connections).items()))

    def pairs(self) -> list[PairTransport]:
        """One entry per (src rank, dst rank) with the transports seen and channel counts."""
        grouped: dict[tuple[int, int | None], list[Connection]] = {}
        for connection in self.connections:
            grouped.setdefault((connection.src_rank, connection.dst_rank), []).append(connection)
        pairs = []
        by_ranks = sorted(grouped.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]))
        for (src, dst), items in by_ranks:
            pairs.append(
                PairTransport(
                    src_rank=src,
                    dst_rank=dst,
                    src_device=items[0].src_device,
                    dst_device=items[0].dst_device,
                    transports=dict(sorted(Counter(c.transport for c in items).items())),
                )
            )
        return pairs


@dataclass(frozen=True, slots=True)
class PairTransport:
    """How one rank reached another: transport text -> number of channels."""

    src_rank: int
    dst_rank: int | None
    src_device: str | None
    dst_device: str | None
    transports: dict[str, int]

    @property
    def families(self) -> tuple[str, ...]:
        """Transport families used by this pair, sorted."""
        return tuple(sorted({transport_family(t) for t in self.transports}))


_NCCL_MARK = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b")
_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:[+\w.]*)")
_TESTS_VERSION = re.compile(r"nccl-tests version \S+ .*?nccl-library=(\d{5,})")
_CONNECTION = re.compile(
    r"(?:(?:Channel|Ring|Coll|CollNet|Tree)\s+(?P<channel>\d+)(?:/\d+)?\s*:\s*)?"
    r"(?P<src>\d+)(?:\[(?P<srcdev>[0-9a-fA-Fx]+)\])?"
    r"(?:\s*->\s*(?P<dst>\d+)(?:\[(?P<dstdev>[0-9a-fA-Fx]+)\])?)?"
    r"\s*(?:\[(?P<dir>send|receive)\])?\s+via\s+(?P<transport>\S.*?)\s*$"
)
_ORIGIN = re.compile(r"(\S+):(\d+):\d+ \[(\d+)\] NCCL ")
_NVLS_SETUP = re.compile(r"NCCL INFO (?:NVLS comm \S+ headRank|Connected NVLS tree)")
_NVLS_CHANNELS = re.compile(r"NCCL INFO .*?\b(\d+) nvls channels")
_WARN = re.compile(
    r"(?:(?P<src>[\w./-]+\.(?:cc|cu|h|hpp|cpp|c):\d+)\s+(?:\((?P<func>[\w:~]+)\)\s+)?)?NCCL WARN\s?(?P<msg>.*?)\s*$"
)
_RANK_INFO = re.compile(
    r"NCCL INFO .*?\brank (\d+) nranks (\d+) cudaDev (\d+)(?:\s+nvmlDev \d+)?(?:\s+busId ([0-9a-fA-F]+))?"
)
_NCCL_ERROR = re.compile(r"NCCL error in: \S+?,\s*(?P<reason>[^(,]+?)\s*(?:\(|,|$)")
_LAST_ERROR = re.compile(r"^(?:\[rank\d+\]:\s*)?Last error:\s*(?P<inline>.*)$")


def analyze(text: str) -> NcclLog:
    """Analyze a whole log; an empty result when the text holds no NCCL lines."""
    if "\x00" in text:
        raise NcclLogError("the log contains NUL bytes: binary data, not a text log")
    lines, _ = strip_quoting(text.splitlines())  # a log pasted into e-mail or chat: "> " on every line
    return analyze_lines(lines)


def analyze_lines(lines: Iterable[str]) -> NcclLog:
    """Analyze log lines (no trailing newlines needed)."""
    versions: list[str] = []
    connections: dict[tuple[object, ...], Connection] = {}
    nvls_lines: list[str] = []
    nvls_origins: set[tuple[str, ...]] = set()
    nvls_channels: int | None = None
    warnings: list[NcclWarning] = []
    watchdog = WatchdogReader()
    errors: list[NcclError] = []
    ranks: dict[tuple[int, int, int], RankInfo] = {}
    nccl_lines = 0
    error_reader = _ErrorReader(errors)

    for line_no, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if error_reader.feed(line, line_no):
            continue
        is_nccl = bool(_NCCL_MARK.search(line))
        nccl_lines += is_nccl
        for found in _versions_in(line):
            if found not in versions:
                versions.append(found)
        if " via " in line and (is_nccl or re.search(r"^\s*(?:Channel|Ring|CollNet|Coll)\s+\d+", line)):
            connection = _connection(line, line_no)
            if connection is not None:
                connections.setdefault(connection.key, connection)
        if _NVLS_SETUP.search(line):
            nvls_lines.append(line)
            origin = _ORIGIN.search(line)
            nvls_origins.add(origin.groups() if origin else (str(line_no),))
        if match := _NVLS_CHANNELS.search(line):
            nvls_channels = max(nvls_channels or 0, int(match.group(1)))
        if match := _RANK_INFO.search(line):
            info = RankInfo(int(match[1]), int(match[2]), int(match[3]), match[4])
            if info.bus_id is not None or (info.rank, info.nranks, info.cuda_dev) not in ranks:
                ranks[(info.rank, info.nranks, info.cuda_dev)] = info
        if "NCCL WARN" in line and (match := _WARN.search(line)):
            warnings.append(NcclWarning(match["msg"], match["src"], match["func"], line.strip(), line_no))
        watchdog.feed(line, line_no)
    error_reader.close()
    return NcclLog(
        versions=tuple(versions),
        connections=tuple(connections.values()),
        nvls_lines=tuple(nvls_lines),
        nvls_ranks=len(nvls_origins),
        nvls_channels=nvls_channels,
        warnings=tuple(warnings),
        timeouts=watchdog.close(),
        errors=tuple(errors),
        ranks=tuple(sorted(ranks.values(), key=lambda r: (r.nranks, r.rank))),
        nccl_line_count=nccl_lines,
    )


class _ErrorReader:
    """Pairs ``NCCL error in: ..., <reason>`` with the ``Last error:`` detail torch prints after it
    (on the same line or the next non-empty one)."""

    def __init__(self, sink: list[NcclError]) -> None:
        self._sink = sink
        self._pending: tuple[str, str, int] | None = None
        self._detail_next = False

    def feed(self, line: str, line_no: int) -> bool:
        """Read one line; True when it was the detail line of a pending error (nothing else to find)."""
        if self._pending is not None and self._detail_next:
            detail = _strip_rank_prefix(line).strip()
            if detail:
                self._emit(detail)
                return True
        if match := _NCCL_ERROR.search(line):
            self.close()
            self._pending = (match["reason"].strip(), line.strip(), line_no)
        elif self._pending is not None and (match := _LAST_ERROR.match(line.strip())):
            if match["inline"]:
                self._emit(match["inline"])
            else:
                self._detail_next = True
        return False

    def close(self) -> None:
        """Record a pending error that had no detail."""
        if self._pending is not None:
            self._emit(None)

    def _emit(self, detail: str | None) -> None:
        if self._pending is None:
            return
        reason, line, line_no = self._pending
        self._sink.append(NcclError(reason, detail, line, line_no))
        self._pending, self._detail_next = None, False


def _versions_in(line: str) -> list[str]:
    """NCCL versions stated in a line (``NCCL version 2.26.2+cuda12.8``, nccl-tests' library code)."""
    found = [m.group(1) for m in _VERSION.finditer(line)]
    if match := _TESTS_VERSION.search(line):
        code = int(match.group(1))
        found.append(f"{code // 10000}.{code // 100 % 100}.{code % 100}")
    return found


def _connection(line: str, line_no: int) -> Connection | None:
    """The connection described by a ``... via TRANSPORT`` line, or None when it is not one."""
    mark = _NCCL_MARK.search(line)
    match = _CONNECTION.search(line[mark.end():] if mark else line)
    if match is None:
        return None
    transport = match["transport"]
    if not re.match(r"[A-Za-z]", transport):
        return None
    return Connection(
        channel=int(match["channel"]) if match["channel"] is not None else None,
        src_rank=int(match["src"]),
        dst_rank=int(match["dst"]) if match["dst"] is not None else None,
        src_device=match["srcdev"],
        dst_device=match["dstdev"],
        direction=match["dir"],
        transport=transport,
        line_no=line_no,
    )


def _strip_rank_prefix(line: str) -> str:
    """``[rank0]: text`` -> ``text``."""
    return re.sub(r"^\s*\[rank\d+\]:\s?", "", line)


def device_label(device: str | None) -> str | None:
    """``0`` -> ``GPU0`` (CUDA device); ``4b000`` -> ``GPU@4b000`` (older logs print the bus id)."""
    if device is None:
        return None
    if device.isdigit() and int(device) < 256:
        return f"GPU{int(device)}"
    return f"GPU@{device}"
