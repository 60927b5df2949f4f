"""Test-only pytest plugin (``-p tests.fakes.broken_plugin``): a third-party plugin that crashes when
collection ends, before any check runs, as preflight's own op-build planning did on a read-only HOME
(issue 25 item 1: ``NotADirectoryError`` from ``try_lock`` inside ``pytest_collection_finish``, which
pytest reports as INTERNALERROR). Any installed pytest11 plugin can do the same. Never shipped."""

from __future__ import annotations

import errno

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail the way a cache on a read-only file system fails."""
    raise OSError(errno.EROFS, "Read-only file system", "/home/user/.cache/preflight/torch_extensions")
