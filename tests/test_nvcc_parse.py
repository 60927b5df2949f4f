"""``nvcc --version`` parser: every shared capture, our variants, and inputs it must refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight.parse.nvcc import NvccParseError, parse_nvcc_version
from tests.conftest import TEST_DATA, shared_fixtures_dir

# File names carry the expected answer: ``<prefix>-<release>[-V<full>]-...``.
_NAME = re.compile(r"^(?:nvcc|ok)-(?P<release>\d+\.\d+)(?:-V(?P<full>\d+(?:\.\d+)+))?")
OWN = TEST_DATA / "nvcc"


def _files(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}*.txt")) if folder.is_dir() else []


def _expected(path: Path) -> tuple[tuple[int, int], tuple[int, ...] | None]:
    match = _NAME.match(path.name)
    assert match, f"fixture name does not state its release: {path.name}"
    major, minor = (int(x) for x in match.group("release").split("."))
    full = tuple(int(x) for x in match.group("full").split(".")) if match.group("full") else None
    return (major, minor), full


SHARED = _files(shared_fixtures_dir() / "nvcc", "nvcc-")


def test_shared_captures_exist(shared_fixtures: Path) -> None:
    assert len(_files(shared_fixtures / "nvcc", "nvcc-")) >= 6


@pytest.mark.parametrize("path", SHARED, ids=[p.name for p in SHARED])
def test_shared_capture(path: Path, shared_fixtures: Path) -> None:
    release, full = _expected(path)
    version = parse_nvcc_version(path.read_text())
    assert version.release == release
    assert version.full == full
    assert version.build is not None and version.build.startswith(f"cuda_{release[0]}.{release[1]}")
    assert version.built_on is not None


OK = _files(OWN, "ok-")
BAD = _files(OWN, "bad-")


@pytest.mark.parametrize("path", OK, ids=[p.name for p in OK])
def test_own_variant(path: Path) -> None:
    release, full = _expected(path)
    version = parse_nvcc_version(path.read_bytes().decode())
    assert (version.release, version.full) == (release, full)


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_refuses_unreadable(path: Path) -> None:
    with pytest.raises(NvccParseError) as caught:
        parse_nvcc_version(path.read_bytes().decode())
    message = str(caught.value)
    assert message and "\n" not in message


def test_variant_counts() -> None:
    assert len(OK) >= 6 and len(BAD) >= 8


def test_missing_build_line_is_none() -> None:
    version = parse_nvcc_version((OWN / "ok-10.1-V10.1.243-no-build-line.txt").read_text())
    assert version.build is None
    assert version.built_on == "Sun_Jul_28_19:07:16_PDT_2019"


def test_no_v_part() -> None:
    version = parse_nvcc_version((OWN / "ok-12.2-no-V-part-trailing-spaces.txt").read_text())
    assert version.full is None
    assert version.describe() == "CUDA 12.2"
    assert version.full_text == "12.2"


def test_windows_crlf_keeps_build_value_clean() -> None:
    text = (OWN / "ok-12.3-V12.3.103-windows-crlf-prompt.txt").read_bytes().decode()
    version = parse_nvcc_version(text)
    assert version.build == "cuda_12.3.r12.3/compiler.33492891_0"
    assert version.built_on == "Fri_Nov__3_17:51:05_Pacific_Daylight_Time_2023"


def test_describe_and_texts() -> None:
    version = parse_nvcc_version("Cuda compilation tools, release 12.4, V12.4.131\n")
    assert version.release_text == "12.4"
    assert version.full_text == "12.4.131"
    assert version.describe() == "CUDA 12.4 (V12.4.131)"


def test_two_digit_minor_is_not_truncated() -> None:
    version = parse_nvcc_version("Cuda compilation tools, release 12.10, V12.10.4\n")
    assert version.release == (12, 10)


def test_same_release_twice_is_accepted() -> None:
    line = "Cuda compilation tools, release 12.8, V12.8.93\n"
    assert parse_nvcc_version(line + line).release == (12, 8)


def test_banner_without_release_says_so() -> None:
    with pytest.raises(NvccParseError, match="banner"):
        parse_nvcc_version((OWN / "bad-banner-only-truncated.txt").read_text())


def test_contradiction_names_both() -> None:
    with pytest.raises(NvccParseError, match=r"12\.4.*12\.1\.105"):
        parse_nvcc_version((OWN / "bad-release-contradicts-V.txt").read_text())
