"""A non-editable install works: every package ships, and ``pytest checks/`` from a checkout
writes the reports (the README says so) with the installed plugin, not the checkout's modules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def test_every_package_directory_is_listed() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO_ROOT).parts) for init in (REPO_ROOT / "preflight").rglob("__init__.py")}
    assert found - listed == set(), "pyproject.toml [tool.setuptools] packages misses these: a wheel would lack them"


@pytest.mark.e2e
def test_pytest_checks_from_a_checkout_writes_the_report_after_a_non_editable_install(tmp_path: Path) -> None:
    source = tmp_path / "source"  # built from a copy: an in-tree build would leave build/ in the checkout
    for name in ("preflight", "checks"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "--target", str(site), str(source)],
                           capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "No module named" in built.stderr and "setuptools" in built.stderr:
        pytest.skip("setuptools is not installed in the test environment: cannot build the wheel")
    assert built.returncode == 0, built.stderr
    assert (site / "preflight" / "node" / "__init__.py").is_file()
    # The installed copy first on sys.path (as site-packages would be); cwd is not the checkout, so
    # `python -m pytest` does not put the checkout's preflight/ in front of it.
    # No test plugin either (PYTEST_PLUGINS, tests/conftest.py): the checkout's tests are not importable there.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_PLUGINS"}, "PYTHONPATH": str(site)}
    out = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(REPO_ROOT / "checks"),
                          "-k", "nvml or gpu_count", "-m", "not distributed", f"--preflight-report-dir={out}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert "Error while loading plugin" not in run.stdout + run.stderr, run.stdout + run.stderr
    report = json.loads((out / "preflight.json").read_text())
    assert {c["name"] for c in report["checks"]} == {"test_nvml", "test_gpu_count"}
    assert (out / "preflight.html").is_file()
    assert "reports:" in run.stdout
