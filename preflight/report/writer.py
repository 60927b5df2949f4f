"""Writing report files so that a reader never sees half a file, and a killed run leaves a trace."""

from __future__ import annotations

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
        self._handle = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - held open for the run; close() closes it

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and flush it to disk."""
        if self._handle.closed:
            return
        self._handle.write(json.dumps(record, default=str) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file (further writes are ignored)."""
        if not self._handle.closed:
            self._handle.close()
