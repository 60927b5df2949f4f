"""The CUDA toolkit checks end to end: pytest with the preflight plugin (pytester's inline runs: no child
pytest), on this machine as it is and on fake nodes (``tests.fakes.fake_toolkit``), reading the JSON
report. What the checks start themselves still runs for real: the fake ``nvcc`` scripts, the torch probe
without a fake machine, and ``--slow``'s JIT build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from preflight.parse.nvcc import parse_nvcc_version
from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.fake_toolkit import SPEC_ENV
from tests.toolkit_fakes import capture, fake_nvcc, fake_tool, fake_toolkit

# inline runs, but the checks start children of their own (the torch probe, the fake nvcc and tools, --slow's
# JIT build): out of the fast lane
pytestmark = pytest.mark.e2e
CHECKS = (REPO_ROOT / "checks" / "test_cuda_toolkit.py").read_text()
CU128_ARCH = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"  # what torch's cu128 wheels carry (no sm_70)


class RunChecks(Protocol):
    """What the ``run_checks`` fixture gives a test: one inline run per call, each its own report."""

    def __call__(self, tmp_path: Path, *args: str, spec: dict[str, Any] | None = None, machine: str | None = None,
                 extra_env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]: ...


@pytest.fixture
def run_checks(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> RunChecks:
    """Run the toolkit checks in-process (on a fake NVML ``machine`` when given, the fake toolkit ``spec`` when
    given, with ``extra_env`` set); the report's checks by id (``test_x[gpu0]``)."""
    pytester.makepyfile(test_cuda_toolkit=CHECKS)

    def run(tmp_path: Path, *args: str, spec: dict[str, Any] | None = None, machine: str | None = None,
            extra_env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
        tmp_path.mkdir(parents=True, exist_ok=True)
        out = tmp_path / "reports"
        for name, value in (extra_env or {}).items():
            monkeypatch.setenv(name, value)
        plugin: list[str] = []
        monkeypatch.delenv(SPEC_ENV, raising=False)
        if spec is not None:
            spec_file = tmp_path / "node.json"
            spec_file.write_text(json.dumps(spec))
            monkeypatch.setenv(SPEC_ENV, str(spec_file))
            plugin = ["-p", "tests.fakes.fake_toolkit"]
        if machine is not None:
            plugin += ["-p", "tests.fakes.nvml_plugin", f"--fake-nvml={machine}"]
        result = pytester.runpytest("-p", "no:cacheprovider", *plugin, "--preflight-report-dir", str(out), *args)
        report_file = out / "preflight.json"
        assert report_file.exists(), result.stdout.str() + result.stderr.str()
        report = json.loads(report_file.read_text())
        validate_report(report)
        checks = {check["id"].split("::")[-1]: check for check in report["checks"]}
        assert not [c for c in checks.values() if c["status"] == "ERROR"], result.stdout.str()
        return checks

    return run


def _tools(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "tools"
    fake_tool(bin_dir, "ninja", "1.11.1")
    fake_tool(bin_dir, "c++", "c++ (GCC) 12.2.0")
    return bin_dir


def _spec(tmp_path: Path, torch_cuda: str | None, *, path: Sequence[Path] = (),
          arch: str = "sm_80 sm_86 sm_90", **env: str) -> dict[str, Any]:
    version = f"2.5.1+cu{torch_cuda.replace('.', '')}" if torch_cuda else "2.5.1+cpu"
    return {
        "torch": {"version": version, "cuda": torch_cuda, "arch": arch if torch_cuda else ""},
        "env": {"PATH": os.pathsep.join(str(p) for p in [*path, _tools(tmp_path)]), **env},
        "toolkit_glob": str(tmp_path / "cuda-*"),
    }


def test_this_machine_reports_cpu_torch_and_its_toolkit(tmp_path: Path, run_checks: RunChecks) -> None:
    import torch

    checks = run_checks(tmp_path)
    if torch.version.cuda is None:
        assert checks["test_torch_cuda_build"]["status"] == "SKIP"
        assert "CPU build" in checks["test_torch_cuda_build"]["summary"]
        toolkit = checks["test_cuda_toolkit_for_jit_builds"]
        assert toolkit["status"] == "SKIP" and "torch.utils.cpp_extension.CUDA_HOME is None" in toolkit["summary"]
    nvcc = shutil.which("nvcc")
    summary = checks["test_cuda_toolkit_for_jit_builds"]["summary"] + checks["test_cuda_home_matches_path"]["summary"]
    if nvcc:
        output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
        assert parse_nvcc_version(output).describe() in summary and nvcc in summary
    assert checks["test_deepspeed_accepts_toolkit"]["status"] == "SKIP"
    assert checks["test_deepspeed_jit_build"]["status"] == "SKIP"
    gpu_ids = [name for name in checks if name.startswith("test_gpu_arch_in_torch[")]
    assert gpu_ids == ["test_gpu_arch_in_torch[nogpu]"] or all("[gpu" in name for name in gpu_ids)


def test_this_machine_with_deepspeed_and_slow(tmp_path: Path, run_checks: RunChecks) -> None:
    """``--slow`` runs the real fresh JIT build; a g++ told to include a missing header makes it fail fast,
    and the verdict says what DeepSpeed really built (its CPU accelerator's op, with C++ only)."""
    import importlib.util

    wrapper = tmp_path / "bin" / "g++"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text('#!/bin/sh\nexec /usr/bin/g++ -include /nonexistent/preflight-missing.h "$@"\n')
    wrapper.chmod(0o755)
    checks = run_checks(tmp_path, "--preflight-with", "deepspeed", "--preflight-slow", extra_env={"CXX": str(wrapper)})
    jit = checks["test_deepspeed_jit_build"]
    if importlib.util.find_spec("deepspeed") is None:
        assert jit["status"] == "SKIP" and "DeepSpeed is not installed" in jit["summary"]
        return
    assert (jit["status"], jit["code"]) == ("FAIL", "DEEPSPEED_JIT_BUILD_FAILED"), jit["summary"]
    assert "cpu accelerator" in jit["summary"] and "preflight-missing.h: No such file or directory" in jit["summary"]
    assert checks["test_deepspeed_accelerator"]["status"] == "PASS"


def test_cpu_torch_on_an_8_gpu_node_fails(tmp_path: Path, run_checks: RunChecks) -> None:
    checks = run_checks(tmp_path, spec=_spec(tmp_path, None), machine="8x-h100-sxm")
    build = checks["test_torch_cuda_build"]
    assert build["status"] == "FAIL" and build["code"] == "TORCH_CPU_BUILD"
    assert "2.5.1+cpu" in build["summary"] and "550.54.15" in build["summary"] and "CUDA 12.4" in build["summary"]
    assert "whl/cu124" in build["remediation"]
    assert [f"test_gpu_arch_in_torch[gpu{i}]" in checks for i in range(8)] == [True] * 8
    assert checks["test_gpu_arch_in_torch[gpu3]"]["status"] == "SKIP"


def test_v100_node_with_a_cuda_12_8_torch_fails_per_gpu_and_on_the_driver(tmp_path: Path, run_checks: RunChecks) -> None:
    spec = _spec(tmp_path, "12.8", arch=CU128_ARCH)
    checks = run_checks(tmp_path, "-k", "gpu5 or driver", spec=spec, machine="8x-v100-sxm2")
    arch = checks["test_gpu_arch_in_torch[gpu5]"]
    assert arch["status"] == "FAIL" and arch["code"] == "TORCH_ARCH_UNSUPPORTED"
    assert "sm_70" in arch["summary"] and "2.5.1+cu128" in arch["summary"]
    assert "test_gpu_arch_in_torch[gpu0]" not in checks
    driver = checks["test_driver_supports_torch_cuda"]
    assert driver["status"] == "FAIL" and driver["code"] == "DRIVER_TOO_OLD_FOR_TORCH"
    assert "418.67" in driver["summary"] and "12.8" in driver["summary"]


def test_a10g_driver_runs_cuda_12_8_by_minor_version_compatibility_but_not_13_0(tmp_path: Path, run_checks: RunChecks) -> None:
    ok = run_checks(tmp_path, "-k", "driver or arch", spec=_spec(tmp_path, "12.8", arch=CU128_ARCH), machine="1x-a10g")
    assert ok["test_driver_supports_torch_cuda"]["status"] == "PASS"
    assert "minor version compatibility" in ok["test_driver_supports_torch_cuda"]["summary"]
    assert ok["test_gpu_arch_in_torch[gpu0]"]["status"] == "PASS"
    old = run_checks(tmp_path / "13", "-k", "driver", spec=_spec(tmp_path / "13", "13.0"), machine="1x-a10g")
    driver = old["test_driver_supports_torch_cuda"]
    assert driver["status"] == "FAIL" and "535.183.01" in driver["summary"] and "13.0" in driver["summary"]


def test_deepspeed_refuses_a_cuda_13_toolkit_for_a_cuda_12_8_torch(tmp_path: Path, run_checks: RunChecks) -> None:
    home = fake_toolkit(tmp_path / "cuda-13.0", "13.0")
    spec = _spec(tmp_path, "12.8", path=[home / "bin"], CUDA_HOME=str(home))
    checks = run_checks(tmp_path, "--preflight-with", "deepspeed", spec=spec, machine="8x-h100-sxm")
    ds = checks["test_deepspeed_accepts_toolkit"]
    assert ds["status"] == "FAIL" and ds["code"] == "DEEPSPEED_CUDA_MAJOR_MISMATCH"
    assert "13.0" in ds["summary"] and "12.8" in ds["summary"]
    toolkit = checks["test_cuda_toolkit_for_jit_builds"]
    assert toolkit["status"] == "WARN" and toolkit["code"] == "TOOLKIT_MAJOR_MISMATCH"
    assert "two CUDA runtimes in one process" in toolkit["summary"]
    spec["env"]["DS_SKIP_CUDA_CHECK"] = "1"
    skipped = run_checks(tmp_path / "skip", "--preflight-with", "deepspeed", "-k", "deepspeed", spec=spec,
                         machine="8x-h100-sxm")[
        "test_deepspeed_accepts_toolkit"
    ]
    assert skipped["status"] == "FAIL" and "DS_SKIP_CUDA_CHECK=1 does not change this" in skipped["summary"]


def test_ds_accelerator_cpu_inherited_on_a_gpu_node_is_flagged(tmp_path: Path, run_checks: RunChecks) -> None:
    spec = {**_spec(tmp_path, "12.8", arch=CU128_ARCH), "deepspeed": {"version": "0.19.8"}}
    spec["env"]["DS_ACCELERATOR"] = "cpu"
    check = run_checks(tmp_path, "-k", "accelerator", spec=spec, machine="8x-h100-sxm")["test_deepspeed_accelerator"]
    assert (check["status"], check["code"]) == ("WARN", "DEEPSPEED_ACCELERATOR_CPU")
    assert "8 GPU(s)" in check["summary"] and check["remediation"].startswith("unset DS_ACCELERATOR")


def test_missing_toolkit_is_informational_for_plain_ddp_and_fails_when_deepspeed_is_announced(tmp_path: Path, run_checks: RunChecks) -> None:
    spec = _spec(tmp_path, "12.4")
    plain = run_checks(tmp_path, spec=spec, machine="8x-h100-sxm")["test_cuda_toolkit_for_jit_builds"]
    assert plain["status"] == "SKIP" and "no CUDA toolkit" in plain["summary"] and "12.4" in plain["summary"]
    assert "plain DDP/FSDP need no toolkit" in plain["summary"]
    announced = run_checks(tmp_path / "ds", "--preflight-with", "DeepSpeed", "-k", "jit_builds", spec=spec,
                           machine="8x-h100-sxm")[
        "test_cuda_toolkit_for_jit_builds"
    ]
    assert announced["status"] == "FAIL" and announced["code"] == "CUDA_TOOLKIT_MISSING"
    cpu_node = run_checks(tmp_path / "cpu", "--preflight-with", "DeepSpeed", "-k", "jit_builds", spec=spec)[
        "test_cuda_toolkit_for_jit_builds"
    ]
    assert cpu_node["status"] == "SKIP" and "cpu accelerator here" in cpu_node["summary"]  # no GPU: C++ ops only


def test_cuda_home_and_path_disagree(tmp_path: Path, run_checks: RunChecks) -> None:
    home = fake_toolkit(tmp_path / "cuda-12.4", "12.4")
    fake_nvcc(tmp_path / "old" / "bin", capture("11.8"))
    spec = _spec(tmp_path, "12.4", path=[tmp_path / "old" / "bin"], CUDA_HOME=str(home))
    check = run_checks(tmp_path, "-k", "path", spec=spec)["test_cuda_home_matches_path"]
    assert check["status"] == "WARN" and check["code"] == "CUDA_HOME_PATH_DISAGREE"
    assert "12.4" in check["summary"] and "11.8" in check["summary"]


def test_unknown_framework_is_a_usage_error(tmp_path: Path, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cuda_toolkit=CHECKS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--preflight-with", "horovod",
                                "--preflight-report-dir", str(tmp_path))
    assert result.ret == 4 and "unknown framework 'horovod'" in result.stderr.str()
