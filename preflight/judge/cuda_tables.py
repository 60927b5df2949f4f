"""Published compatibility tables the toolkit judges rely on, with their sources.

Kept apart from the judges so a reviewer can check every figure against its source in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Minimum Linux x86_64 driver per CUDA toolkit release (the GA row of each release).
# Source: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions"
# (docs.nvidia.com/cuda/cuda-toolkit-release-notes, table 3; archived copies for 11.x/12.x).
DRIVER_MIN_FOR_CUDA: Mapping[tuple[int, int], str] = {
    (13, 0): "580.65.06",
    (12, 9): "575.51.03",
    (12, 8): "570.26",
    (12, 6): "560.28.03",
    (12, 5): "555.42.02",
    (12, 4): "550.54.14",
    (12, 3): "545.23.06",
    (12, 2): "535.54.03",
    (12, 1): "530.30.02",
    (12, 0): "525.60.13",
    (11, 8): "520.61.05",
    (11, 7): "515.43.04",
    (11, 6): "510.39.01",
    (11, 5): "495.29.05",
    (11, 4): "470.42.01",
    (11, 3): "465.19.01",
    (11, 2): "460.27.03",
    (11, 1): "455.23",
    (11, 0): "450.51.05",
    (10, 2): "440.33",
    (10, 1): "418.39",
    (10, 0): "410.48",
}

# Minor version compatibility (CUDA 11 and later): an application built with any 11.x/12.x/13.x
# toolkit runs, with a limited feature set (no PTX JIT of newer PTX), on a driver of the same
# major family at or above these versions. Source: NVIDIA "CUDA Compatibility" guide, section
# "Minor Version Compatibility" (table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges":
# 13.x >= 580, 12.x >= 525, 11.x >= 450, with the note that 11.x needs 450.80.02) and the
# release notes' table 2 (12.x >= 525.60.13). For 13.x we take 580.65.06, the 13.0 GA driver.
MVC_DRIVER_MIN: Mapping[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

# CUDA variants PyTorch publishes wheels for at download.pytorch.org/whl/cuXYZ (recent releases).
TORCH_WHEEL_CUDA: tuple[tuple[int, int], ...] = (
    (11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0),
)

# First CUDA release whose nvcc can target a compute capability (NVIDIA CUDA release notes;
# the same figures torch keeps in torch/cuda/__init__.py for its own warning).
MIN_CUDA_FOR_CAPABILITY: Mapping[tuple[int, int], tuple[int, int]] = {
    (7, 0): (9, 0), (7, 5): (10, 0), (8, 0): (11, 0), (8, 6): (11, 1), (8, 9): (11, 8),
    (9, 0): (11, 8), (10, 0): (12, 8), (10, 3): (12, 9), (11, 0): (13, 0), (12, 0): (12, 8),
    (12, 1): (12, 9),
}

# Integrated (Tegra/Jetson) capabilities run only code built for exactly them; torch keeps the
# same exclusions in DEVICE_REQUIREMENT (torch 2.13 torch/cuda/__init__.py).
EXACT_ONLY_CAPABILITIES = frozenset({(5, 3), (6, 2), (7, 2), (8, 7)})

# DeepSpeed's ``cuda_minor_mismatch_ok`` when the installed copy cannot be read (or DeepSpeed is
# only announced with ``--with deepspeed``). Versions checked in the public code index:
# - deepspeedai/DeepSpeed op_builder/builder.py at 06450fcc05dbcc1dc7cbd85788e6f63460d1a550 (master,
#   2025): 10 -> 10.0-10.2, 11 -> 11.0-11.8, 12 -> 12.0-12.6, 12.8, 12.9 ("no CUDATk 12.7"); this table.
#   The deepspeed 0.19.8 sdist from PyPI (newest in Nov 2026, read with pip download) is identical.
# - the deepspeed 0.15.0 wheel (deepspeed/ops/op_builder/builder.py) and microsoft/DeepSpeed at
#   01f049f1f2eb: 12 -> 12.0-12.5 only. Older copies: 11 -> 11.0-11.3 (PR #1139), then to 11.8.
# History from the PRs: 12.0-12.3 #4613, 12.4/12.5 #5591, 12.8 #6975, 12.9 #7394;
# ``DS_SKIP_CUDA_CHECK`` since #3436. The rule itself (equal major.minor, else both in the table of
# the toolkit's major, else DS_SKIP_CUDA_CHECK=1, else CUDAMismatchException) is the same in all.
DEEPSPEED_SNAPSHOT_TABLE: Mapping[int, tuple[str, ...]] = {
    10: ("10.0", "10.1", "10.2"),
    11: ("11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"),
    12: ("12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"),
}
DEEPSPEED_SNAPSHOT_SOURCE = "built-in copy of DeepSpeed master's table (2025, CUDA 13.x: exact match only)"

_ARCH = re.compile(r"^(?P<kind>sm|compute)_(?P<num>\d+)(?P<suffix>[af]?)$")


def version_tuple(text: str) -> tuple[int, ...]:
    """``"550.54.15"`` -> ``(550, 54, 15)``; raises ValueError on anything else."""
    parts = text.strip().split(".")
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a dotted version: {text!r}")
    return tuple(int(part) for part in parts)


def parse_arch(entry: str) -> tuple[str, tuple[int, int], str] | None:
    """``"sm_90a"`` -> ``("sm", (9, 0), "a")``; None for an entry this table does not know."""
    match = _ARCH.match(entry.strip())
    if not match:
        return None
    number = int(match.group("num"))
    return match.group("kind"), (number // 10, number % 10), match.group("suffix")


def sass_runs_on(code: tuple[int, int], suffix: str, device: tuple[int, int]) -> bool:
    """Does a cubin for ``sm_<code><suffix>`` run on a GPU of capability ``device``?

    Plain and family (``f``) cubins run on the same major at an equal or higher minor;
    arch-specific (``a``) cubins and integrated GPUs need an exact match.
    """
    if suffix == "a" or device in EXACT_ONLY_CAPABILITIES:
        return code == device
    return code[0] == device[0] and device[1] >= code[1]


def ptx_runs_on(code: tuple[int, int], suffix: str, device: tuple[int, int]) -> bool:
    """Can the driver JIT ``compute_<code><suffix>`` PTX for ``device``? (any newer GPU, not ``a``)."""
    if suffix == "a":
        return code == device
    if suffix == "f":
        return code[0] == device[0] and device[1] >= code[1]
    return device >= code


def wheel_for_driver(driver_cuda: tuple[int, int]) -> tuple[int, int] | None:
    """The newest PyTorch wheel CUDA variant a driver supporting ``driver_cuda`` runs natively."""
    fitting = [variant for variant in TORCH_WHEEL_CUDA if variant <= driver_cuda]
    return max(fitting) if fitting else None


def wheel_for_capability(capability: tuple[int, int]) -> tuple[int, int] | None:
    """The oldest PyTorch wheel CUDA variant able to carry kernels for ``capability``."""
    needed = MIN_CUDA_FOR_CAPABILITY.get(capability)
    if needed is None:
        return None
    fitting = [variant for variant in TORCH_WHEEL_CUDA if variant >= needed]
    return min(fitting) if fitting else None


def cu_tag(release: tuple[int, int]) -> str:
    """``(12, 4)`` -> ``"cu124"`` (download.pytorch.org index name)."""
    return f"cu{release[0]}{release[1]}"
