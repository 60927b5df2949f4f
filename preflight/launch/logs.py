"""A launch's logs read in bounded pieces: a rank may print a gigabyte, and preflight reads its end.

Tails come from the last ``TAIL_BYTES`` of a file (read from the end, never the whole file). A log
longer than ``KEEP_BYTES`` is cut, once the launch has ended, to its first ``HEAD_BYTES`` and its
last bytes with a line saying how much was left out, copied in chunks: the report directory keeps
what a person reads (how it started, how it ended), the scrubbing that follows reads a bounded
file, and preflight's memory never holds more than a chunk.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TAIL_BYTES = 64 * 1024
KEEP_BYTES = 16 * 2**20
HEAD_BYTES = 2**20
CHUNK = 2**20
LOG_TAIL_LINES = 30


def read_end(fd: int, limit: int = TAIL_BYTES) -> bytes:
    """The last ``limit`` bytes of an open file."""
    size = os.fstat(fd).st_size
    start = max(0, size - limit)
    chunks, offset = [], start
    while offset < size:
        chunk = os.pread(fd, min(CHUNK, size - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def tail_of(fd: int, lines: int = LOG_TAIL_LINES, limit: int = TAIL_BYTES) -> str:
    """The last ``lines`` lines of an open file (within its last ``limit`` bytes)."""
    text = read_end(fd, limit).decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = TAIL_BYTES) -> str:
    """The last ``lines`` lines of ``path`` ("" when it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return tail_of(fd, lines, limit)
    except OSError:
        return ""
    finally:
        os.close(fd)


def read_bounded(path: Path, limit: int = TAIL_BYTES * 16) -> str:
    """The end of ``path`` as text, at most ``limit`` bytes ("" when it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return read_end(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _copy(src: int, dst: int, start: int, length: int) -> None:
    offset, end = start, start + length
    while offset < end:
        chunk = os.pread(src, min(CHUNK, end - offset), offset)
        if not chunk:
            return
        os.write(dst, chunk)
        offset += len(chunk)


def write_bounded(src: int, path: Path, *, keep: int = KEEP_BYTES, head: int = HEAD_BYTES) -> int:
    """Write what ``src`` holds to ``path`` (replacing it), cut to its head and tail when it is longer than
    ``keep``; returns the bytes ``src`` held. ``path`` is written beside itself and renamed into place,
    mode 0600; a failure leaves ``path`` as it was and raises OSError."""
    size = os.fstat(src).st_size
    tmp = path.with_name(f".{path.name}.bounded")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        if size <= keep:
            _copy(src, fd, 0, size)
        else:
            tail_bytes = keep - head
            _copy(src, fd, 0, head)
            left_out = size - head - tail_bytes
            os.write(fd, f"\n[preflight: {left_out:,} bytes of this log left out: it held {size:,} bytes; the first "
                         f"{head:,} and the last {tail_bytes:,} are kept]\n".encode())
            _copy(src, fd, size - tail_bytes, tail_bytes)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return size
