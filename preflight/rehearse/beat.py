"""The beat file: what a rehearsal rank shares with preflight while it runs, in a file preflight made.

preflight creates ``rank<N>.beat`` for every rank before torchrun starts (private, its blocks
allocated up front) and keeps it open; the rank maps it and writes into it in place. So what a rank
measured survives a full disk (nothing new is allocated), a script that deletes the report directory
(preflight reads through its own descriptor) and a rank killed by a signal (the page cache holds
every write): the step count and each step's start time at each step, the heartbeat at each watchdog
tick, and the rank's record (stack, error, parameters) in one of two slots, each with a sequence
number and a checksum, so a write cut short is never read. preflight writes one field, ``stop_at``:
the step at which every rank stops, decided while the ranks run (see ``preflight.rehearse.watch``).

Layout: 16 bytes of magic and version, 16 int64 fields, 16 float64 fields (times are
``time.monotonic()``, one clock for every process on Linux), ``capacity`` float64 step start times,
then two record slots of a 16-byte header (sequence, length, CRC-32) and ``SLOT_BYTES`` of JSON.

Standard library only: the bootstrap loads this file by its path in the job's interpreter.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"PFRBEAT1"
VERSION = 1
SUFFIX = ".beat"
SLOT_BYTES = 128 * 1024
INTS, FLOATS = 16, 16
INTS_AT = 16
FLOATS_AT = INTS_AT + 8 * INTS
TIMES_AT = FLOATS_AT + 8 * FLOATS
SLOT_HEADER = struct.Struct("<QII")

# int64 fields
PID, COUNT, TARGET, STOP_AT, CAPACITY, ENDED, EXIT_CODE, BACKWARD, SLOT_SEQ, MARKS = range(10)
# float64 fields
HEARTBEAT, LAST_STEP, WINDOW_START, WINDOW_END, STARTED, LAUNCHED, ENDED_AT, FIRST_BACKWARD, LAST_BACKWARD = range(9)

ENDINGS = ("running", "steps_done", "returned", "exit", "raised", "stalled", "deadline", "parent_gone", "os_exit",
           "uncountable")


def beat_name(rank: int) -> str:
    """``rank3.beat``."""
    return f"rank{rank}{SUFFIX}"


def size_for(capacity: int) -> int:
    """Bytes of a beat file holding ``capacity`` step times."""
    return TIMES_AT + 8 * capacity + 2 * (SLOT_HEADER.size + SLOT_BYTES)


def _slot_at(capacity: int, slot: int) -> int:
    return TIMES_AT + 8 * capacity + slot * (SLOT_HEADER.size + SLOT_BYTES)


def create(path: Path, *, capacity: int, target: int, launched: float, stop_at: int | None = None,
           mode: int = 0o600) -> int:
    """preflight's side: the file with every block allocated (``posix_fallocate``: writing into a mapping
    of a sparse file on a full disk would kill the rank with SIGBUS), its header written; returns a
    descriptor the caller keeps. Raises OSError when the disk cannot hold it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        size = size_for(capacity)
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:  # pragma: no cover - every Linux has it
            os.ftruncate(fd, size)
        header = bytearray(TIMES_AT)
        header[:8] = MAGIC
        struct.pack_into("<I", header, 8, VERSION)
        ints = [0] * INTS
        ints[CAPACITY], ints[TARGET], ints[STOP_AT] = capacity, target, target if stop_at is None else stop_at
        struct.pack_into(f"<{INTS}q", header, INTS_AT, *ints)
        floats = [0.0] * FLOATS
        floats[LAUNCHED] = launched
        struct.pack_into(f"<{FLOATS}d", header, FLOATS_AT, *floats)
        os.pwrite(fd, bytes(header), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def set_stop_at(fd: int, step: int) -> None:
    """preflight's side: every rank stops at the hook call that begins step ``step + 1`` (one aligned
    8-byte write: a rank reads the old value or the new one, never half of each)."""
    os.pwrite(fd, struct.pack("<q", step), INTS_AT + 8 * STOP_AT)


def read_bytes(fd: int, size: int | None = None) -> bytes:
    """The whole file through preflight's own descriptor (it may have been unlinked by the script)."""
    if size is None:
        size = os.fstat(fd).st_size
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_header(fd: int) -> BeatView | None:
    """The fixed fields only (no step times, no record): cheap enough for every poll of a launch."""
    try:
        return parse(os.pread(fd, TIMES_AT, 0), header_only=True)
    except OSError:
        return None


class Beat:
    """The rank's side: fields in a shared mapping of the file preflight made (or, where there is none
    and none can be made, an anonymous mapping: the rank still counts and stops, only unseen)."""

    def __init__(self, memory: mmap.mmap, shared: bool) -> None:
        self.memory = memory
        self.shared = shared
        self.ints = memoryview(memory)[INTS_AT:FLOATS_AT].cast("q")
        self.floats = memoryview(memory)[FLOATS_AT:TIMES_AT].cast("d")
        self.capacity = int(self.ints[CAPACITY])
        self.times = memoryview(memory)[TIMES_AT:TIMES_AT + 8 * self.capacity].cast("d")

    @classmethod
    def attach(cls, path: Path, *, capacity: int, target: int, launched: float) -> tuple[Beat, str | None]:
        """Map ``path`` (preflight's file; created here when it is missing). On a file that cannot be
        mapped, an anonymous mapping and the reason."""
        try:
            if not path.exists():
                os.close(create(path, capacity=capacity, target=target, launched=launched))
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if size < TIMES_AT or os.pread(fd, len(MAGIC), 0) != MAGIC:
                    raise OSError(f"{path.name} is not a beat file")
                memory = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            beat = cls(memory, shared=True)
            if size < size_for(beat.capacity):
                raise OSError(f"{path.name} is shorter than its header says")
            return beat, None
        except (OSError, ValueError) as exc:
            problem = f"the beat file {path.name} could not be used ({exc}): the rank's figures are not shared"
        memory = mmap.mmap(-1, size_for(capacity))
        memory[: len(MAGIC)] = MAGIC
        struct.pack_into("<q", memory, INTS_AT + 8 * CAPACITY, capacity)
        beat = cls(memory, shared=False)
        beat.ints[TARGET] = beat.ints[STOP_AT] = target
        beat.floats[LAUNCHED] = launched
        return beat, problem

    def write_record(self, record: dict[str, Any]) -> bool:
        """Put ``record`` into the older slot, header last; False when it could not be written."""
        try:
            payload = _fitting(record)
            seq = int(self.ints[SLOT_SEQ]) + 1
            at = _slot_at(self.capacity, seq % 2)
            start = at + SLOT_HEADER.size
            self.memory[start:start + len(payload)] = payload
            self.memory[at:at + SLOT_HEADER.size] = SLOT_HEADER.pack(seq, len(payload), zlib.crc32(payload))
            self.ints[SLOT_SEQ] = seq
            return True
        except (OSError, ValueError, TypeError, IndexError):
            return False


def _fitting(record: dict[str, Any]) -> bytes:
    """The record as JSON within a slot: long fields shortened first, then dropped."""
    payload = json.dumps(record, default=str).encode("utf-8", errors="replace")
    if len(payload) <= SLOT_BYTES:
        return payload
    short = dict(record)
    for key in ("stack", "error"):
        value = short.get(key)
        if isinstance(value, list):
            short[key] = value[-5:]
        elif isinstance(value, dict):
            short[key] = {k: (v[-4000:] if isinstance(v, str) else v[-5:] if isinstance(v, list) else v)
                          for k, v in value.items()}
    payload = json.dumps(short, default=str).encode("utf-8", errors="replace")
    if len(payload) <= SLOT_BYTES:
        return payload
    return json.dumps({k: v for k, v in short.items() if k not in ("stack", "error", "notes")},
                      default=str).encode()[:SLOT_BYTES]


@dataclass(frozen=True, slots=True)
class BeatView:
    """What a beat file says, parsed."""

    pid: int
    count: int
    target: int
    stop_at: int
    ended: str
    exit_code: int
    backward: int
    marks: int
    heartbeat: float
    last_step: float
    window_start: float
    window_end: float
    started: float
    launched: float
    ended_at: float
    first_backward: float
    last_backward: float
    step_starts: tuple[float, ...] = ()
    record: dict[str, Any] | None = None

    @property
    def running(self) -> bool:
        """The rank has not reached an ending of its own (yet, or ever: a signal ended it)."""
        return self.ended == "running"


def parse(data: bytes, header_only: bool = False) -> BeatView | None:
    """A :class:`BeatView` from a beat file's bytes; None for anything else."""
    if len(data) < TIMES_AT or data[:8] != MAGIC:
        return None
    ints = struct.unpack_from(f"<{INTS}q", data, INTS_AT)
    floats = struct.unpack_from(f"<{FLOATS}d", data, FLOATS_AT)
    capacity = max(0, int(ints[CAPACITY]))
    ended = ENDINGS[ints[ENDED]] if 0 <= ints[ENDED] < len(ENDINGS) else "running"
    starts: tuple[float, ...] = ()
    record = None
    if not header_only and len(data) >= size_for(capacity):
        count = min(max(0, int(ints[COUNT])), capacity)
        starts = struct.unpack_from(f"<{count}d", data, TIMES_AT)
        record = _record(data, capacity)
    return BeatView(pid=ints[PID], count=ints[COUNT], target=ints[TARGET], stop_at=ints[STOP_AT], ended=ended,
                    exit_code=ints[EXIT_CODE], backward=ints[BACKWARD], marks=ints[MARKS], heartbeat=floats[HEARTBEAT],
                    last_step=floats[LAST_STEP], window_start=floats[WINDOW_START], window_end=floats[WINDOW_END],
                    started=floats[STARTED], launched=floats[LAUNCHED], ended_at=floats[ENDED_AT],
                    first_backward=floats[FIRST_BACKWARD], last_backward=floats[LAST_BACKWARD],
                    step_starts=tuple(starts), record=record)


def _record(data: bytes, capacity: int) -> dict[str, Any] | None:
    """The newer of the two slots whose checksum holds."""
    best: tuple[int, dict[str, Any]] | None = None
    for slot in (0, 1):
        at = _slot_at(capacity, slot)
        seq, length, crc = SLOT_HEADER.unpack_from(data, at)
        if not seq or length > SLOT_BYTES:
            continue
        payload = data[at + SLOT_HEADER.size: at + SLOT_HEADER.size + length]
        if zlib.crc32(payload) != crc:
            continue
        with contextlib.suppress(ValueError):
            value = json.loads(payload)
            if isinstance(value, dict) and (best is None or seq > best[0]):
                best = (seq, value)
    return best[1] if best else None


def read_path(path: Path) -> BeatView | None:
    """A beat file read by its path (a run preflight did not see to its end)."""
    try:
        return parse(path.read_bytes())
    except OSError:
        return None
