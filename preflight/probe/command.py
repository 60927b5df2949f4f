"""Running an external command with a hard deadline.

``nvidia-smi`` can take minutes on a sick node, so every command runs in its own session and the
whole process group is killed when the deadline passes; the kernel kills it too if preflight dies
first (``PR_SET_PDEATHSIG``: the calling thread must wait for the command, as this function does).
A missing executable, a timeout and a non-zero exit are all values on :class:`CommandResult`, never
exceptions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from preflight.workers.lifeline import die_with_parent

DEFAULT_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command did: exit code, output, and whether it was found or timed out."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    not_found: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the command ran to completion with exit code 0."""
        return self.returncode == 0 and not self.timed_out and not self.not_found

    def describe_failure(self) -> str:
        """One line saying why the command did not succeed (empty when it did)."""
        name = self.argv[0] if self.argv else "command"
        if self.not_found:
            return f"{name}: not found on PATH"
        if self.timed_out:
            return f"{name}: no answer within {self.duration_s:.0f} s (killed)"
        if self.returncode not in (0, None):
            last = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
            return f"{name}: exit code {self.returncode}: {last[0]}".rstrip(": ")
        return ""


@runtime_checkable
class CommandRunner(Protocol):
    """Anything that runs an argv list under a deadline (the tests pass a recorded runner)."""

    def __call__(
        self, argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None
    ) -> CommandResult: ...


def run_command(
    argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run ``argv`` (no shell) and return its result; kill its whole process group at the deadline."""
    import time

    argv = tuple(argv)
    if not argv or (os.sep not in argv[0] and shutil.which(argv[0]) is None):
        return CommandResult(argv, None, "", "", not_found=True)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            text=True,
            errors="replace",
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl runs between fork and exec
        )
    except (FileNotFoundError, PermissionError, OSError) as exc:
        return CommandResult(argv, None, "", str(exc), not_found=True, duration_s=time.monotonic() - start)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return CommandResult(argv, None, out or "", err or "", timed_out=True, duration_s=time.monotonic() - start)
    return CommandResult(argv, proc.returncode, out, err, duration_s=time.monotonic() - start)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group of ``proc`` (it was started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
