"""``--python``: preflight in its own venv judges the job's interpreter, whose environment has nothing
but torch (no preflight, no psutil, no numpy). The workers must run there, and the facts must be its."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def job_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with torch only (the same torch as here, so pip takes it from the local wheel)."""
    import torch

    venv = tmp_path_factory.mktemp("job") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    version = torch.__version__.split("+")[0]
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={version}"],
                               capture_output=True, text=True, timeout=900)
    if installed.returncode != 0:
        pytest.skip(f"could not install torch {version} into a fresh venv here: {installed.stderr[-300:]}")
    return python


def test_the_jobs_interpreter_runs_the_launch_and_is_the_one_judged(tmp_path: Path, job_python: Path) -> None:
    bare = subprocess.run([str(job_python), "-c", "import psutil"], capture_output=True, text=True)
    assert bare.returncode != 0  # the job's environment really lacks preflight's dependencies
    out = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "--python", str(job_python),
                             "-k", "ddp or fsdp", "--strategy", "ddp,fsdp"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    assert report["node"]["torch"]["python"] == str(job_python)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["test_ddp_step"]["status"] == "PASS", checks["test_ddp_step"]
    fsdp = checks["test_strategy_step[fsdp]"]
    assert fsdp["code"] == "FSDP_CHECKPOINT_NEEDS_NUMPY", fsdp  # the job's environment lacks numpy, not ours
    assert report["node"]["torch"]["numpy_problem"]


def test_a_missing_interpreter_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(tmp_path), "--python",
                             str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "no such interpreter" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
