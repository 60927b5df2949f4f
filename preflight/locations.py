"""Where things are: the shipped checks (in a wheel and in a checkout alike), and the folders preflight
writes besides the report directory (a cache, a scratch folder), each usable or replaced by a private one."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import stat
import tempfile
from pathlib import Path

from preflight.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent


def checks_dir() -> Path:
    """``preflight.checks`` as installed (the wheel maps ``checks/`` there), else ``checks/`` of a checkout."""
    try:
        spec = importlib.util.find_spec("preflight.checks")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return PACKAGE_DIR.parent / "checks"


class UnusableLocation(UsageError):
    """A location preflight must write (a cache, a scratch folder) cannot be used; the message is one line."""


def unwritable(path: Path) -> str | None:
    """Why preflight could not create and write files in the directory ``path``, or None when it could.

    The nearest existing ancestor (or ``path`` itself) must be a directory in which a file can really be
    made: a private probe file is created and removed there (permission bits do not tell for root, a
    read-only mount or sysfs); nothing else is created."""
    here = Path(os.path.abspath(path))
    for candidate in (here, *here.parents):
        try:
            mode = os.stat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):  # below a file: the file is named
            continue
        except OSError as exc:
            return f"{candidate}: {exc.strerror or exc}"
        if not stat.S_ISDIR(mode):
            return f"{candidate} is not a directory"
        try:
            fd, probe = tempfile.mkstemp(prefix=".preflight-probe-", dir=candidate)
        except OSError as exc:
            return f"{candidate} is {'on a read-only file system' if _read_only(candidate) else 'not writable'}" \
                   f" ({exc.strerror or exc})"
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
        return None
    return f"{here}: no existing parent"


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def private_scratch(name: str) -> Path:
    """``<tmp>/preflight-<uid>/<name>``: a folder of this user's alone for what cannot go where it should
    (a read-only HOME). The top folder is made 0700, or, when it exists, must be a real directory owned by
    this user that nobody else can write (another user's folder there could plant compiled code)."""
    top = Path(tempfile.gettempdir()) / f"preflight-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(top, 0o700)
        info = os.lstat(top)
    except OSError as exc:
        raise UnusableLocation(f"cannot use {top} as a private scratch folder: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise UnusableLocation(f"{top} is not a private folder of this user (a link, another owner, or writable by "
                               "others): remove it, or set TMPDIR to a folder of your own")
    return top / name


def cache_folder(preferred: Path, name: str) -> Path:
    """``preferred`` when preflight can write there, else its private scratch folder ``name`` (a read-only
    HOME, HOME a file): a cache that cannot be kept is rebuilt, never a crash."""
    return preferred if unwritable(preferred) is None else private_scratch(name)
