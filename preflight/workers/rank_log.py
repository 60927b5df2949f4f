"""A rank's own files, private from the moment they exist: the one place that creates them and
points a rank's output at its log.

A rank's log holds whatever the job prints (an HF token in a traceback, a password in its
arguments), so every file of a launch is the user's alone: mode 0600 in directories of mode 0700
(``preflight.report.writer`` uses the same modes for the reports). The launcher creates each
rank's log before torchrun starts (:func:`create_private`), so no rank can create it with looser
modes and the launcher keeps a handle on it; a rank then only appends (:func:`redirect_output`).

Standard library only: the phase workers import it, and the rehearsal's bootstrap (which runs as a
plain script in the job's interpreter) loads this file by its path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def private_dirs(path: Path) -> None:
    """Create ``path`` and every missing parent with mode 0700 (``Path.mkdir(parents=True)`` gives the
    parents the umask's mode); an existing directory is left as it is."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, PRIVATE_DIR_MODE)  # the umask may have taken bits the mode asked for


def create_private(path: Path) -> int:
    """Create (or truncate) ``path`` with mode 0600 and return a descriptor open for reading and
    writing, whatever the umask; the caller keeps or closes it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)  # an existing file keeps its mode through O_CREAT
    return fd


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path``: the launcher's file when it made one, else a new 0600 one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except OSError:
        pass
    return fd


def redirect_output(log_path: Path) -> None:
    """Point fds 1 and 2 at the rank's log, so C-level output (NCCL, gloo) lands there too."""
    fd = open_private_append(log_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
