"""One run owns its report directory: a lock for the run's life, no file of an earlier run left beside it,
and nothing touched there that preflight did not create.

Two runs into one directory corrupt each other (one reads the other's rank results, signals the
other's ranks, interleaves the line log), so a second run is refused while the first holds the lock
(``fcntl.flock`` on ``.preflight.lock``; the kernel drops it however the holder dies, SIGKILL
included). Once it holds the lock, a run removes what an earlier run wrote: a run killed half way must
never leave the previous run's READY report or passing JUnit file to be read as its own.

The report directory may be the user's own (``preflight --report-dir .`` in a project, beside its
``logs/`` and ``bin/run.sh``). So preflight removes and re-modes only what is its own by name: the
report files of :data:`OUTPUTS`, and its folder :data:`LOGS` (rank logs, launch files, scratch), which
carries the mark :data:`OWNED_MARK` from the moment it is made. A folder of that name without the mark
is someone else's and is refused in one line, never emptied.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from preflight.errors import UsageError
from preflight.report.writer import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_tree

LOCK_NAME = ".preflight.lock"
OUTPUTS = ("preflight.json", "preflight.html", "preflight.jsonl", "preflight-junit.xml")
LOGS = "preflight-logs"
"""preflight's own folder inside the report directory: everything it writes there besides :data:`OUTPUTS`."""
OWNED_MARK = ".preflight-owned"


class DirectoryInUse(Exception):
    """Another preflight run holds the report directory."""


class NotPreflights(UsageError):
    """A path preflight would write, remove or re-mode is not one preflight made; the message is one line."""


def logs_dir(report_dir: Path) -> Path:
    """preflight's own folder in ``report_dir``, made (0700, with its mark) when missing; refused when a
    folder or file of that name is not preflight's."""
    path = report_dir / LOGS
    if is_owned(path):
        return path
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        raise NotPreflights(f"{path} exists and was not made by preflight: preflight never writes into nor removes "
                            "it; move it away, or give preflight its own --report-dir") from None
    except FileNotFoundError:
        report_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        os.mkdir(path, PRIVATE_DIR_MODE)
    mark_owned(path)
    return path


def mark_owned(path: Path) -> None:
    """Put preflight's mark in a folder it has just made, so a later run may empty or remove it. The mark is
    an empty file: it takes no data block, so a full disk still takes it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path / OWNED_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))


def is_owned(path: Path) -> bool:
    """True when ``path`` is a real directory (not a link) carrying preflight's mark."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(os.lstat(path / OWNED_MARK).st_mode)
    except OSError:
        return False


def owned_by_preflight(path: Path) -> bool:
    """True when ``path`` is, or lies inside, a folder preflight made (one carrying its mark)."""
    here = Path(os.path.abspath(path))
    return any(is_owned(folder) for folder in (here, *here.parents))


def remove_if_owned(path: Path) -> bool:
    """Remove ``path`` (an earlier launch's folder) when it is preflight's (marked, or inside its own folder);
    anything else is left alone (it may be the user's). True when it is gone (or never was)."""
    if not os.path.lexists(path):
        return True
    if not owned_by_preflight(path):
        return False
    _remove(path)
    return not os.path.lexists(path)


def make_private(report_dir: Path, also: Iterable[Path] = ()) -> None:
    """The run's files 0600 and its folder's tree 0700/0600: the report files of :data:`OUTPUTS`, preflight's
    own folder, and ``also`` (this run's JUnit file inside the report directory). Nothing else is re-moded:
    the user's files beside them keep their modes (``bin/run.sh`` its exec bit)."""
    for path in [*(report_dir / name for name in OUTPUTS), *also]:
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.chmod(path, PRIVATE_FILE_MODE)
    own = report_dir / LOGS
    if is_owned(own):
        private_tree(own)
        with contextlib.suppress(OSError):
            os.chmod(own, PRIVATE_DIR_MODE)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


class ReportDirectory:
    """The run's hold on its report directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DirectoryInUse` naming the holder; never waits."""
        self.path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)  # a new directory is the user's alone
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
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
        """Remove the outputs an earlier run left (and ``extra`` files: the JUnit and Prometheus files this
        run was given) and empty preflight's own folder; returns what went. A folder named like preflight's
        that preflight did not make is refused (:class:`NotPreflights`), never emptied."""
        removed: list[Path] = []
        for path in [*(self.path / name for name in OUTPUTS), *extra]:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    path.unlink()
                    removed.append(path)
        own = self.path / LOGS
        if is_owned(own):
            for entry in os.scandir(own):  # emptied, the folder and its mark kept: it stays preflight's
                if entry.name != OWNED_MARK:
                    _remove(Path(entry.path))
                    removed.append(Path(entry.path))
        logs_dir(self.path)  # made with its mark when missing (or refused when the name is taken)
        return removed

    def release(self) -> None:
        """Drop the lock (also dropped by the kernel when the process ends)."""
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
