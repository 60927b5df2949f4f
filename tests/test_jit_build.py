"""The opt-in JIT build: a real child process running a fake DeepSpeed op builder."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight.judge.toolkit import jit_build_skip_reason, judge_jit_build
from preflight.outcome import Status
from preflight.probe.deepspeed import DeepSpeedFacts
from preflight.probe.jit_build import JitBuildResult, compiler_errors, run_jit_build
from preflight.probe.toolkit import ToolkitFacts, probe_toolkit
from tests.toolkit_fakes import fake_toolkit, fake_torch, path_env

BUILD_LOG = """\
Using /tmp/preflight-jit-x as PyTorch extensions root...
[1/3] /usr/local/cuda-12.4/bin/nvcc -c csrc/adam/multi_tensor_adam.cu -o multi_tensor_adam.cuda.o
FAILED: multi_tensor_adam.cuda.o
/usr/include/c++/13/bits/std_function.h:435:145: error: parameter packs not expanded with '...':
ninja: build stopped: subcommand failed.
"""

FAKE_BUILDERS = '''
import os, sys, time

class FusedAdamBuilder:
    name = "fused_adam"

    def jit_load(self, verbose=True):
        root = os.environ["TORCH_EXTENSIONS_DIR"]
        print("Using", root, "as PyTorch extensions root...", "exists" if os.path.isdir(root) else "missing")
        mode = os.environ.get("FAKE_JIT_MODE", "ok")
        if mode == "hang":
            time.sleep(60)
        if mode == "fail":
            sys.stderr.write(os.environ["FAKE_JIT_LOG"])
            raise RuntimeError("Error building extension 'fused_adam'")
'''


@pytest.fixture
def fake_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    builders = site / "deepspeed" / "ops" / "op_builder"
    builders.mkdir(parents=True)
    for package in (site / "deepspeed", site / "deepspeed" / "ops"):
        (package / "__init__.py").write_text("")
    (builders / "__init__.py").write_text(FAKE_BUILDERS)
    return site


def _env(site: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), **extra}


def test_compiler_errors_are_verbatim_and_ordered() -> None:
    assert compiler_errors(BUILD_LOG) == (
        "FAILED: multi_tensor_adam.cuda.o",
        "/usr/include/c++/13/bits/std_function.h:435:145: error: parameter packs not expanded with '...':",
    )
    assert compiler_errors("all good\n") == ()


def test_build_succeeds_in_a_fresh_extensions_dir(fake_site: Path) -> None:
    result = run_jit_build(timeout_s=60, python=sys.executable, env=_env(fake_site))
    assert result.ok and not result.timed_out and result.error_lines == ()
    assert "PyTorch extensions root... exists" in result.output
    root = result.output.split("Using ", 1)[1].split(" as ", 1)[0]
    assert Path(root).name.startswith("preflight-jit-") and not Path(root).exists()


def test_build_failure_keeps_compiler_words(fake_site: Path) -> None:
    result = run_jit_build(timeout_s=60, env=_env(fake_site, FAKE_JIT_MODE="fail", FAKE_JIT_LOG=BUILD_LOG))
    assert not result.ok and result.returncode == 1
    assert "/usr/include/c++/13/bits/std_function.h:435:145: error: parameter packs" in result.error_lines[1]


def test_build_deadline_kills_the_child(fake_site: Path) -> None:
    result = run_jit_build(timeout_s=1.5, env=_env(fake_site, FAKE_JIT_MODE="hang"))
    assert result.timed_out and not result.ok and result.duration_s < 30
    assert "as PyTorch extensions root" in result.output  # unbuffered: progress survives the kill


def test_missing_builder_is_a_failure_not_a_crash(fake_site: Path) -> None:
    result = run_jit_build("NoSuchBuilder", timeout_s=60, env=_env(fake_site))
    assert not result.ok and any("AttributeError" in line or "NoSuchBuilder" in line for line in result.output.splitlines())


def _facts(tmp_path: Path, cuda: str | None = "12.4", ds: str | None = "0.16.9") -> ToolkitFacts:
    home = fake_toolkit(tmp_path / "cuda-12.4", "12.4")
    facts = probe_toolkit(path_env(home / "bin"), torch_module=fake_torch("2.4.1", cuda), toolkit_glob="/nonexistent")
    return dataclasses.replace(facts, deepspeed=DeepSpeedFacts(version=ds, skip_cuda_check=None))


def _result(**changes: Any) -> JitBuildResult:
    base = JitBuildResult("FusedAdamBuilder", True, False, 74.2, 0, "built", ())
    return dataclasses.replace(base, **changes)


def test_judge_jit_build(tmp_path: Path) -> None:
    facts = _facts(tmp_path)
    ok = judge_jit_build(facts, _result())
    assert ok.status is Status.PASS and "0.16.9" in ok.summary and "12.4" in ok.summary
    assert ok.metrics[0].value == 74.2
    lines = compiler_errors(BUILD_LOG)
    failed = judge_jit_build(facts, _result(ok=False, returncode=1, output=BUILD_LOG, error_lines=lines))
    assert failed.status is Status.FAIL and failed.code == "DEEPSPEED_JIT_BUILD_FAILED"
    assert failed.summary.endswith("std_function.h:435:145: error: parameter packs not expanded with '...':")
    assert "parameter packs not expanded" in failed.evidence["compiler errors"]
    assert failed.remediation is not None and "FusedAdamBuilder().jit_load" in failed.remediation
    timed = judge_jit_build(facts, _result(ok=False, timed_out=True, returncode=None, duration_s=600.0))
    assert timed.status is Status.ERROR and timed.code == "JIT_BUILD_TIMEOUT"


def test_jit_build_skip_reasons(tmp_path: Path) -> None:
    assert jit_build_skip_reason(_facts(tmp_path)) is None
    assert "not installed" in (jit_build_skip_reason(_facts(tmp_path / "a", ds=None)) or "")
    assert "CPU build" in (jit_build_skip_reason(_facts(tmp_path / "b", cuda=None)) or "")
