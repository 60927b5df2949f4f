"""Writing report files so that a reader never sees half a file, and a killed run leaves a trace."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
"""Everything under the report directory is what a user attaches to a ticket: readable by its owner only."""


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:  # never half a file
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` through a private temporary file beside it and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def private_tree(root: Path, keep: Iterable[Path] = ()) -> None:
    """Give every file under ``root`` mode 0600 and every directory below it 0700 (``root`` itself is the
    user's: a directory preflight creates is made 0700 when it is made). Links are not followed; ``keep``
    (a Prometheus textfile another user's exporter reads) is left as it is."""
    kept = {os.path.abspath(p) for p in keep}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.abspath(os.path.join(top, name))
            if path in kept:
                continue
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if stat.S_ISDIR(mode):
                    os.chmod(path, PRIVATE_DIR_MODE)
                elif stat.S_ISREG(mode):
                    os.chmod(path, PRIVATE_FILE_MODE)


def printable(obj: Any) -> Any:
    """A copy of a JSON-able structure whose strings are all valid Unicode: bytes that were not UTF-8 (a
    ``--report-dir`` or a script argument given as raw bytes reaches Python as lone surrogates, which no
    UTF-8 writer takes) are shown as ``\\xff`` escapes, the rest unchanged."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return obj.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return obj
    if isinstance(obj, dict):
        return {printable(key): printable(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [printable(item) for item in obj]
    return obj


def dump_json(data: Any) -> str:
    """The report's JSON text (stable key order, readable indentation)."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


class LineLog:
    """``preflight.jsonl``: one JSON line per finished check, flushed at once, so a killed run
    still leaves what it measured."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        self._handle = open(fd, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - held open for the run
        self.failed: str | None = None

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and flush it to disk. A full disk stops the log (``failed`` says why), never
        the run: a line is written whole or not at all (one ``write`` of the encoded line)."""
        if self._handle.closed or self.failed:
            return
        fd = self._handle.fileno()
        line = (json.dumps(record, default=str) + "\n").encode()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            if os.write(fd, line) < len(line):
                raise OSError(28, "No space left on device (short write)")
            os.fsync(fd)
        except OSError as exc:
            self.failed = f"{self.path}: {exc.strerror or exc}"
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # never leave half a line

    def close(self) -> None:
        """Close the file (further writes are ignored)."""
        if not self._handle.closed:
            self._handle.close()
