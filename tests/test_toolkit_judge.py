"""Every toolkit verdict, produced from fake nvcc/CUDA trees, fake torch builds and fake drivers."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from preflight.judge.cuda_runtime import (
    DriverFacts,
    GpuCapability,
    judge_driver_for_torch,
    judge_gpu_arch,
    judge_torch_build,
)
from preflight.judge.toolkit import (
    judge_build_tools,
    judge_cuda_home_vs_path,
    judge_deepspeed_accelerator,
    judge_deepspeed_cuda,
    judge_toolkit,
)
from preflight.outcome import Status, Verdict
from preflight.probe.command import run_command
from preflight.probe.deepspeed import DeepSpeedFacts, DeepSpeedRule
from preflight.probe.toolkit import ToolkitFacts, probe_toolkit, probe_torch
from tests.toolkit_fakes import capture, fake_nvcc, fake_tool, fake_toolkit, fake_torch, path_env, write_executable

NOWHERE = "/nonexistent/preflight/cuda"
H100 = GpuCapability(0, "NVIDIA H100 80GB HBM3", (9, 0))
B200 = GpuCapability(3, "NVIDIA B200", (10, 0))
TORCH_124 = probe_torch(fake_torch("2.4.1+cu124", "12.4", arch="sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"))
TORCH_CPU = probe_torch(fake_torch("2.13.0+cpu", None))


def _status(verdict: Verdict, status: Status, code: str | None = None) -> Verdict:
    assert verdict.status is status, verdict
    assert verdict.code == code, verdict
    return verdict


def _names(verdict: Verdict, *texts: str) -> None:
    for text in texts:
        assert text in verdict.summary, f"{text!r} not in {verdict.summary!r}"


def _facts(
    tmp_path: Path,
    torch_cuda: str | None = "12.4",
    home: str | None = None,
    path: str | None = None,
    headers: bool = True,
    tools: bool = True,
    **env: str,
) -> ToolkitFacts:
    """Facts from fakes: a CUDA_HOME tree at release ``home``, a PATH nvcc at release ``path``."""
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if tools:
        fake_tool(bin_dir, "ninja", "1.11.1")
        fake_tool(bin_dir, "c++", "c++ (GCC) 12.2.0")
    folders = [bin_dir]
    if path:
        fake_nvcc(tmp_path / f"path-{path}" / "bin", capture(path))
        folders.insert(0, tmp_path / f"path-{path}" / "bin")
    if home:
        env["CUDA_HOME"] = str(fake_toolkit(tmp_path / f"cuda-{home}", home, headers=headers))
    version = f"2.4.1+cu{torch_cuda.replace('.', '')}" if torch_cuda else "2.13.0+cpu"
    return _no_deepspeed(probe_toolkit(
        path_env(*folders, **env), runner=run_command, torch=probe_torch(fake_torch(version, torch_cuda, arch="sm_80 sm_90")),
        toolkit_glob=str(tmp_path / "cuda-*"), default_cuda_home=NOWHERE,
    ))


def _no_deepspeed(facts: ToolkitFacts) -> ToolkitFacts:
    """The node without DeepSpeed (the real probe would find the DeepSpeed installed for the tests)."""
    return dataclasses.replace(facts, deepspeed=DeepSpeedFacts(version=None, skip_cuda_check=None))


def _with_deepspeed(facts: ToolkitFacts, version: str = "0.16.9", skip: str | None = None,
                    rule: DeepSpeedRule | None = None) -> ToolkitFacts:
    return dataclasses.replace(facts, deepspeed=DeepSpeedFacts(version=version, skip_cuda_check=skip, rule=rule))


# --- torch build ---------------------------------------------------------------------------

def test_cpu_torch_on_gpu_node_fails_naming_both() -> None:
    verdict = _status(judge_torch_build(TORCH_CPU, 8, DriverFacts("570.124.06", (12, 8))), Status.FAIL, "TORCH_CPU_BUILD")
    _names(verdict, "2.13.0+cpu", "570.124.06", "CUDA 12.8", "8 NVIDIA GPU")
    assert verdict.remediation is not None and "whl/cu128" in verdict.remediation and "torch==2.13.0" in verdict.remediation


def test_torch_build_other_outcomes() -> None:
    _names(_status(judge_torch_build(TORCH_CPU, 0), Status.SKIP), "no NVIDIA GPU visible", "CPU build")
    _status(judge_torch_build(TORCH_124, 4), Status.PASS)
    _status(judge_torch_build(TORCH_124, None), Status.SKIP)
    broken = dataclasses.replace(TORCH_CPU, version=None, problem="No module named 'torch'")
    _status(judge_torch_build(broken, 2), Status.FAIL, "TORCH_NOT_IMPORTABLE")


# --- driver ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("torch_cuda", "driver", "status", "texts"),
    [
        ("12.1", DriverFacts("550.54.15", (12, 4)), Status.PASS, ["550.54.15", "12.1"]),
        ("12.4", DriverFacts("535.104.05", (12, 2)), Status.PASS, ["535.104.05", "12.4", "minor version compatibility"]),
        ("12.4", DriverFacts("550.54.14", None), Status.PASS, ["550.54.14", "12.4"]),
        ("12.6", DriverFacts(None, (12, 2)), Status.PASS, ["CUDA 12.2", "12.6"]),
        ("13.0", DriverFacts("535.104.05", (12, 2)), Status.FAIL, ["535.104.05", "13.0", "580.65.06"]),
        ("11.8", DriverFacts("450.36.06", (11, 0)), Status.FAIL, ["450.36.06", "11.8", "450.80.02"]),
        ("12.1", DriverFacts("470.42.01", None), Status.FAIL, ["470.42.01", "12.1"]),
        ("10.2", DriverFacts("418.87.01", (10, 1)), Status.FAIL, ["418.87.01", "10.2", "440.33"]),
    ],
    ids=["newer-driver", "mvc", "version-only", "cuda-only-mvc", "major-too-old", "below-mvc", "r470-cuda12", "pre-11"],
)
def test_driver_for_torch(torch_cuda: str, driver: DriverFacts, status: Status, texts: list[str]) -> None:
    torch = probe_torch(fake_torch(f"2.4.1+cu{torch_cuda.replace('.', '')}", torch_cuda))
    verdict = judge_driver_for_torch(torch, driver, 8)
    _status(verdict, status, "DRIVER_TOO_OLD_FOR_TORCH" if status is Status.FAIL else None)
    _names(verdict, *texts)


def test_driver_fail_suggests_wheel_for_driver() -> None:
    torch = probe_torch(fake_torch("2.9.0+cu130", "13.0"))
    verdict = judge_driver_for_torch(torch, DriverFacts("570.124.06", (12, 8)), 2)
    assert verdict.remediation is not None and "whl/cu128" in verdict.remediation and "580.65.06" in verdict.remediation


def test_driver_skips() -> None:
    _status(judge_driver_for_torch(TORCH_124, DriverFacts("550.54.15", (12, 4)), 0), Status.SKIP)
    _names(_status(judge_driver_for_torch(TORCH_CPU, DriverFacts("550.54.15", (12, 4)), 2), Status.SKIP), "CPU build")
    _names(_status(judge_driver_for_torch(TORCH_124, DriverFacts(None, None, "NVML_ERROR_LIB"), 2), Status.SKIP), "NVML_ERROR_LIB")


# --- GPU architecture ------------------------------------------------------------------------

def _torch_arch(arch: str, cuda: str = "12.4") -> object:
    return probe_torch(fake_torch("2.5.1+cu124", cuda, arch=arch))


def test_arch_supported_and_same_major_newer_minor() -> None:
    _names(_status(judge_gpu_arch(TORCH_124, H100), Status.PASS), "sm_90", "GPU0")
    a10g = GpuCapability(1, "NVIDIA A10G", (8, 6))
    verdict = _status(judge_gpu_arch(probe_torch(fake_torch("2.1.0", "12.1", arch="sm_70 sm_80")), a10g), Status.PASS)
    _names(verdict, "sm_80")


def test_arch_unsupported_fails_naming_gpu_and_torch() -> None:
    verdict = _status(judge_gpu_arch(TORCH_124, B200), Status.FAIL, "TORCH_ARCH_UNSUPPORTED")
    _names(verdict, "GPU3", "sm_100", "10.0", "2.4.1+cu124", "sm_90")
    assert verdict.remediation is not None and "whl/cu128" in verdict.remediation


def test_arch_ptx_only_warns_or_fails_with_old_driver() -> None:
    torch = probe_torch(fake_torch("2.4.1+cu124", "12.4", arch="sm_80 sm_90 compute_90"))
    verdict = _status(judge_gpu_arch(torch, B200, DriverFacts("570.124.06", (12, 8))), Status.WARN, "TORCH_ARCH_PTX_JIT")
    _names(verdict, "compute_90", "sm_100")
    old = judge_gpu_arch(torch, B200, DriverFacts("535.104.05", (12, 2)))
    _names(_status(old, Status.FAIL, "TORCH_ARCH_PTX_DRIVER_TOO_OLD"), "535.104.05", "12.4")


def test_arch_specific_and_integrated_need_exact_match() -> None:
    torch = probe_torch(fake_torch("2.7.0", "12.8", arch="sm_90a compute_90a"))
    _status(judge_gpu_arch(torch, B200), Status.FAIL, "TORCH_ARCH_UNSUPPORTED")
    _status(judge_gpu_arch(torch, H100), Status.PASS)
    orin = GpuCapability(0, "Orin", (8, 7))
    _status(judge_gpu_arch(probe_torch(fake_torch("2.4.1", "12.4", arch="sm_80 sm_86")), orin), Status.FAIL, "TORCH_ARCH_UNSUPPORTED")


def test_arch_skips_on_cpu_torch() -> None:
    _names(_status(judge_gpu_arch(TORCH_CPU, H100), Status.SKIP), "CPU build", "GPU0")


# --- toolkit presence ------------------------------------------------------------------------

def test_toolkit_missing_is_informational_without_a_jit_build_and_fails_with_one(tmp_path: Path) -> None:
    facts = _facts(tmp_path)
    plain = _status(judge_toolkit(facts), Status.SKIP)
    _names(plain, "no CUDA toolkit for torch's CUDA 12.4", "plain DDP/FSDP need no toolkit", "--with deepspeed")
    for announced in (judge_toolkit(facts, ("deepspeed",)), judge_toolkit(facts, ("cpp-extensions",)),
                      judge_toolkit(_with_deepspeed(facts))):
        failed = _status(announced, Status.FAIL, "CUDA_TOOLKIT_MISSING")
        assert failed.remediation is not None and "cuda-toolkit-12-4" in failed.remediation


def test_toolkit_not_needed_when_deepspeed_ops_are_prebuilt(tmp_path: Path) -> None:
    facts = _facts(tmp_path)
    prebuilt = dataclasses.replace(facts, deepspeed=DeepSpeedFacts(
        "0.19.8", None, prebuilt_ops=("cpu_adam", "fused_adam"), prebuilt_cuda="12.4", prebuilt_torch="2.4",
        prebuilt_accelerator="cuda"))
    _names(_status(judge_toolkit(prebuilt), Status.SKIP), "pre-built (cpu_adam, fused_adam)")
    _status(judge_toolkit(prebuilt, ("cpp-extensions",)), Status.FAIL, "CUDA_TOOLKIT_MISSING")
    for_cpu = dataclasses.replace(prebuilt, deepspeed=dataclasses.replace(prebuilt.deepspeed,
                                                                          prebuilt_accelerator="cpu"))
    _status(judge_toolkit(for_cpu), Status.FAIL, "CUDA_TOOLKIT_MISSING")  # load() ignores ops built for cpu


def test_toolkit_pass_and_cpu_torch_skip(tmp_path: Path) -> None:
    facts = _facts(tmp_path, home="12.4")
    _names(_status(judge_toolkit(facts), Status.PASS), "12.4.131", "CUDA 12.4")
    cpu = _facts(tmp_path / "cpu", torch_cuda=None, path="13.0")
    _names(_status(judge_toolkit(cpu), Status.SKIP), "CPU build", "CUDA 13.0 (V13.0", "CUDA_HOME would resolve")


def test_toolkit_without_headers_points_at_installed_tree(tmp_path: Path) -> None:
    fake_toolkit(tmp_path / "cuda-12.4", "12.4")
    write_executable(tmp_path / "wrapper" / "bin" / "nvcc", f"exec '{tmp_path / 'cuda-12.4' / 'bin' / 'nvcc'}' \"$@\"\n")
    facts = _no_deepspeed(probe_toolkit(
        path_env(tmp_path / "wrapper" / "bin"), runner=run_command, torch=probe_torch(fake_torch("2.4.1+cu124", "12.4")),
        toolkit_glob=str(tmp_path / "cuda-*"), default_cuda_home=NOWHERE,
    ))
    _status(judge_toolkit(facts), Status.SKIP)
    verdict = _status(judge_toolkit(facts, ("deepspeed",)), Status.FAIL, "CUDA_HOME_WITHOUT_HEADERS")
    _names(verdict, str(tmp_path / "wrapper"), "12.4")
    assert verdict.remediation == (f"export CUDA_HOME={tmp_path / 'cuda-12.4'}   # CUDA 12.4 (V12.4.131) at "
                                   f"{tmp_path / 'cuda-12.4' / 'bin' / 'nvcc'}, already installed")


def test_toolkit_home_without_nvcc_and_broken_nvcc(tmp_path: Path) -> None:
    empty = tmp_path / "empty-cuda"
    empty.mkdir()
    facts = _facts(tmp_path, CUDA_HOME=str(empty))
    _names(_status(judge_toolkit(facts), Status.SKIP), str(empty), "12.4", "not needed here")
    _names(_status(judge_toolkit(facts, ("cpp-extensions",)), Status.FAIL, "CUDA_HOME_WITHOUT_NVCC"), str(empty))
    broken = tmp_path / "broken"
    write_executable(broken / "bin" / "nvcc", "echo 'error while loading shared libraries' >&2\nexit 127\n")
    facts = _facts(tmp_path / "b", CUDA_HOME=str(broken))
    verdict = _status(judge_toolkit(facts, ("deepspeed",)), Status.FAIL, "NVCC_UNUSABLE")
    assert "shared libraries" in verdict.evidence["nvcc --version"]


def test_toolkit_major_mismatch_warns_of_two_runtimes_not_of_a_refusal(tmp_path: Path) -> None:
    facts = _facts(tmp_path, home="13.0")
    verdict = _status(judge_toolkit(facts, ("cpp-extensions",)), Status.WARN, "TOOLKIT_MAJOR_MISMATCH")
    _names(verdict, "13.0", "12.4", "two CUDA runtimes in one process", "compiles and loads",
           "ahead-of-time setup.py build (BuildExtension) refuses it")
    assert "refuses to build" not in verdict.summary
    _names(_status(judge_toolkit(facts), Status.SKIP), "two CUDA runtimes", "plain DDP/FSDP need no toolkit")


def test_a_cpu_node_with_a_cuda_torch_needs_no_toolkit_for_deepspeed(tmp_path: Path) -> None:
    """What .ci/old_torch.sh found: torch 2.4.1+cu121, nvcc 13.0, no GPU. DeepSpeed picks its CPU
    accelerator there and builds C++ ops only, so the CUDA rules do not apply (a false NOT READY before)."""
    facts = _with_deepspeed(_facts(tmp_path, torch_cuda="12.1", home="13.0"), version="0.19.8")
    _names(_status(judge_deepspeed_cuda(facts, gpus=0), Status.SKIP), "cpu accelerator", "no CUDA device visible")
    _names(_status(judge_toolkit(facts, gpus=0), Status.SKIP), "builds C++ ops only, without nvcc")
    _status(judge_toolkit(facts, ("cpp-extensions",), gpus=0), Status.WARN, "TOOLKIT_MAJOR_MISMATCH")
    _status(judge_deepspeed_cuda(facts, gpus=8), Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH")
    forced = dataclasses.replace(facts, deepspeed=dataclasses.replace(facts.deepspeed, accelerator_env="cuda"))
    _status(judge_deepspeed_cuda(forced, gpus=0), Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH")
    bare = dataclasses.replace(_facts(tmp_path / "bare", torch_cuda="12.1", tools=False), deepspeed=facts.deepspeed)
    _status(judge_build_tools(bare, gpus=0), Status.FAIL, "BUILD_TOOLS_MISSING")  # C++ ops still need both


def test_toolkit_minor_mismatch_passes(tmp_path: Path) -> None:
    verdict = _status(judge_toolkit(_facts(tmp_path, torch_cuda="12.8", home="12.4"), ("deepspeed",)), Status.PASS)
    _names(verdict, "minor versions differ")


# --- CUDA_HOME vs PATH -------------------------------------------------------------------------

def test_cuda_home_and_path_disagree(tmp_path: Path) -> None:
    verdict = _status(judge_cuda_home_vs_path(_facts(tmp_path, home="12.4", path="11.8")), Status.WARN, "CUDA_HOME_PATH_DISAGREE")
    _names(verdict, "12.4", "11.8", str(tmp_path / "cuda-12.4"), str(tmp_path / "path-11.8" / "bin" / "nvcc"))


def test_cuda_home_and_path_agree(tmp_path: Path) -> None:
    _status(judge_cuda_home_vs_path(_facts(tmp_path, path="12.4")), Status.PASS)
    _status(judge_cuda_home_vs_path(_facts(tmp_path / "same", home="12.4", path="12.4")), Status.PASS)
    _status(judge_cuda_home_vs_path(_facts(tmp_path / "none")), Status.SKIP)
    _status(judge_cuda_home_vs_path(_facts(tmp_path / "home-only", home="12.1")), Status.PASS)
    stray = tmp_path / "stray"
    fake_nvcc(stray, capture("12.4"))  # an nvcc not inside a <root>/bin folder
    facts = probe_toolkit(path_env(stray), runner=run_command, torch=probe_torch(fake_torch("2.4.1", "12.4")), toolkit_glob=NOWHERE,
                          default_cuda_home=NOWHERE)
    verdict = _status(judge_cuda_home_vs_path(facts), Status.WARN, "CUDA_HOME_PATH_DISAGREE")
    _names(verdict, str(tmp_path), "has no bin/nvcc", "12.4")


# --- DeepSpeed rule -----------------------------------------------------------------------------

OLD_TABLE = DeepSpeedRule({11: ("11.0", "11.8"), 12: ("12.0", "12.1", "12.2", "12.3", "12.4", "12.5")}, True, "builder.py")
OLD_TABLE_JIT_CHECKED = dataclasses.replace(OLD_TABLE, checked_in_jit=True)


@pytest.mark.parametrize(
    ("toolkit", "torch_cuda", "rule", "status", "code"),
    [
        ("12.4", "12.4", None, Status.PASS, None),
        ("12.1", "12.4", None, Status.PASS, None),
        ("12.4", "12.8", None, Status.PASS, None),
        ("12.4", "12.8", OLD_TABLE, Status.WARN, "DEEPSPEED_CUDA_MINOR_MISMATCH"),
        ("12.4", "12.8", OLD_TABLE_JIT_CHECKED, Status.FAIL, "DEEPSPEED_CUDA_MISMATCH"),
        ("13.0", "12.8", None, Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH"),
        ("11.8", "12.1", None, Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH"),
    ],
    ids=["equal", "minor-table", "minor-table-master", "minor-refused-aot-only", "minor-refused-jit-checked",
         "major-13-vs-12", "major-11-vs-12"],
)
def test_deepspeed_rule(tmp_path: Path, toolkit: str, torch_cuda: str, rule: DeepSpeedRule | None,
                        status: Status, code: str | None) -> None:
    facts = _with_deepspeed(_facts(tmp_path, torch_cuda=torch_cuda, home=toolkit), rule=rule)
    verdict = _status(judge_deepspeed_cuda(facts), status, code)
    _names(verdict, toolkit, torch_cuda)


def test_a_minor_mismatch_says_it_bites_only_ahead_of_time_builds(tmp_path: Path) -> None:
    facts = _with_deepspeed(_facts(tmp_path, torch_cuda="12.8", home="12.4"), rule=OLD_TABLE)
    verdict = _status(judge_deepspeed_cuda(facts), Status.WARN, "DEEPSPEED_CUDA_MINOR_MISMATCH")
    _names(verdict, "JIT builds", "accept it", "ahead-of-time build (DS_BUILD_OPS=1", "CUDAMismatchException")
    assert verdict.remediation is not None and verdict.remediation.startswith("Nothing to do for JIT builds")
    assert "DS_SKIP_CUDA_CHECK=1 DS_BUILD_OPS=1 pip install" in verdict.remediation  # the path the variable acts on
    skipped = _status(judge_deepspeed_cuda(_with_deepspeed(facts, skip="1", rule=OLD_TABLE)), Status.PASS)
    _names(skipped, "DS_SKIP_CUDA_CHECK=1 (set)")


def test_a_major_mismatch_fails_and_ds_skip_cuda_check_does_not_help(tmp_path: Path) -> None:
    facts = _facts(tmp_path, torch_cuda="12.8", home="13.0")
    plain = _status(judge_deepspeed_cuda(_with_deepspeed(facts)), Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH")
    _names(plain, "13.0", "12.8", "JIT build at the first step links the CUDA 13 runtime")
    assert plain.remediation is not None and "DS_SKIP_CUDA_CHECK" not in plain.remediation
    skipped = _status(judge_deepspeed_cuda(_with_deepspeed(facts, skip="1")), Status.FAIL,
                      "DEEPSPEED_CUDA_MAJOR_MISMATCH")
    _names(skipped, "DS_SKIP_CUDA_CHECK=1 does not change this")
    assert _with_deepspeed(facts, skip="true").deepspeed.skip_enabled is False


def test_old_deepspeed_that_checks_in_jit_honours_or_ignores_the_escape(tmp_path: Path) -> None:
    facts = _facts(tmp_path, torch_cuda="12.8", home="12.4")
    warned = _status(judge_deepspeed_cuda(_with_deepspeed(facts, skip="1", rule=OLD_TABLE_JIT_CHECKED)), Status.WARN,
                     "DEEPSPEED_CUDA_CHECK_SKIPPED")
    _names(warned, "12.4", "12.8")
    no_escape = DeepSpeedRule({11: ("11.0", "11.8")}, False, "old builder.py", checked_in_jit=True)
    ignored = _status(judge_deepspeed_cuda(_with_deepspeed(facts, "0.8.1", "1", no_escape)), Status.FAIL,
                      "DEEPSPEED_CUDA_MISMATCH")
    _names(ignored, "ignores it", "0.8.1")


def test_deepspeed_mismatch_points_at_matching_toolkit(tmp_path: Path) -> None:
    fake_toolkit(tmp_path / "cuda-12.8", "12.8")
    facts = _with_deepspeed(_facts(tmp_path, torch_cuda="12.8", home="13.0"))
    verdict = _status(judge_deepspeed_cuda(facts), Status.FAIL, "DEEPSPEED_CUDA_MAJOR_MISMATCH")
    assert verdict.remediation is not None and verdict.remediation.startswith(f"export CUDA_HOME={tmp_path / 'cuda-12.8'}")


def test_deepspeed_skips(tmp_path: Path) -> None:
    facts = _facts(tmp_path, home="12.4")
    _status(judge_deepspeed_cuda(facts), Status.SKIP)
    _names(_status(judge_deepspeed_cuda(_facts(tmp_path / "c", torch_cuda=None, path="13.0"), ("deepspeed",)), Status.SKIP), "CPU")
    _status(judge_deepspeed_cuda(_with_deepspeed(_facts(tmp_path / "n"))), Status.SKIP)


def test_the_installed_deepspeed_rule_is_read_from_its_own_builder() -> None:
    """The real DeepSpeed of the test extras: its table, its escape, and no version check on the JIT path."""
    import importlib.metadata
    import os

    from preflight.probe.deepspeed import probe_deepspeed

    facts = probe_deepspeed(dict(os.environ))
    assert facts.version == importlib.metadata.version("deepspeed") and facts.rule is not None, facts
    assert facts.rule.honours_skip_env and "13" not in {str(k) for k in facts.rule.minor_mismatch_ok}
    assert facts.rule.minor_mismatch_ok[12][-1] == "12.9" and facts.rule.checked_in_jit is False


_DS_TEXT = re.compile(r"Installed CUDA version (\d+\.\d+) does not match the version torch was compiled with (\d+\.\d+)")


@pytest.mark.parametrize(
    ("name", "rule", "status"),
    [
        ("error-deepspeed-CUDAMismatchException-12.2-vs-11.7.txt", None, Status.FAIL),
        ("warning-deepspeed-minor-mismatch-accepted-11.7-vs-11.8-cpu_adam.txt", None, Status.PASS),
        ("error-deepspeed-old-Exception-12.3-vs-12.1.txt",
         DeepSpeedRule({11: ("11.0", "11.8")}, False, "old", checked_in_jit=True), Status.FAIL),
    ],
)
def test_deepspeed_rule_agrees_with_real_messages(tmp_path: Path, shared_fixtures: Path, name: str,
                                                   rule: DeepSpeedRule | None, status: Status) -> None:
    match = _DS_TEXT.search((shared_fixtures / "ds_report" / name).read_text())
    assert match, name
    toolkit, torch_cuda = match.groups()
    if toolkit.split(".")[0] not in {"11", "12", "13"} or torch_cuda.split(".")[0] not in {"11", "12", "13"}:
        pytest.fail(f"no nvcc capture family for {toolkit}/{torch_cuda}")
    home = tmp_path / f"cuda-{toolkit}"
    write_executable(home / "bin" / "nvcc", f"echo 'Cuda compilation tools, release {toolkit}, V{toolkit}.1'\n")
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime_api.h").write_text("")
    facts = _with_deepspeed(_facts(tmp_path, torch_cuda=torch_cuda, CUDA_HOME=str(home)), rule=rule)
    verdict = judge_deepspeed_cuda(facts)
    assert verdict.status is status
    _names(verdict, toolkit, torch_cuda)


# --- build tools -----------------------------------------------------------------------------

def test_build_tools(tmp_path: Path) -> None:
    ok = _facts(tmp_path, home="12.4")
    _names(_status(judge_build_tools(ok), Status.PASS), "1.11.1", "12.2.0")
    bare = _facts(tmp_path / "bare", home="12.4", tools=False)
    failed = _status(judge_build_tools(_with_deepspeed(bare)), Status.FAIL, "BUILD_TOOLS_MISSING")
    _names(failed, "ninja: not found", "c++: not found", "0.16.9")
    assert failed.remediation is not None and "pip install ninja" in failed.remediation
    _status(judge_build_tools(bare, ("deepspeed",)), Status.FAIL, "BUILD_TOOLS_MISSING")
    _status(judge_build_tools(bare), Status.WARN, "CXX_COMPILER_MISSING")
    no_ninja = dataclasses.replace(ok, ninja=bare.ninja)
    _names(_status(judge_build_tools(no_ninja), Status.PASS), "ninja: not found")


def test_deepspeed_prebuilt_ops_for_other_cuda(tmp_path: Path) -> None:
    facts = _facts(tmp_path, torch_cuda="12.4", home="12.4")
    prebuilt = dataclasses.replace(
        facts, deepspeed=DeepSpeedFacts("0.14.4", None, prebuilt_ops=("cpu_adam", "fused_adam"), prebuilt_cuda="11.8")
    )
    verdict = _status(judge_deepspeed_cuda(prebuilt), Status.FAIL, "DEEPSPEED_PREBUILT_CUDA_MISMATCH")
    _names(verdict, "11.8", "12.4", "cpu_adam", "CUDA version mismatch!")
    same = dataclasses.replace(
        facts, deepspeed=DeepSpeedFacts("0.14.4", None, prebuilt_ops=("cpu_adam",), prebuilt_cuda="12.4")
    )
    passed_verdict = _status(judge_deepspeed_cuda(same), Status.PASS)
    assert passed_verdict.evidence["pre-built ops (not JIT-built)"] == "cpu_adam"


def test_deepspeed_prebuilt_for_another_torch_is_the_real_version_mismatch(tmp_path: Path) -> None:
    """builder.py validate_torch_version: the install's torch major.minor against the running one."""
    facts = _facts(tmp_path, torch_cuda="12.4")  # no toolkit at all: pre-built ops need none
    ds = DeepSpeedFacts("0.19.8", None, prebuilt_ops=("fused_adam",), prebuilt_cuda="12.4", prebuilt_torch="2.3",
                        prebuilt_accelerator="cuda")
    verdict = _status(judge_deepspeed_cuda(dataclasses.replace(facts, deepspeed=ds)), Status.FAIL,
                      "DEEPSPEED_PREBUILT_TORCH_MISMATCH")
    _names(verdict, "torch 2.3", "2.4.1+cu124", "PyTorch version mismatch!")
    fine = dataclasses.replace(facts, deepspeed=dataclasses.replace(ds, prebuilt_torch="2.4"))
    _names(_status(judge_deepspeed_cuda(fine), Status.PASS), "pre-built ops (fused_adam)", "no toolkit needed")
    other = dataclasses.replace(facts, deepspeed=dataclasses.replace(ds, prebuilt_accelerator="cpu"))
    _status(judge_deepspeed_cuda(other), Status.SKIP)  # built for the CPU accelerator: ignored, JIT on cuda


def test_build_tools_are_not_needed_for_prebuilt_ops(tmp_path: Path) -> None:
    bare = _facts(tmp_path, tools=False)
    ds = DeepSpeedFacts("0.19.8", None, prebuilt_ops=("cpu_adam", "fused_adam"), prebuilt_torch="2.4",
                        prebuilt_accelerator="cuda")
    _names(_status(judge_build_tools(dataclasses.replace(bare, deepspeed=ds)), Status.PASS),
           "without ninja or a compiler")
    _status(judge_build_tools(dataclasses.replace(bare, deepspeed=ds), ("cpp-extensions",)), Status.FAIL,
            "BUILD_TOOLS_MISSING")


@pytest.mark.parametrize(
    ("value", "gpus", "status", "code"),
    [(None, 8, Status.PASS, None), ("cpu", 8, Status.WARN, "DEEPSPEED_ACCELERATOR_CPU"), ("cpu", 0, Status.PASS, None),
     ("cuda", 8, Status.PASS, None), ("cuda", 0, Status.WARN, "DEEPSPEED_ACCELERATOR_CUDA_WITHOUT_GPU"),
     ("tpu", 8, Status.FAIL, "DEEPSPEED_ACCELERATOR_UNKNOWN"),
     ("xpu", 8, Status.WARN, "DEEPSPEED_ACCELERATOR_OVERRIDDEN")],
)
def test_ds_accelerator_inherited_from_the_environment(tmp_path: Path, value: str | None, gpus: int, status: Status,
                                                       code: str | None) -> None:
    facts = dataclasses.replace(_facts(tmp_path), deepspeed=DeepSpeedFacts("0.19.8", None, accelerator_env=value))
    verdict = _status(judge_deepspeed_accelerator(facts, gpus), status, code)
    if code == "DEEPSPEED_ACCELERATOR_CPU":
        _names(verdict, "8 GPU(s)", "CPU_Accelerator", "trains on the CPU")
        assert verdict.remediation is not None and verdict.remediation.startswith("unset DS_ACCELERATOR")
    _status(judge_deepspeed_accelerator(_facts(tmp_path / "none"), gpus), Status.SKIP)


def test_cuda_from_nvml() -> None:
    from preflight.judge.cuda_runtime import cuda_from_nvml

    assert cuda_from_nvml(12040) == (12, 4)
    assert cuda_from_nvml(13000) == (13, 0)
    assert cuda_from_nvml(11080) == (11, 8)
    assert cuda_from_nvml(0) is None and cuda_from_nvml(None) is None


def test_major_mismatch_reported_before_missing_headers(tmp_path: Path) -> None:
    fake_toolkit(tmp_path / "cuda-12.8", "12.8")
    root = fake_toolkit(tmp_path / "wrapped", "13.0", headers=False)
    facts = probe_toolkit(
        path_env(root / "bin"), runner=run_command, torch=probe_torch(fake_torch("2.9.0+cu128", "12.8")),
        toolkit_glob=str(tmp_path / "cuda-*"), default_cuda_home=NOWHERE,
    )
    verdict = _status(judge_toolkit(_no_deepspeed(facts), ("deepspeed",)), Status.WARN, "TOOLKIT_MAJOR_MISMATCH")
    _names(verdict, "13.0", "12.8", "cuda_runtime_api.h is missing too")
    assert verdict.remediation is not None and verdict.remediation.startswith(f"export CUDA_HOME={tmp_path / 'cuda-12.8'}")
