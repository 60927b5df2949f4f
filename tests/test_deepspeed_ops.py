"""The DeepSpeed op build ahead of the ZeRO rehearsal: real DeepSpeed (the test extras pin it), real
torch JIT builds with the real compiler, in a child process under a deadline.

The first test on a machine compiles the ops (minutes) into preflight's own cache
(``~/.cache/preflight/torch_extensions``, kept between runs, so CI pays it once; or wherever
``PREFLIGHT_TORCH_EXTENSIONS_DIR`` puts it, for every test of the suite alike); later ones load them. The
folder's lock makes the others wait for that one build rather than build again.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from preflight.judge.op_build import judge_op_build, op_build_blocker, pending_builders
from preflight.judge.toolkit import judge_jit_build
from preflight.outcome import Status
from preflight.probe.command import run_command
from preflight.probe.deepspeed_ops import (
    EXTENSIONS_DIR_ENV,
    LOCK_NAME,
    RUN_LOCK_NAME,
    STATUS_NAME,
    BackgroundOpBuild,
    OpBuild,
    OpLoad,
    build_ops,
    extensions_root,
    fresh_jit_build,
    parse_child_output,
    remove_stale_locks,
)
from preflight.probe.toolkit import probe_toolkit, probe_torch
from tests.jit_cache import SHM_COMM, shm_comm_build

pytestmark = pytest.mark.e2e
BUILD_TIMEOUT_S = 1500.0  # a cold build of both CPU ops takes 2-4 min on a quiet core, far more on a loaded one
MISSING_HEADER = "/nonexistent/preflight-missing-header.h"
BUSY_WAIT_S = 1.0  # how long the child waits for a folder this test holds before it says busy


def _cached_env() -> dict[str, str]:
    """The suite's environment as it is: the op cache is the one every other test builds into and loads from
    (the default one CI keeps between runs, or where ``PREFLIGHT_TORCH_EXTENSIONS_DIR`` moves it), so a cold
    machine builds the ops once."""
    return dict(os.environ)


def test_the_extensions_root_is_preflights_own(tmp_path: Path) -> None:
    assert extensions_root({"HOME": str(tmp_path)}) == tmp_path / ".cache" / "preflight" / "torch_extensions"
    assert extensions_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "preflight" / "torch_extensions"
    assert extensions_root({EXTENSIONS_DIR_ENV: str(tmp_path / "x"), "XDG_CACHE_HOME": "/y"}) == tmp_path / "x"
    assert extensions_root({"TORCH_EXTENSIONS_DIR": "/users/own", "HOME": str(tmp_path)}) != Path("/users/own")


def test_the_ops_are_built_once_into_preflights_cache_and_then_loaded(tmp_path: Path) -> None:
    user_dir = tmp_path / "users-own-torch-extensions"
    env = {**_cached_env(), "TORCH_EXTENSIONS_DIR": str(user_dir)}
    first = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=env)
    assert first.ok, first.tail()
    assert first.directory and Path(first.directory).parent == extensions_root(env)
    assert f"_deepspeed0.19.8_{first.accelerator}_" in Path(first.directory).name
    assert {op.name for op in first.ops} == {"deepspeed_shm_comm", "fused_adam"}  # CPU accelerator, this machine
    for op in first.ops:  # verified: an earlier test or run of this environment built them
        assert op.source in ("built", "cached", "verified") and op.device == "cpu" and op.compilers == ("c++",), op
        assert op.module and op.module.startswith(first.directory) and op.builder_class.startswith(
            "deepspeed.ops.op_builder.cpu."), op
    assert not user_dir.exists()  # the user's own extensions directory is never touched
    again = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=env)  # no child: the manifest verifies
    assert again.ok and [op.source for op in again.ops] == ["verified", "verified"], again.tail()
    assert again.returncode is None and again.duration_s < 5
    verdict = judge_op_build(again)
    assert verdict.status is Status.PASS and "found built in preflight's cache" in verdict.summary, verdict.summary
    assert again.directory is not None
    manifest = json.loads((Path(again.directory) / STATUS_NAME).read_text())  # what the ranks read
    assert manifest["ok"] is True and {op["name"]: len(op["sha256"]) for op in manifest["ops"]} == {
        "deepspeed_shm_comm": 64, "fused_adam": 64}
    assert op_build_blocker(again, "ZeRO-2") is None


def _ninja_that_must_not_run(bin_dir: Path) -> Path:
    """A ``ninja`` first on PATH that leaves a mark and fails: another environment, another ninja (issue 27:
    ninja 1.13 and 1.11 read each other's log as "too old" and rebuild everything)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    mark = bin_dir / "ninja-ran"
    ninja = bin_dir / "ninja"
    ninja.write_text(f'#!/bin/sh\necho "$@" >> {mark}\nexit 1\n')
    ninja.chmod(0o755)
    return mark


def _shared_lock_free(fd: int) -> bool:
    """Whether a shared flock on ``fd`` is free now (what a rank's deepspeed_ops phase waits for)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


@dataclasses.dataclass(frozen=True)
class NewEnvironmentBuild:
    """A build beside a launch in an environment the cache has not seen, and the run lock around it."""

    result: OpBuild
    env: dict[str, str]
    ninja_mark: Path
    lock_free_while_building: bool
    lock_free_after: bool


@pytest.fixture(scope="module")
def new_environment_build(tmp_path_factory: pytest.TempPathFactory) -> NewEnvironmentBuild:
    """One build child, for the tests that need one in an environment this cache has not seen: another
    ``ninja`` (which must not run) first on its PATH, started as a rehearsal starts it
    (:class:`BackgroundOpBuild`, this run's lock held until it ends), after the ops were built (by an
    earlier test or run; here when the cache is cold)."""
    env = _cached_env()
    warm = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=env)
    assert warm.ok, warm.tail()
    tmp = tmp_path_factory.mktemp("new-environment")
    mark = _ninja_that_must_not_run(tmp / "bin")
    other = {**env, "PATH": f"{tmp / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    run_lock = tmp / "logs" / RUN_LOCK_NAME
    build = BackgroundOpBuild(BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=other, run_lock=run_lock)
    build.start()
    fd = os.open(run_lock, os.O_RDWR)
    try:
        while_building = _shared_lock_free(fd)
        result = build.result()
        after = _shared_lock_free(fd)
    finally:
        os.close(fd)
    return NewEnvironmentBuild(result, other, mark, while_building, after)


def test_an_environment_with_another_ninja_shares_the_build_without_running_ninja(
        new_environment_build: NewEnvironmentBuild) -> None:
    shared = new_environment_build.result  # a new environment: the child finds the folder
    assert shared.ok and [op.source for op in shared.ops] == ["cached", "cached"], shared.tail()
    mark = new_environment_build.ninja_mark
    assert not mark.exists(), mark.read_text()
    again = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=new_environment_build.env)
    assert [op.source for op in again.ops] == ["verified", "verified"]


def _stale_baton(build_directory: Path) -> Path:
    """Leave the lock torch's FileBaton leaves when its holder is killed: the baton taken the way
    ``_jit_compile`` takes it (torch 2.4-2.13), its descriptor closed as the holder's death closes it, and
    never released (``release`` is what removes the file). No child: the file is all a killed holder leaves."""
    from torch.utils.file_baton import FileBaton  # torch 2.4-2.14 all ship it

    build_directory.mkdir(parents=True, exist_ok=True)
    baton = FileBaton(str(build_directory / "lock"))
    assert baton.try_acquire()
    held: int | None = baton.fd
    assert held is not None
    os.close(held)
    return build_directory / "lock"


@dataclasses.dataclass(frozen=True)
class RepairedCopy:
    """The build over a damaged copy of the cache's folder, its environment, and the stale lock planted there."""

    build: OpBuild
    env: dict[str, str]
    stale_lock: Path


@pytest.fixture(scope="module")
def repaired_copy(tmp_path_factory: pytest.TempPathFactory) -> RepairedCopy:
    """One build child over a copy of the cache's folder (the real one stays whole for every other test) with
    both kinds of damage the child repairs: a library cut short (deepspeed_shm_comm's) and the lock a killed
    build left (in fused_adam's build directory)."""
    warm = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=_cached_env())
    assert warm.ok and warm.directory, warm.tail()
    root = tmp_path_factory.mktemp("damaged") / "root"
    folder = root / Path(warm.directory).name
    shutil.copytree(warm.directory, folder, symlinks=True)
    library = folder / SHM_COMM / f"{SHM_COMM}.so"
    # The op's build files as this environment's torch leaves them, as in a cache this environment built: ninja
    # then links the library again. Copied from a build made by another environment's torch (every new venv,
    # so every CI run), they would make ninja compile both sources again, 80 CPU-s that test nothing here.
    for item in shm_comm_build().iterdir():
        if item.name not in (library.name, "lock"):  # torch's build lock, while a rank builds it too
            shutil.copy2(item, library.parent / item.name)
    os.truncate(library, library.stat().st_size // 2)
    lock = _stale_baton(folder / "fused_adam")
    assert lock.exists()
    env = {**_cached_env(), EXTENSIONS_DIR_ENV: str(root)}
    build = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=env)
    return RepairedCopy(build, env, lock)


def test_a_cut_library_is_built_again_instead_of_killing_the_loader(repaired_copy: RepairedCopy) -> None:
    """A cached library cut short (a full disk, a killed copy): loading it killed the child with SIGBUS while
    ninja said "no work to do", on every later run (issue 25). Now it does not verify and is linked again."""
    repaired = repaired_copy.build
    assert repaired.ok and repaired.returncode == 0, repaired.tail()
    assert [op.source for op in repaired.ops] == ["built", "cached"], repaired.ops
    assert repaired.repaired and repaired.repaired[0].startswith("deepspeed_shm_comm: "), repaired.repaired
    verdict = judge_op_build(repaired)
    assert verdict.status is Status.PASS and "built again 1 cached library" in verdict.summary, verdict.summary
    again = build_ops(timeout_s=BUILD_TIMEOUT_S, runner=run_command, python=sys.executable, env=repaired_copy.env)
    assert [op.source for op in again.ops] == ["verified", "verified"]


def test_a_loader_killed_by_a_signal_names_the_folder_to_remove() -> None:
    ops = (OpLoad("ShareMemCommBuilder", "deepspeed_shm_comm", "cpu", "cached", 0.1, "cpu", ("c++",)),)
    build = OpBuild("/c/py311_x_cpu", "cpu", ops, False, False, False, 14.0, 600.0, -7, "ninja: no work to do.")
    verdict = judge_op_build(build)
    assert verdict.status is Status.ERROR and verdict.code == "OP_BUILD_CRASHED"
    assert "killed by SIGBUS while loading FusedAdamBuilder" in verdict.summary
    assert verdict.remediation == ("Remove the folder (rm -rf /c/py311_x_cpu) and run preflight again: it builds "
                                   "the ops afresh.")


def test_a_lock_left_by_a_killed_build_is_removed_instead_of_waited_on(repaired_copy: RepairedCopy) -> None:
    # torch 2.4.1-2.13 (FileBaton) would wait for this file for ever; preflight removes it first
    after, lock = repaired_copy.build, repaired_copy.stale_lock
    assert after.ok and str(lock) in after.stale_locks and not lock.exists(), after.tail()
    assert "removed 1 stale build lock" in judge_op_build(after).summary


def test_remove_stale_locks_only_when_no_preflight_process_holds_the_directory(tmp_path: Path) -> None:
    folder = tmp_path / "py311_x_cpu"
    (folder / "fused_adam").mkdir(parents=True)
    (folder / "fused_adam" / "lock").write_text("")
    assert remove_stale_locks(folder) == []  # no preflight lock file: not a folder preflight built in
    (folder / LOCK_NAME).write_text("")
    fd = os.open(folder / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a rehearsal's rank loading its ops
        assert remove_stale_locks(folder) == [] and (folder / "fused_adam" / "lock").exists()
    finally:
        os.close(fd)
    assert remove_stale_locks(folder) == [str(folder / "fused_adam" / "lock")]


def test_a_background_build_holds_the_lock_the_ranks_wait_on(new_environment_build: NewEnvironmentBuild) -> None:
    """Beside a rehearsal launch: the run's lock is taken before start() returns, released when the build
    ends (an environment this cache has not seen: its build child runs). Another preflight's build in
    another folder holds no lock of this run's (issue 27: one root lock made runs wait on each other)."""
    assert not new_environment_build.lock_free_while_building  # what a rank's deepspeed_ops phase waits on
    assert new_environment_build.result.ok, new_environment_build.result.tail()
    assert new_environment_build.lock_free_after  # free once the build has ended


def test_a_directory_held_by_another_preflight_is_reported_busy(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / LOCK_NAME).write_text("")
    fd = os.open(tmp_path / "build" / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        build = build_ops(timeout_s=90, root=tmp_path, directory=tmp_path / "build", runner=run_command,
                          python=sys.executable, env=_cached_env(), lock_wait_s=BUSY_WAIT_S)
    finally:
        os.close(fd)
    assert build.busy and not build.ok and not build.timed_out, build.tail()
    verdict = judge_op_build(build)
    assert verdict.status is Status.ERROR and verdict.code == "OP_BUILD_BUSY"


def test_a_compiler_that_cannot_run_is_quoted_in_the_verdict(tmp_path: Path) -> None:
    """A real failed build: ``CXX`` with flags in it (torch writes it to build.ninja as one program name)."""
    env = {**_cached_env(), "CXX": f"g++ -include {MISSING_HEADER}"}
    build = build_ops(({"builder": "FusedAdamBuilder"},), timeout_s=600, root=tmp_path, directory=tmp_path / "fresh",
                      runner=run_command, python=sys.executable, env=env)
    assert not build.ok and build.failed is not None and build.failed.name == "fused_adam", build.tail()
    assert "Error building extension 'fused_adam'" in (build.failed.error or "")
    status = json.loads((tmp_path / "fresh" / STATUS_NAME).read_text())  # ranks raise it, never rebuild
    assert status["ok"] is False and "fused_adam: RuntimeError: Error building extension" in status["error"]
    verdict = judge_op_build(build)
    assert verdict.status is Status.FAIL and verdict.code == "DEEPSPEED_OP_BUILD_FAILED", verdict.summary
    assert f"could not build its op 'fused_adam': /bin/sh: 1: g++ -include {MISSING_HEADER}: not found" in \
        verdict.summary
    assert op_build_blocker(build, "ZeRO-1") == ("ZeRO-1 not rehearsed: the build of DeepSpeed's ops failed "
                                                 "(the op build's own check says why)")


def _failing_gxx(bin_dir: Path) -> Path:
    """A ``g++`` that is the real g++ told to include a header that does not exist: a real compile error."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/g++ -include {MISSING_HEADER} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_the_slow_check_says_what_was_really_built(tmp_path: Path) -> None:
    """``--slow`` on this CPU node: DeepSpeed's CPU accelerator and the C++ compiler, never "CUDA ... nvcc"."""
    if not Path("/usr/bin/g++").exists():
        pytest.skip("no /usr/bin/g++ on this machine")
    facts = probe_toolkit(dict(os.environ), runner=run_command, torch=probe_torch())
    env = {**_cached_env(), "CXX": str(_failing_gxx(tmp_path / "bin"))}
    failed = fresh_jit_build(timeout_s=600, runner=run_command, python=sys.executable, env=env)
    verdict = judge_jit_build(facts, failed)
    assert verdict.status is Status.FAIL and verdict.code == "DEEPSPEED_JIT_BUILD_FAILED", failed.tail()
    assert "cpu accelerator" in verdict.summary, verdict.summary
    assert f"fatal error: {MISSING_HEADER}: No such file or directory" in verdict.summary, verdict.summary
    built = dataclasses.replace(failed, ok=True, ops=(OpLoad(
        "FusedAdamBuilder", "fused_adam", "cpu", "built", 84.0, "cpu", ("c++",),
        "deepspeed.ops.op_builder.cpu.fused_adam.FusedAdamBuilder", "/tmp/x/fused_adam.so"),))
    summary = judge_jit_build(facts, built).summary
    assert "JIT-built its CPU fused_adam with c++ only: the cpu accelerator" in summary, summary
    assert "from scratch in 84 s" in summary


def test_a_build_past_its_budget_is_slow_not_hung() -> None:
    ops = (OpLoad("ShareMemCommBuilder", "deepspeed_shm_comm", "cpu", "built", 97.0, "cpu", ("c++",)),)
    build = OpBuild(directory="/c/preflight/torch_extensions/py311_x_cpu", accelerator="cpu", ops=ops, ok=False,
                    timed_out=True, busy=False, duration_s=295.0, budget_s=295.0, returncode=None, output="",
                    versions={"deepspeed": "0.19.8"})
    assert pending_builders(build) == ["FusedAdamBuilder"]
    verdict = judge_op_build(build)
    assert verdict.status is Status.WARN and verdict.code == "DEEPSPEED_OP_BUILD_SLOW"
    assert "did not finish within its 295 s budget (FusedAdamBuilder was still compiling" in verdict.summary
    assert "deepspeed_shm_comm (CPU, c++) built in 97 s" in verdict.summary and "next run resumes" in verdict.summary
    assert "hung" not in verdict.summary and "NCCL" not in (verdict.remediation or "")


def test_prebuilt_ops_for_another_torch_are_refused_with_deepspeeds_words() -> None:
    message = ("RuntimeError: PyTorch version mismatch! DeepSpeed ops were compiled and installed with a different "
               "version than what is being used at runtime. Please re-install DeepSpeed or switch torch versions. "
               "Install torch version=2.4, Runtime torch version=2.13")
    ops = (OpLoad("FusedAdamBuilder", "fused_adam", "cuda", "failed", 0.2, error=message),)
    build = OpBuild("/d", "cuda", ops, False, False, False, 20.0, 600.0, 1, message)
    verdict = judge_op_build(build)
    assert verdict.status is Status.FAIL and verdict.code == "DEEPSPEED_PREBUILT_OPS_REFUSED"
    assert "Install torch version=2.4, Runtime torch version=2.13" in verdict.summary


def test_child_fact_lines_are_picked_out_of_the_build_output() -> None:
    out = 'ninja: no work to do.\nPREFLIGHT_OP_BUILD {"kind": "done", "seconds": 1}\nPREFLIGHT_OP_BUILD {broken\n'
    assert parse_child_output(out) == [{"kind": "done", "seconds": 1}]
