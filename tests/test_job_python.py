"""``--python``: preflight in its own venv judges the job's interpreter, whose environment has nothing
but torch (no preflight, no psutil, no numpy). The workers must run there, and the facts must be its."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e


def _torch_and_its_requirements() -> list[importlib.metadata.Distribution]:
    """The installed distributions ``pip install torch`` would bring: torch and its requirements, recursively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = ["torch"]
    while pending:
        try:
            dist = importlib.metadata.distribution(pending.pop())
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.metadata["Name"].lower() in found:
            continue
        found[dist.metadata["Name"].lower()] = dist
        pending += [re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0] for req in dist.requires or () if "extra ==" not in req]
    return list(found.values())


@pytest.fixture(scope="module")
def job_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with torch only: this environment's torch and its requirements, linked into the venv's own
    site-packages (what ``pip install torch`` puts there, in milliseconds instead of a 30 s install)."""
    venv = tmp_path_factory.mktemp("job") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for dist in _torch_and_its_requirements():
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not top.endswith(".pth"):
                (site / top).symlink_to(source)
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


def _site_packages() -> str:
    import torch

    return str(Path(torch.__file__).resolve().parent.parent)


def _bare_venv(where: Path, *, system_site: bool) -> Path:
    """A venv with nothing installed in it (no pip even): torch can only come from outside."""
    args = [sys.executable, "-m", "venv", "--without-pip", *(["--system-site-packages"] if system_site else []),
            str(where)]
    subprocess.run(args, check=True, timeout=120)
    return where / "bin" / "python"


@pytest.mark.parametrize("reach", ["PYTHONPATH", "user site"])
def test_torch_reachable_only_outside_the_venv_is_the_jobs_torch(tmp_path: Path, reach: str) -> None:
    """Environment modules put torch on PYTHONPATH, ``pip install --user`` in the user site: the job imports
    it, so must preflight (issue 24: ``python -I`` dropped both and said TORCH_NOT_IMPORTABLE)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFLIGHT_", "PYTHON"))}
    if reach == "PYTHONPATH":
        python = _bare_venv(tmp_path / "venv", system_site=False)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), _site_packages()])
    else:  # a user site under a fake PYTHONUSERBASE whose .pth file points at this environment's packages
        python = _bare_venv(tmp_path / "venv", system_site=True)
        base = tmp_path / "userbase"
        site = subprocess.run([str(python), "-c", "import site; print(site.getusersitepackages())"], env={
            **env, "PYTHONUSERBASE": str(base)}, capture_output=True, text=True, check=True).stdout.strip()
        Path(site).mkdir(parents=True)
        (Path(site) / "job-packages.pth").write_text(_site_packages() + "\n")
        env.update(PYTHONUSERBASE=str(base), PYTHONPATH=str(REPO_ROOT))
    hidden = subprocess.run([str(python), "-I", "-c", "import torch"], capture_output=True, env=env)
    assert hidden.returncode != 0  # isolated mode cannot see it: only the job's own sys.path can
    out = tmp_path / "reports"
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "--python",
                             str(python), "--strategy", "ddp", "-k", "ddp_step or torch_cuda_build"],
                            capture_output=True, text=True, env=env, timeout=300)
    report = json.loads((out / "preflight.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    torch_check = checks["test_torch_cuda_build"]
    assert torch_check["code"] != "TORCH_NOT_IMPORTABLE", torch_check
    assert report["node"]["torch"]["version"] and report["node"]["torch"]["python"] == str(python)
    assert checks["test_ddp_step"]["status"] == "PASS", checks["test_ddp_step"]  # the ranks import it too
    assert report["verdict"] == "READY" and result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_an_interpreter_that_answers_junk_is_one_finding_naming_it(tmp_path: Path) -> None:
    """A broken ``--python`` (issue 25: "stopped after a peer failed", no rank named, NCCL advice)."""
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "{not json"\n')
    python.chmod(0o755)
    out = tmp_path / "reports"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "--python",
                             str(python), "--strategy", "ddp", "-k", "ddp_step or torch_cuda_build"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads((out / "preflight.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    finding = checks["test_torch_cuda_build"]
    assert (finding["status"], finding["code"]) == ("FAIL", "JOB_PYTHON_UNUSABLE") and str(python) in finding["summary"]
    ddp = checks["test_ddp_step"]
    assert ddp["status"] == "SKIP" and str(python) in ddp["summary"], ddp
    assert "peer failed" not in result.stdout
