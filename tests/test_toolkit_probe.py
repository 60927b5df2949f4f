"""Toolkit probe against fake nvcc executables, fake CUDA trees, fake torch and fake DeepSpeed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from preflight.probe.command import CommandResult, run_command
from preflight.probe.deepspeed import parse_deepspeed_rule, probe_deepspeed
from preflight.probe.toolkit import (
    nvcc_on_path,
    probe_compiler,
    probe_nvcc,
    probe_tool,
    probe_toolkit,
    probe_torch,
    resolve_cuda_home,
)
from tests.conftest import REPO_ROOT
from tests.toolkit_fakes import (
    NVCC_CAPTURES,
    capture,
    fake_deepspeed,
    fake_nvcc,
    fake_tool,
    fake_toolkit,
    fake_torch,
    path_env,
    write_executable,
)

CAPTURES = sorted(NVCC_CAPTURES.glob("nvcc-*.txt")) if NVCC_CAPTURES.is_dir() else []
NOWHERE = "/nonexistent/preflight/cuda"


def _which(table: Mapping[str, str]) -> Callable[[str], str | None]:
    return lambda name: table.get(name)


@pytest.mark.parametrize(
    ("env", "which", "expected"),
    [
        ({"CUDA_HOME": "/opt/cuda", "CUDA_PATH": "/x"}, {}, ("/opt/cuda", "env CUDA_HOME")),
        ({"CUDA_PATH": "/opt/cuda-path"}, {}, ("/opt/cuda-path", "env CUDA_PATH")),
        ({"CUDA_HOME": "", "CUDA_PATH": "/opt/p"}, {}, ("/opt/p", "env CUDA_PATH")),
        ({"CUDA_PATH": ""}, {"nvcc": "/usr/bin/nvcc"}, (None, "env CUDA_PATH set but empty")),
        ({"CUDA_HOME": ""}, {"nvcc": "/usr/local/cuda-12.4/bin/nvcc"}, ("/usr/local/cuda-12.4", None)),
        ({}, {"nvcc": "/usr/bin/nvcc"}, ("/usr", None)),
    ],
    ids=["cuda-home-wins", "cuda-path", "empty-home-falls-to-path", "empty-cuda-path", "empty-home-which", "which"],
)
def test_resolve_cuda_home_order(env: dict[str, str], which: dict[str, str], expected: tuple[str | None, str | None]) -> None:
    path, how = resolve_cuda_home(env, which=_which(which), exists=lambda _: False)
    assert path == expected[0]
    if expected[1] is not None:
        assert how == expected[1]
    else:
        assert how.startswith("derived from the first nvcc on PATH")


def test_resolve_cuda_home_default_and_none() -> None:
    assert resolve_cuda_home({}, which=_which({}), exists=lambda p: p == "/usr/local/cuda") == (
        "/usr/local/cuda",
        "default /usr/local/cuda",
    )
    path, how = resolve_cuda_home({}, which=_which({}), exists=lambda _: False)
    assert path is None and how.startswith("not found")


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_probe_nvcc_reads_every_capture(path: Path, tmp_path: Path) -> None:
    nvcc = fake_nvcc(tmp_path / "bin", path)
    probe = probe_nvcc(str(nvcc), run_command)
    assert probe.problem is None
    assert probe.version is not None
    assert path.name.startswith(f"nvcc-{probe.version.release_text}-V{probe.version.full_text}")
    assert "Cuda compilation tools" in probe.output


def test_probe_nvcc_failures_are_values(tmp_path: Path) -> None:
    broken = write_executable(tmp_path / "a" / "nvcc", "echo 'libcudart.so: cannot open shared object' >&2\nexit 127\n")
    garbage = write_executable(tmp_path / "b" / "nvcc", "echo 'hello'\n")
    slow = write_executable(tmp_path / "c" / "nvcc", "sleep 5\n")
    assert "exit code 127" in (probe_nvcc(str(broken), run_command).problem or "")
    assert "no 'Cuda compilation tools" in (probe_nvcc(str(garbage), run_command).problem or "")
    assert "no answer within" in (probe_nvcc(str(slow), run_command, timeout_s=0.3).problem or "")
    assert "does not exist" in (probe_nvcc(str(tmp_path / "missing" / "nvcc"), run_command).problem or "")


def test_every_nvcc_on_path_in_order(tmp_path: Path) -> None:
    first = fake_nvcc(tmp_path / "one", capture("12.4"))
    second = fake_nvcc(tmp_path / "two", capture("11.8"))
    (tmp_path / "empty").mkdir()
    env = path_env(tmp_path / "empty", tmp_path / "one", tmp_path / "two")
    assert nvcc_on_path(env) == [str(first), str(second)]


def test_cuda_home_tree_and_path_nvcc(tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "cuda-12.4", "12.4")
    fake_nvcc(tmp_path / "bin", capture("11.8"))
    env = path_env(tmp_path / "bin", CUDA_HOME=str(home))
    facts = probe_toolkit(env, runner=run_command, torch=probe_torch(fake_torch("2.4.1+cu124", "12.4")), toolkit_glob=NOWHERE)
    assert facts.cuda_home.path == str(home)
    assert facts.cuda_home.source == "env CUDA_HOME"
    assert facts.cuda_home.has_headers
    assert facts.cuda_home.nvcc is not None and facts.cuda_home.nvcc.version is not None
    assert facts.cuda_home.nvcc.version.release == (12, 4)
    assert facts.first_nvcc is not None and facts.first_nvcc.version is not None
    assert facts.first_nvcc.version.release == (11, 8)


def test_cuda_home_derived_from_path(tmp_path: Path) -> None:
    root = fake_toolkit(tmp_path / "cuda-12.1", "12.1", headers=False)
    facts = probe_toolkit(path_env(root / "bin"), runner=run_command, torch=probe_torch(fake_torch("2.3.0+cu121", "12.1")), toolkit_glob=NOWHERE)
    assert facts.cuda_home.path == str(root)
    assert facts.cuda_home.source == f"derived from the first nvcc on PATH, {root / 'bin' / 'nvcc'}"
    assert not facts.cuda_home.has_headers


def test_no_toolkit_anywhere(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    facts = probe_toolkit(
        path_env(tmp_path / "bin"), runner=run_command, torch=probe_torch(fake_torch("2.4.1+cu124", "12.4")),
        toolkit_glob=NOWHERE, default_cuda_home=NOWHERE,
    )
    assert facts.cuda_home.path is None and facts.cuda_home.nvcc is None
    assert facts.nvcc_on_path == () and facts.other_toolkits == ()


def test_other_toolkits_found_once_and_each_nvcc_runs_once(tmp_path: Path) -> None:
    fake_toolkit(tmp_path / "cuda-12.1", "12.1")
    fake_toolkit(tmp_path / "cuda-12.4", "12.4")
    os.symlink(tmp_path / "cuda-12.4", tmp_path / "cuda")
    calls: list[str] = []

    def counting(argv: Sequence[str], timeout_s: float = 20.0, env: Mapping[str, str] | None = None) -> CommandResult:
        calls.append(argv[0])
        return run_command(argv, timeout_s, env)

    env = path_env(tmp_path / "cuda" / "bin", CUDA_HOME=str(tmp_path / "cuda"))
    facts = probe_toolkit(env, runner=counting, torch=probe_torch(fake_torch("2.4.1", "12.4")), toolkit_glob=str(tmp_path / "cuda*"))
    releases = sorted(p.version.release_text for p in facts.other_toolkits if p.version)
    assert releases == ["12.1"]
    nvcc_calls = [call for call in calls if call.endswith("nvcc")]
    assert len(nvcc_calls) == len({os.path.realpath(call) for call in nvcc_calls}) == 2


def test_torch_cuda_build_facts() -> None:
    torch = fake_torch("2.4.1+cu124", "12.4", arch="sm_50 sm_80 sm_90 compute_90", nccl=(2, 20, 5))
    facts = probe_torch(torch)
    assert facts.is_cuda_build and facts.cuda_release == (12, 4)
    assert facts.arch_list == ("sm_50", "sm_80", "sm_90", "compute_90")
    assert facts.nccl == (2, 20, 5) and facts.nccl_suffix == ""
    assert facts.describe() == "torch 2.4.1+cu124 (CUDA 12.4)"


def test_torch_nccl_suffix_and_arch_fallback() -> None:
    torch = fake_torch("2.6.0", "12.6", arch="sm_90a sm_100", nccl=(2, 26, 2, "+cuda12.6"))
    del torch._C._cuda_getArchFlags
    facts = probe_torch(torch)
    assert facts.nccl == (2, 26, 2) and facts.nccl_suffix == "+cuda12.6"
    assert facts.arch_list == ("sm_90a", "sm_100")


def test_torch_cpu_build_fake() -> None:
    facts = probe_torch(fake_torch("2.13.0+cpu", None, arch="sm_90"))
    assert not facts.is_cuda_build and facts.arch_list == () and facts.nccl is None
    assert "CPU build" in facts.describe()


def test_real_torch_probe_does_not_initialise_cuda() -> None:
    torch = pytest.importorskip("torch")
    facts = probe_torch()
    assert facts.installed and facts.version == str(torch.__version__)
    assert facts.cuda == torch.version.cuda
    assert not torch.cuda.is_initialized()


def test_ninja_and_compiler(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "ninja", "1.11.1")
    fake_tool(bin_dir, "c++", "c++ (GCC) 12.2.0")
    env = path_env(bin_dir)
    ninja = probe_tool("ninja", ("ninja",), "PATH", env, run_command)
    assert ninja.found and ninja.version == "1.11.1"
    compiler = probe_compiler(env, run_command)
    assert compiler.found and compiler.version == "c++ (GCC) 12.2.0" and compiler.source == "default c++"


def test_cxx_env_and_missing_default(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    custom = fake_tool(bin_dir, "my-clang++", "clang version 17.0.6")
    fake_tool(bin_dir, "g++", "g++ (GCC) 12.2.0")
    with_cxx = probe_compiler(path_env(bin_dir, CXX=f"{custom} -fno-lto"), run_command)
    assert with_cxx.found and with_cxx.source == "CXX" and with_cxx.command[1:] == ("-fno-lto",)
    default = probe_compiler(path_env(bin_dir), run_command)
    assert not default.found and default.problem == "c++: not found on PATH"
    assert default.alternatives == ("g++",)
    assert not probe_tool("ninja", ("ninja",), "PATH", path_env(bin_dir), run_command).found


MODELLED_BUILDER = """
import os
cuda_minor_mismatch_ok = {
    11: ["11.0", "11.1", "11.8"],
    12: ["12.0", "12.1", "12.4"],
}
def assert_no_cuda_mismatch(name=""):
    if os.getenv("DS_SKIP_CUDA_CHECK", "0") == "1":
        return True
"""
OLD_BUILDER = "def assert_no_cuda_mismatch():\n    pass\n"
JIT_CHECKING_BUILDER = """
def assert_no_cuda_mismatch(name=""):
    pass
class TorchCPUOpBuilder:
    def is_cuda_enable(self):
        try:
            assert_no_cuda_mismatch(self.name)
            return '-D__ENABLE_CUDA__'
        except BaseException:
            return '-D__DISABLE_CUDA__'
class CUDAOpBuilder:
    def builder(self):
        assert_no_cuda_mismatch(self.name)
"""


def test_parse_deepspeed_rule_variants() -> None:
    rule, problem = parse_deepspeed_rule(MODELLED_BUILDER, "builder.py")
    assert problem is None and rule is not None
    assert rule.minor_mismatch_ok == {11: ("11.0", "11.1", "11.8"), 12: ("12.0", "12.1", "12.4")}
    assert rule.honours_skip_env
    old, _ = parse_deepspeed_rule(OLD_BUILDER, "old.py")
    assert old is not None and old.minor_mismatch_ok == {} and not old.honours_skip_env
    assert parse_deepspeed_rule("def (", "x.py")[0] is None
    assert "unknown DeepSpeed layout" in (parse_deepspeed_rule("x = 1\n", "y.py")[1] or "")
    dynamic = "cuda_minor_mismatch_ok = make()\ndef assert_no_cuda_mismatch(): pass\n"
    assert "not a literal" in (parse_deepspeed_rule(dynamic, "z.py")[1] or "")
    jit, _ = parse_deepspeed_rule(JIT_CHECKING_BUILDER, "older.py")  # an older layout (is_cuda_enable)
    assert jit is not None and jit.checked_in_jit
    builder_only = "class CUDAOpBuilder:\n    def builder(self):\n        assert_no_cuda_mismatch()\n"
    aot_only, _ = parse_deepspeed_rule(JIT_CHECKING_BUILDER.split("class TorchCPUOpBuilder")[0] + builder_only, "new.py")
    assert aot_only is not None and not aot_only.checked_in_jit


def test_probe_deepspeed_reads_files_without_importing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = fake_deepspeed(
        tmp_path / "site", "0.16.9", MODELLED_BUILDER, "{'cpu_adam': True, 'fused_adam': False}", built_cuda="12.1"
    )
    monkeypatch.syspath_prepend(str(site))
    facts = probe_deepspeed({"DS_SKIP_CUDA_CHECK": "1"})
    assert facts.installed and facts.version == "0.16.9"
    assert facts.skip_enabled
    assert facts.rule is not None and facts.rule.minor_mismatch_ok[12] == ("12.0", "12.1", "12.4")
    assert facts.prebuilt_ops == ("cpu_adam",) and facts.prebuilt_cuda == "12.1"
    assert facts.prebuilt_torch == "2.4" and facts.prebuilt_accelerator == "cuda"
    assert probe_deepspeed({"DS_ACCELERATOR": "cpu"}).accelerator_env == "cpu"


def test_probe_deepspeed_absent_and_skip_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an interpreter without site-packages has no DeepSpeed (the test environment's own is installed for
    # the ZeRO tests): python -S, so this process's sys.path stays as it is
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from preflight.probe.deepspeed import probe_deepspeed; "
            "f = probe_deepspeed({'DS_SKIP_CUDA_CHECK': 'true'}); print(f.installed, f.skip_cuda_check, f.skip_enabled)")
    answer = subprocess.run([sys.executable, "-S", "-c", code, str(REPO_ROOT)], capture_output=True, text=True,
                            timeout=60)
    assert answer.stdout.split() == ["False", "true", "False"], answer.stderr
    site = fake_deepspeed(tmp_path / "site", "0.9.0", None)
    monkeypatch.syspath_prepend(str(site))
    missing_rule = probe_deepspeed({})
    assert missing_rule.installed and missing_rule.rule is None
    assert missing_rule.prebuilt_ops == () and missing_rule.prebuilt_cuda is None
    assert "builder.py not found" in (missing_rule.rule_problem or "")


def test_probe_reads_the_job_environment_not_preflights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe reads the environment it is handed (the node's ``env``), never preflight's own."""
    fake_nvcc(tmp_path / "bin", capture("12.8"))
    home = fake_toolkit(tmp_path / "cuda-12.1", "12.1")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("DS_SKIP_CUDA_CHECK", raising=False)
    job = {"PATH": str(tmp_path / "bin"), "CUDA_HOME": str(home), "DS_SKIP_CUDA_CHECK": "1"}
    facts = probe_toolkit(job, runner=run_command, torch=probe_torch(fake_torch("2.7.0+cu128", "12.8")), toolkit_glob=NOWHERE)
    assert facts.first_nvcc is not None and facts.first_nvcc.path == str(tmp_path / "bin" / "nvcc")
    assert facts.cuda_home.path == str(home) and facts.cuda_home.nvcc is not None
    assert facts.deepspeed.skip_cuda_check == "1"
    assert not facts.ninja.found
