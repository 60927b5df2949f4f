"""Find a JIT op build failure (DeepSpeed's ops, torch cpp extensions) in a rank's error and log.

DeepSpeed compiles its CUDA ops (fused Adam, ...) the first time they are used, with ninja, the
host compiler and ``nvcc`` from ``CUDA_HOME``. When that fails, the exception says only "Error
building extension 'fused_adam'"; the compiler's own message is in the output before it. This
module picks that message out so the report can quote it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EXTENSION = re.compile(r"Error building extension '([^']+)'")
_MISMATCH = re.compile(r"(Installed CUDA version [\d.]+ does not match the version torch was compiled with [\d.]+"
                       r"[^\n]*)")
_MISSING_CUDA = re.compile(r"(CUDA_HOME does not exist, unable to compile CUDA op\(s\)[^\n]*)")
_MISSING_CUDA_EXCEPTION = re.compile(r"(MissingCUDAException[^\n]*)")
_NINJA_MISSING = re.compile(r"(Ninja is required to load C\+\+ extensions[^\n]*)")
_COMPILER_LINE = re.compile(r"^.*(?:\bfatal error\b|\berror(?: [A-Z]*\d+)?:|\bnvcc fatal\b|: not found$|"
                            r"\bcommand not found\b|undefined reference to).*$", re.IGNORECASE | re.MULTILINE)
_NOT_COMPILER = ("Error building extension", "Traceback", "RuntimeError:", "OpBuildError:")
# A rank's own failure marker that says which op failed, written by preflight.workers.zero.
MARKER = "DeepSpeed could not build its op"


@dataclass(frozen=True, slots=True)
class OpBuildFailure:
    """Which op failed to build (when named) and the compiler's (or builder's) message."""

    op: str | None
    message: str

    def describe(self) -> str:
        """``DeepSpeed could not build its op 'fused_adam': <message>``."""
        what = f"'{self.op}'" if self.op else "(unnamed)"
        return f"{MARKER} {what}: {self.message}"


def find_op_build_failure(text: str) -> OpBuildFailure | None:
    """The op build failure described in ``text``, or None when ``text`` shows none."""
    already = re.search(re.escape(MARKER) + r" (?:'([^']+)'|\(unnamed\)): ([^\n]+)", text)
    if already:
        return OpBuildFailure(already.group(1), already.group(2).strip())
    extension = _EXTENSION.search(text)
    op = extension.group(1) if extension else None
    for pattern in (_MISMATCH, _MISSING_CUDA, _MISSING_CUDA_EXCEPTION, _NINJA_MISSING):
        found = pattern.search(text)
        if found:
            return OpBuildFailure(op, found.group(1).strip())
    if extension is None and "ninja: build stopped" not in text:
        return None
    for match in _COMPILER_LINE.finditer(text):
        line = match.group(0).strip()
        if line and not any(marker in line for marker in _NOT_COMPILER):
            return OpBuildFailure(op, line)
    return OpBuildFailure(op, "the build failed without a compiler message in the captured output")
