"""JIT-build one DeepSpeed op in a child process, under a deadline (the opt-in slow check).

The build is what fails at a job's first optimizer step when the toolkit, compiler or headers do
not fit, so running it once is the only complete proof. It runs in a fresh interpreter (DeepSpeed
is imported there, never in preflight's process), in its own session so the deadline kills nvcc,
ninja and the compiler with it, and in a fresh ``TORCH_EXTENSIONS_DIR`` so a cached build from an
earlier run cannot hide a broken toolkit. ``jit_load`` is used (not ``load``) so a pre-built op in
the wheel does not skip the build.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from preflight.probe.command import CommandRunner, run_command

DEFAULT_OP = "FusedAdamBuilder"
DEFAULT_TIMEOUT_S = 600.0
OK_MARKER = "PREFLIGHT_JIT_BUILD_OK"
_ERROR_LINE = re.compile(r"(error[:\s]|fatal|FAILED:|undefined reference|No such file or directory)", re.IGNORECASE)
_CHILD = f"""
import importlib, sys, time
start = time.monotonic()
builders = importlib.import_module("deepspeed.ops.op_builder")
builder = getattr(builders, sys.argv[1])()
builder.jit_load(verbose=True)
print("{OK_MARKER}", builder.name, round(time.monotonic() - start, 1), flush=True)
"""


@dataclass(frozen=True, slots=True)
class JitBuildResult:
    """How the build went: success, the deadline, and the compiler's own words on failure."""

    op: str
    ok: bool
    timed_out: bool
    duration_s: float
    returncode: int | None
    output: str
    error_lines: tuple[str, ...]

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the build log."""
        return "\n".join(self.output.splitlines()[-lines:])


def compiler_errors(output: str, limit: int = 40) -> tuple[str, ...]:
    """The lines of a build log that carry the error, verbatim, in order (at most ``limit``)."""
    found = [line.rstrip() for line in output.splitlines() if _ERROR_LINE.search(line)]
    return tuple(found[:limit])


def run_jit_build(
    op: str = DEFAULT_OP,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    runner: CommandRunner = run_command,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> JitBuildResult:
    """Build DeepSpeed's ``op`` builder just in time in a child interpreter; never raises."""
    base = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="preflight-jit-") as extensions:
        child_env = {**base, "TORCH_EXTENSIONS_DIR": extensions, "PYTHONUNBUFFERED": "1"}
        result = runner([python, "-c", _CHILD, op], timeout_s=timeout_s, env=child_env)
    output = "\n".join(part for part in (result.stdout, result.stderr) if part)
    ok = result.ok and OK_MARKER in result.stdout
    errors = () if ok else compiler_errors(output)
    return JitBuildResult(op, ok, result.timed_out, result.duration_s, result.returncode, output, errors)
