"""The suite's torch-probe replay (tests/fakes/replayed_torch.py) replays an answer only where the real child
would print the same one: what it leaves out of its key is what the child cannot read. The user-site rule is
checked against CPython's own ``site`` in real virtual environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from preflight.node.torch import torch_probe_argv
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner
from tests.fakes.fake_torch import cuda_answer, real_answer
from tests.fakes.replayed_torch import STORE_ENV, answer_key, is_cpu_build, replaying, user_site_off

BASE = {"PATH": "/usr/bin", "HOME": "/root", "PYTHONPATH": "/repo"}


def _venv(where: Path, system_site: bool) -> Path:
    venv.create(where, system_site_packages=system_site, with_pip=False, symlinks=True)
    return where / "bin" / "python"


def _real_user_site(python: Path, env: Mapping[str, str]) -> bool:
    """What CPython's site module decided in that interpreter."""
    out = subprocess.run([str(python), "-c", "import site; print(site.ENABLE_USER_SITE)"], env=dict(env),
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip() == "True"


@pytest.mark.parametrize("system_site", [False, True])
def test_the_user_site_rule_is_cpythons(tmp_path: Path, system_site: bool) -> None:
    python = _venv(tmp_path / "venv", system_site)
    env = {"PATH": os.environ.get("PATH", "")}
    assert user_site_off(str(python), env) is not _real_user_site(python, env)
    assert user_site_off(str(python), {**env, "PYTHONNOUSERSITE": "1"})
    assert not _real_user_site(python, {**env, "PYTHONNOUSERSITE": "1"})


def test_a_venv_config_without_the_key_keeps_the_user_site_on(tmp_path: Path) -> None:
    """``site.venv()`` starts from include-system-site-packages = true."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert not user_site_off(str(tmp_path / "bin" / "python"), {})
    assert not user_site_off("python3", {})  # found on PATH: not known, so kept


def test_home_is_in_the_key_only_where_it_can_reach_sys_path(tmp_path: Path) -> None:
    closed = _venv(tmp_path / "closed", system_site=False)
    open_ = _venv(tmp_path / "open", system_site=True)
    for python, same in ((closed, True), (open_, False)):
        argv = torch_probe_argv(str(python))
        keys = {answer_key(argv, {**BASE, "HOME": home}) for home in ("/root", "/tmp/pytest-of-root/x")}
        assert (len(keys) == 1) is same


def test_what_the_child_cannot_read_is_left_out_and_everything_else_kept() -> None:
    argv = torch_probe_argv("python3")
    key = answer_key(argv, BASE)
    unread = {"PYTEST_CURRENT_TEST": "t.py::x (call)", "PREFLIGHT_TEST_FAULT": "hang:1", "PY_COLORS": "0",
              "COLUMNS": "80", "PREFLIGHT_TORCH_EXTENSIONS_DIR": "/x"}
    assert answer_key(argv, {**BASE, **unread}) == key
    assert answer_key(argv, {**BASE, "PYTHONPATH": "/repo:/repo"}) == key  # a repeat adds nothing
    for name, value in (("PYTHONPATH", "/other:/repo"), ("TORCH_LOGS", "+dynamo"), ("LD_LIBRARY_PATH", "/x"),
                        ("CUDA_VISIBLE_DEVICES", "0"), ("HOME", "/home/u")):  # python3 on PATH: HOME kept
        assert answer_key(argv, {**BASE, name: value}) != key, name
    assert answer_key(torch_probe_argv("/other/python"), BASE) != key


def _child_answering(answer: dict[str, object]) -> tuple[list[Sequence[str]], CommandRunner]:
    calls: list[Sequence[str]] = []

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        calls.append(argv)
        return CommandResult(tuple(argv), 0, json.dumps(answer) + "\n", "")

    return calls, replaying(run)


@pytest.mark.parametrize(("answer", "replayed"), [(real_answer(), True), (cuda_answer(2), False)])
def test_the_device_selection_is_left_out_only_after_a_cpu_build_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: dict[str, object], replayed: bool) -> None:
    """A CPU build never loads the CUDA runtime that reads CUDA_VISIBLE_DEVICES; a CUDA build counts what it
    selects, so every selection asks again."""
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert is_cpu_build(CommandResult((), 0, json.dumps(answer), "")) is replayed
    calls, run = _child_answering(answer)
    argv = torch_probe_argv(str(tmp_path / "python"))  # a command of this test's own: no other answer has it
    for selection in ("", "0,1", "GPU-zz"):
        run(argv, env={**BASE, "CUDA_VISIBLE_DEVICES": selection})
    assert len(calls) == (1 if replayed else 3)
    run(argv, env={**BASE, "CUDA_VISIBLE_DEVICES": "0", "TORCH_LOGS": "x"})  # anything else: asked again
    assert len(calls) == (2 if replayed else 4)


def test_a_failed_answer_is_never_replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    calls: list[Sequence[str]] = []

    def broken(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
               env: Mapping[str, str] | None = None) -> CommandResult:
        calls.append(argv)
        return CommandResult(tuple(argv), 1, "", "ImportError: libtorch_cpu.so")

    run = replaying(broken)
    argv = torch_probe_argv(str(tmp_path / "python"))
    assert not run(argv, env=BASE).ok and not run(argv, env=BASE).ok
    assert len(calls) == 2
    assert run([sys.executable, "-c", "pass"], env=BASE).ok is False  # not the probe: passed through
    assert len(calls) == 3
