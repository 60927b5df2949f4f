"""Reading what a person hands a sub-command: a regular file, or ``-`` for standard input.

``preflight topology /dev/zero`` once grew to 21 GB and every sub-command blocked for ever on a
FIFO. So the path is checked with ``stat`` before it is opened (opening some devices has effects
of its own), anything but a regular file is refused, the file is opened non-blocking and checked
again through the open descriptor (it may have been swapped in between), and no more than
``MAX_INPUT_BYTES`` is read, from a file or from standard input. Every refusal is one line.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from typing import BinaryIO

from preflight.errors import UsageError

MAX_INPUT_BYTES = 256 * 1024 * 1024
"""A captured log or report larger than this is refused: real ones are kilobytes to a few MiB."""
STDIN = "-"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnreadableInput(UsageError):
    """The input is missing, not a regular file, too large or not text; the message is one line."""


def shown(path: str) -> str:
    """The path as it can be printed on one line (``standard input`` for ``-``)."""
    if path == STDIN:
        return "standard input"
    return path if path.isprintable() else ascii(path)


def read_bytes(path: str, *, limit: int = MAX_INPUT_BYTES, what: str | None = None) -> bytes:
    """The whole content of ``path`` (standard input for ``-``), at most ``limit`` bytes. ``what`` names
    a file an option gives (``DeepSpeed config x.json``): its refusals then say only what is wrong,
    without the advice for a pasted capture."""
    if path == STDIN:
        return _read_stdin(limit)
    name = what or shown(path)
    capture = what is None
    try:
        before = os.stat(path)
        _require_regular(before.st_mode, name, capture)
        _require_size(before.st_size, name, limit, capture)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            opened = os.fstat(handle.fileno())
            _require_regular(opened.st_mode, name, capture)
            _require_size(opened.st_size, name, limit, capture)
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise UnreadableInput(f"cannot read {name}: {'it does not exist' if what else 'No such file or directory'}"
                              ) from None
    except OSError as exc:
        raise UnreadableInput(f"cannot read {name}: {exc.strerror or exc}") from None
    _require_size(len(data), name, limit, capture)  # the file grew while it was read
    return data


def read_text(path: str, *, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of a captured log or matrix: UTF-8 (bad bytes replaced), or UTF-16 / UTF-8 with a
    byte-order mark (what Windows PowerShell's ``>`` writes); NUL bytes mean binary data."""
    data = read_bytes(path, limit=limit)
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8-sig", errors="replace")
    if "\x00" in text:
        raise UnreadableInput(f"{shown(path)} is binary data, not text (it contains NUL bytes)")
    return text


def not_a_file(path: str) -> str | None:
    """Why ``path`` cannot be read as a file (``is a named pipe (FIFO), not a regular file``, ``does not
    exist``), checked with ``stat`` without opening it; None for a regular file. For option types: a file
    option refuses a FIFO, a device or a directory in one line before anything waits on it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    return f"is {_kind(mode)}, not a regular file"


def _kind(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def _require_regular(mode: int, name: str, capture: bool = True) -> None:
    if stat.S_ISREG(mode):
        return
    advice = ": save the output to a file, or pipe it to '-'" if capture else ""
    raise UnreadableInput(f"{name} is {_kind(mode)}, not a regular file{advice}")


def _require_size(size: int, name: str, limit: int, capture: bool = True) -> None:
    if size > limit:
        advice = " for a capture: cut it to the part that matters (e.g. grep the NCCL lines)" if capture else ""
        raise UnreadableInput(f"{name} is {_mib(size)}, over the {_mib(limit)} limit{advice}")


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB" if size % (1024 * 1024) else f"{size // (1024 * 1024)} MiB"


def _read_stdin(limit: int) -> bytes:
    """Up to ``limit`` + 1 bytes of standard input (one byte more tells that it was over)."""
    stream = sys.stdin
    if stream is None:
        raise UnreadableInput("cannot read standard input: there is none (it is closed)")
    buffer: BinaryIO | None = getattr(stream, "buffer", None)
    try:
        data = buffer.read(limit + 1) if buffer is not None else stream.read(limit + 1).encode("utf-8", "replace")
    except OSError as exc:
        raise UnreadableInput(f"cannot read standard input: {exc.strerror or exc}") from None
    except ValueError as exc:  # a closed stream
        raise UnreadableInput(f"cannot read standard input: {exc}") from None
    if len(data) > limit:
        raise UnreadableInput(f"standard input is over the {_mib(limit)} limit for a capture: "
                              "cut it to the part that matters (e.g. grep the NCCL lines)")
    return data
