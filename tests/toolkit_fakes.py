"""Builders for fake toolkits, fake torch modules and fake DeepSpeed installs (tests only)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import shared_fixtures_dir

NVCC_CAPTURES = shared_fixtures_dir() / "nvcc"


def capture(release: str) -> Path:
    """The shared ``nvcc --version`` capture for a release, e.g. ``"12.4"``."""
    matches = sorted(NVCC_CAPTURES.glob(f"nvcc-{release}-V*.txt"))
    if not matches:
        import pytest

        pytest.skip(f"no shared nvcc capture for {release} in {NVCC_CAPTURES} (../shared/fixtures absent)")
    return matches[0]


def write_executable(path: Path, body: str) -> Path:
    """A ``/bin/sh`` script at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_nvcc(bin_dir: Path, capture_file: Path) -> Path:
    """``bin_dir/nvcc`` printing a captured ``nvcc --version`` output."""
    return write_executable(bin_dir / "nvcc", f"/bin/cat '{capture_file}'\n")


def fake_toolkit(root: Path, release: str, *, headers: bool = True) -> Path:
    """A CUDA tree ``root/{bin/nvcc,include/cuda_runtime_api.h}`` for a captured release."""
    fake_nvcc(root / "bin", capture(release))
    if headers:
        (root / "include").mkdir(parents=True, exist_ok=True)
        (root / "include" / "cuda_runtime_api.h").write_text("/* fake header */\n")
    return root


def fake_tool(bin_dir: Path, name: str, version_line: str) -> Path:
    """A ``name`` executable answering ``--version`` with ``version_line``."""
    return write_executable(bin_dir / name, f"echo '{version_line}'\n")


def fake_torch(version: str, cuda: str | None, arch: str = "", nccl: tuple[Any, ...] | None = None) -> Any:
    """A stand-in for the torch module with the attributes the probe reads."""
    c_module: dict[str, Any] = {}
    if cuda is not None:
        c_module["_cuda_getArchFlags"] = lambda: arch
        if nccl is not None:
            c_module["_nccl_version"] = lambda: 0
    cuda_module = SimpleNamespace(nccl=SimpleNamespace(version=lambda: nccl), get_arch_list=lambda: arch.split())
    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda, hip=None),
        _C=SimpleNamespace(**c_module),
        cuda=cuda_module,
    )


def fake_deepspeed(
    site: Path, version: str, builder_source: str | None, installed_ops: str | None = None, built_cuda: str = "0.0",
    built_torch: str = "2.4", accelerator: str = "cuda",
) -> Path:
    """An installed-looking DeepSpeed under ``site`` (dist-info + package files, never importable).

    ``git_version_info_installed.py`` has the lines DeepSpeed 0.19.8's setup.py writes (version,
    git_hash, git_branch, installed_ops, accelerator_name, torch_info), in that order."""
    info = site / f"deepspeed-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    package = site / "deepspeed"
    (package / "ops" / "op_builder").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("raise RuntimeError('preflight must never import deepspeed')\n")
    if builder_source is not None:
        (package / "ops" / "op_builder" / "builder.py").write_text(builder_source)
    if installed_ops is not None:
        (package / "git_version_info_installed.py").write_text(
            f"version='{version}'\ngit_hash='unknown'\ngit_branch='unknown'\ninstalled_ops={installed_ops}\n"
            f"accelerator_name='{accelerator}'\n"
            f"torch_info={{'version': '{built_torch}', 'bf16_support': False, 'cuda_version': '{built_cuda}', "
            f"'nccl_version': '0.0', 'hip_version': '0.0'}}\n"
        )
    return site


def path_env(*folders: Path, **extra: str) -> dict[str, str]:
    """An environment whose PATH is exactly ``folders`` (fakes call /bin/sh and /bin/cat by path)."""
    env = {"PATH": os.pathsep.join(str(folder) for folder in folders)}
    env.update(extra)
    return env
