"""torch ProcessGroupNCCL watchdog timeouts in a log, in every wording torch has used.

Three wordings state a timeout (each from torch's ``ProcessGroupNCCL.cpp``): the old and new
``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=.., ...) ran for N
milliseconds before timing out`` (also ``Work WorkNCCL(...) timed out``), the newer ``Timeout at
NCCL work: <seq>, last enqueued NCCL work: .., last completed NCCL work: ..`` (which names no
collective: the ``WorkNCCL(...)`` description logged beside it does), and the heartbeat monitor's
``Heartbeat monitor timed out``. A statement that a terminal wrapped over up to six lines is
joined back (a line continues one that reached the terminal's edge when it does not start a log
record of its own). One rank's statements about the same work (same sequence number,
nothing contradicting) are one timeout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class WatchdogTimeout:
    """A torch ProcessGroupNCCL watchdog timeout (or heartbeat-monitor timeout)."""

    rank: int | None
    collective: str | None
    seq_num: int | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_for_ms: int | None
    line: str
    line_no: int


_WORK = re.compile(r"WorkNCCL\((?P<args>(?:[^()]|\(ms\))*)(?P<close>\))?")
_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([^,)]+)")
# Spaces are optional inside the phrases: a terminal that cut a line at a space and a copy that
# trimmed it leave the words joined.
_CAUGHT = re.compile(r"Watchdog\s*caught\s*collective\s*operation\s*timeout|\btimed\s*out\b|before\s*timing\s*out")
_TIMEOUT_AT = re.compile(r"\bTimeout\s*at\s*NCCL\s*work:\s*(-?\d+)")
_HEARTBEAT = re.compile(r"Heartbeat\s*monitor\s*timed\s*out")
_RANK = re.compile(r"\bRank\s*(\d+)\]")
_RANK_PREFIX = re.compile(r"^\s*\[rank(\d+)\]:")
_RAN_FOR = re.compile(r"ran\s*for\s*(\d+)\s*milliseconds")
_HINT = re.compile(r"ProcessGroupNCCL|Watchdog|WorkNCCL|Timeout\s*at|Heartbeat")
_COMPLETE = re.compile(r"(?:before\s*timing\s*out|last\s*completed\s*NCCL\s*work:\s*-?\d+)\.?\s*$")
_NEW_RECORD = re.compile(
    r"^(?:\[rank\d+\]|\[[EWIFD]\s?\d*|\(\w+ pid=\d+\)|Exception raised|frame #|Traceback|\S+:\d+:\d+ \[\d+\]"
    r"|\d{4}-\d\d-\d\d|\[\d{4}-|terminate called|what\(\)|File \"|\w+(?:\.\w+)*(?:Error|Exception):)"
)
MAX_PHYSICAL_LINES = 6
WRAPPED_AT_LEAST = 60
"""A line shorter than this was not cut by a terminal (none is narrower)."""


class WatchdogReader:
    """Reads a log line by line; :meth:`close` gives the timeouts found, in order of appearance."""

    def __init__(self) -> None:
        self._found: list[WatchdogTimeout] = []
        self._described: dict[tuple[int | None, int], dict[str, str]] = {}
        self._record: list[str] = []
        self._record_no = 0

    def feed(self, line: str, line_no: int) -> None:
        """Read one line (launcher prefixes included)."""
        if self._record and _continues(self._record, line):
            self._record.append(line)
            return
        self._flush()
        self._record, self._record_no = [line], line_no

    def close(self) -> tuple[WatchdogTimeout, ...]:
        """Every timeout found, each completed from the ``WorkNCCL(...)`` description of its work."""
        self._flush()
        out = []
        for timeout in self._found:
            fields = self._described.get((timeout.rank, timeout.seq_num)) if timeout.seq_num is not None else None
            out.append(_merge(timeout, _from_fields(timeout.rank, fields, None, timeout.line, timeout.line_no))
                       if fields else timeout)
        return tuple(out)

    def _flush(self) -> None:
        if not self._record:
            return
        text = self._record[0].rstrip()
        for piece in self._record[1:]:
            text = _join(text, piece)
        self._record = []
        self._read(text, text.strip(), self._record_no)

    def _read(self, text: str, line: str, line_no: int) -> None:
        rank = _rank(text)
        work = _WORK.search(text)
        if work is not None:
            fields = dict(_WORK_FIELD.findall(work["args"]))
            seq = _int_or_none(fields.get("SeqNum"))
            if seq is not None:
                self._described.setdefault((rank, seq), fields)
            if _CAUGHT.search(text):
                ran_for = _RAN_FOR.search(text)
                self._add(_from_fields(rank, fields, int(ran_for[1]) if ran_for else None, line, line_no))
                return
        if match := _TIMEOUT_AT.search(text):
            self._add(WatchdogTimeout(rank, None, int(match[1]), None, None, None, None, line, line_no))
        elif _HEARTBEAT.search(text):
            self._add(WatchdogTimeout(rank, None, None, None, None, None, None, line, line_no))

    def _add(self, timeout: WatchdogTimeout) -> None:
        """Keep ``timeout``, or fold it into the one already found for the same rank and work."""
        for index, known in enumerate(self._found):
            if _same_work(known, timeout):
                self._found[index] = _merge(known, timeout)
                return
        self._found.append(timeout)


def _continues(record: list[str], line: str) -> bool:
    """Whether ``line`` is the rest of a watchdog statement a terminal wrapped onto the next line."""
    stripped = line.strip()
    if (len(record) >= MAX_PHYSICAL_LINES or not stripped or _NEW_RECORD.match(stripped)
            or len(record[-1].rstrip()) < WRAPPED_AT_LEAST):
        return False
    text = " ".join(piece.strip() for piece in record)
    return _HINT.search(text) is not None and _COMPLETE.search(text) is None


def _from_fields(rank: int | None, fields: dict[str, str] | None, ran_for: int | None, line: str,
                 line_no: int) -> WatchdogTimeout:
    fields = fields or {}
    return WatchdogTimeout(
        rank=rank,
        collective=fields.get("OpType", "").strip() or None,
        seq_num=_int_or_none(fields.get("SeqNum")),
        numel_in=_int_or_none(fields.get("NumelIn")),
        numel_out=_int_or_none(fields.get("NumelOut")),
        timeout_ms=_int_or_none(fields.get("Timeout(ms)")),
        ran_for_ms=ran_for,
        line=line,
        line_no=line_no,
    )


_MERGED = ("collective", "seq_num", "numel_in", "numel_out", "timeout_ms", "ran_for_ms")


def _same_work(a: WatchdogTimeout, b: WatchdogTimeout) -> bool:
    """The same rank's statements about one work: a sequence number, and no field that differs."""
    if a.rank != b.rank:
        return False
    if a.seq_num is None or b.seq_num is None:
        return a.seq_num is None and b.seq_num is None and all(getattr(a, f) == getattr(b, f) for f in _MERGED)
    return all(getattr(a, f) is None or getattr(b, f) is None or getattr(a, f) == getattr(b, f) for f in _MERGED)


def _merge(known: WatchdogTimeout, more: WatchdogTimeout) -> WatchdogTimeout:
    """``known`` (its line kept) with the fields it lacks taken from ``more``."""
    filled = {f: getattr(more, f) for f in _MERGED if getattr(known, f) is None and getattr(more, f) is not None}
    return replace(known, **filled) if filled else known


def _join(text: str, piece: str) -> str:
    """Join a wrapped piece directly where both sides are characters (a cut inside a word or a
    number; a cut at a trimmed space then loses the space, which the patterns above allow)."""
    if text[-1:].strip() and piece[:1].strip():
        return text + piece.rstrip()
    return f"{text.rstrip()} {piece.strip()}"


def _rank(text: str) -> int | None:
    """``[Rank 3]`` (torch's own prefix), else the ``[rank3]:`` prefix torchrun adds."""
    match = _RANK.search(text) or _RANK_PREFIX.match(text)
    return int(match.group(1)) if match else None


def _int_or_none(text: str | None) -> int | None:
    """``int(text)`` for a whole number, else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None
