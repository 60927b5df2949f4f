"""One run owns its report directory: a lock for the run's life, and no file of an earlier run left beside it.

Two runs into one directory corrupt each other (one reads the other's rank results, signals the
other's ranks, interleaves the line log), so a second run is refused while the first holds the lock
(``fcntl.flock`` on ``.preflight.lock``; the kernel drops it however the holder dies, SIGKILL
included). Once it holds the lock, a run removes what an earlier run wrote: a run killed half way must
never leave the previous run's READY report or passing JUnit file to be read as its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import IO

LOCK_NAME = ".preflight.lock"
OUTPUTS = ("preflight.json", "preflight.html", "preflight.jsonl", "preflight-junit.xml")
LOGS = "logs"


class DirectoryInUse(Exception):
    """Another preflight run holds the report directory."""


class ReportDirectory:
    """The run's hold on its report directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DirectoryInUse` naming the holder; never waits."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new directory is the user's alone
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        handle = open(fd, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise DirectoryInUse(f"another preflight run (pid {holder}) is writing to {self.path}: wait for it to "
                                 "finish, or give this run its own --report-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._handle = handle

    def clear_previous(self, extra: Iterable[Path] = ()) -> list[Path]:
        """Remove the outputs and rank logs an earlier run left (and ``extra`` files); returns what went."""
        removed: list[Path] = []
        for path in [*(self.path / name for name in OUTPUTS), *extra]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        logs = self.path / LOGS
        if logs.exists():
            shutil.rmtree(logs, ignore_errors=True)
            removed.append(logs)
        return removed

    def release(self) -> None:
        """Drop the lock (also dropped by the kernel when the process ends)."""
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
