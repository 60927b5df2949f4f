"""Writing report files so that a reader never sees half a file, and a killed run leaves a trace."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(data: Any) -> str:
    """The report's JSON text (stable key order, readable indentation)."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


class LineLog:
    """``preflight.jsonl``: one JSON line per finished check, flushed at once, so a killed run
    still leaves what it measured."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handle = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - held open for the run
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
