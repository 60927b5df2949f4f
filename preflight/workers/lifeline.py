"""Nothing preflight starts outlives it, however preflight ends.

Two mechanisms, because either alone has a gap:

- ``PR_SET_PDEATHSIG`` (Linux ``prctl(2)``): the kernel sends SIGKILL to a child when the thread that
  forked it exits, SIGKILL of the parent included. :func:`die_with_parent` is the ``preexec_fn`` of
  every child preflight starts (torchrun, nvidia-smi, the NVML child); each rank sets it again for
  itself, relative to torchrun, because torchrun's own death (by SIGKILL) cannot be caught.
- :func:`start_watchdog`, a daemon thread in each rank that exits the process when its parent is
  gone (it was re-parented) or preflight itself is gone, or the rank's own deadline has passed. It
  covers the race where the parent died before ``prctl`` ran, and systems without ``prctl``.

Standard library only: it runs inside the ranks, in the job's interpreter.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_PID_ENV = "PREFLIGHT_PARENT_PID"  # the preflight process that owns the launch
RANK_DEADLINE_ENV = "PREFLIGHT_RANK_DEADLINE"  # epoch seconds after which a rank exits on its own
ABANDONED_EXIT = 86  # a rank's exit code when it left because preflight was gone or its deadline passed
POLL_S = 0.25


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent goes (a ``preexec_fn``; a no-op where unsupported)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_watchdog(on_exit: int = ABANDONED_EXIT) -> threading.Thread:
    """Exit the process (``os._exit``) when its parent or the owning preflight is gone, or its deadline passes."""
    parent = os.getppid()
    owner = int(os.environ.get(PARENT_PID_ENV, "0") or 0)
    deadline = float(os.environ.get(RANK_DEADLINE_ENV, "0") or 0)

    def watch() -> None:
        while True:
            orphaned = os.getppid() != parent or parent == 1
            if orphaned or (owner and not _alive(owner)) or (deadline and time.time() > deadline):
                os._exit(on_exit)
            time.sleep(POLL_S)

    thread = threading.Thread(target=watch, name="preflight-lifeline", daemon=True)
    thread.start()
    return thread
