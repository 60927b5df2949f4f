"""Parse the output of ``nvcc --version`` (also ``nvcc -V``).

The line that matters is ``Cuda compilation tools, release 12.4, V12.4.131``: the *release* is
what DeepSpeed and ``torch.utils.cpp_extension`` compare with ``torch.version.cuda`` (both read the
token after ``release``), the ``V`` version adds the patch level. Around it the text varies: a
shell prompt or the command line pasted above the banner, a ``Build cuda_12.4.r12.4/...`` line
that older toolkits do not print, Windows line endings and ``C:\\...\\nvcc.exe`` command lines,
wrapper scripts that print their own banner first. None of that changes the answer, so it is
skipped; what would change it (no release line, two different releases, a ``V`` or ``Build``
version that contradicts the release) raises :class:`NvccParseError` instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RELEASE_LINE = re.compile(
    r"Cuda compilation tools,\s*release\s+(?P<release>\S+?),?"
    r"(?:\s+V(?P<full>\S+))?\s*$",
    re.IGNORECASE,
)
_RELEASE = re.compile(r"^(\d+)\.(\d+)$")
_FULL = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))*$")
_BUILD_LINE = re.compile(r"^\s*Build\s+(?P<build>cuda_(?P<major>\d+)\.(?P<minor>\d+)\S*)\s*$")
_BUILT_ON_LINE = re.compile(r"^\s*Built on\s+(?P<when>\S+)\s*$")
_BANNER = "nvcc: NVIDIA (R) Cuda compiler driver"


class NvccParseError(ValueError):
    """The text is not an ``nvcc --version`` output this parser can read with certainty."""


@dataclass(frozen=True, slots=True)
class NvccVersion:
    """What ``nvcc --version`` says about the toolkit it belongs to."""

    release: tuple[int, int]
    """``(major, minor)`` from ``release X.Y``: what DeepSpeed and torch compare."""
    full: tuple[int, ...] | None
    """The ``V`` version, e.g. ``(12, 4, 131)``; None when the line has no ``V`` part."""
    build: str | None
    """The ``Build`` line's value, e.g. ``cuda_12.4.r12.4/compiler.34097967_0``; None when absent."""
    built_on: str | None
    """The ``Built on`` stamp, e.g. ``Thu_Mar_28_02:18:24_PDT_2024``; None when absent."""

    @property
    def release_text(self) -> str:
        """``"12.4"``: the form ``torch.version.cuda`` and DeepSpeed's messages use."""
        return f"{self.release[0]}.{self.release[1]}"

    @property
    def full_text(self) -> str:
        """``"12.4.131"`` when the ``V`` version is known, else the release."""
        return ".".join(str(part) for part in self.full) if self.full else self.release_text

    def describe(self) -> str:
        """One phrase for summaries: ``CUDA 12.4 (V12.4.131)``."""
        if self.full:
            return f"CUDA {self.release_text} (V{self.full_text})"
        return f"CUDA {self.release_text}"


def parse_nvcc_version(text: str) -> NvccVersion:
    """Read the toolkit release from ``nvcc --version`` output.

    Raises:
        NvccParseError: empty text, no ``Cuda compilation tools, release X.Y`` line, several
            lines naming different releases, or a ``V``/``Build`` version contradicting it.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not any(line.strip() for line in lines):
        raise NvccParseError("nvcc --version printed nothing")
    found: list[tuple[tuple[int, int], tuple[int, ...] | None]] = []
    for line in lines:
        match = _RELEASE_LINE.search(line)
        if match:
            found.append(_read_release_line(match.group("release"), match.group("full"), line))
    if not found:
        hint = " (the nvcc banner is there)" if _BANNER.lower() in text.lower() else ""
        raise NvccParseError(f"no 'Cuda compilation tools, release X.Y' line in nvcc output{hint}")
    if len(set(found)) > 1:
        releases = ", ".join(f"{major}.{minor}" for (major, minor), _ in found)
        raise NvccParseError(f"nvcc output names more than one release: {releases}")
    release, full = found[0]
    build = _read_build(lines, release)
    built_on = next((m.group("when") for m in map(_BUILT_ON_LINE.match, lines) if m), None)
    return NvccVersion(release=release, full=full, build=build, built_on=built_on)


def _read_release_line(
    release_text: str, full_text: str | None, line: str
) -> tuple[tuple[int, int], tuple[int, ...] | None]:
    """``("12.4", "12.4.131")`` -> ``((12, 4), (12, 4, 131))``, checking they agree."""
    release_match = _RELEASE.match(release_text.rstrip(","))
    if not release_match:
        raise NvccParseError(f"unreadable release {release_text!r} in {line.strip()!r}")
    release = (int(release_match.group(1)), int(release_match.group(2)))
    if full_text is None:
        return release, None
    if not _FULL.match(full_text):
        raise NvccParseError(f"unreadable V version {full_text!r} in {line.strip()!r}")
    full = tuple(int(part) for part in full_text.split("."))
    if full[:2] != release:
        raise NvccParseError(f"release {release_text} contradicts V{full_text} in {line.strip()!r}")
    return release, full


def _read_build(lines: list[str], release: tuple[int, int]) -> str | None:
    """The ``Build cuda_X.Y...`` value, which must name the same release when present."""
    for line in lines:
        match = _BUILD_LINE.match(line)
        if not match:
            continue
        named = (int(match.group("major")), int(match.group("minor")))
        if named != release:
            raise NvccParseError(
                f"Build line names CUDA {named[0]}.{named[1]} but the release line says "
                f"{release[0]}.{release[1]}"
            )
        return match.group("build")
    return None
