"""``preflight rehearse``'s input: every mistake is one line and exit code 2, before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.commands.rehearse import Capacity, make_plan
from preflight.errors import UsageError
from preflight.rehearse.plan import RehearsalPlan, busbw_from_report, default_sizes
from tests.conftest import REPO_ROOT

SCRIPT = "train.py"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / SCRIPT).write_text("print('training')\n")
    (tmp_path / "configs").mkdir()
    return tmp_path


def _plan(workdir: Path, *argv: str, gpus: int = 0, cores: int = 2) -> RehearsalPlan:
    return make_plan(list(argv), workdir, node=lambda python: Capacity(gpus, cores))[0]


@pytest.mark.parametrize(("gpus", "sizes"), [(1, (1,)), (2, (1, 2)), (4, (1, 2, 4)), (8, (1, 2, 8))])
def test_default_sizes_are_one_two_and_all(gpus: int, sizes: tuple[int, ...]) -> None:
    assert default_sizes(gpus) == sizes


def test_a_cpu_node_rehearses_one_and_two_gloo_ranks(workdir: Path) -> None:
    plan = _plan(workdir, "--", SCRIPT, "--config", "cfg.yaml")
    assert plan.sizes == (1, 2) and not plan.on_gpu
    assert plan.script == workdir / SCRIPT and plan.args == ("--config", "cfg.yaml") and plan.cwd == workdir
    assert plan.target == 55


def test_nproc_overrides_and_the_script_arguments_pass_unchanged(workdir: Path) -> None:
    plan = _plan(workdir, "--nproc", "1,8", "--steps", "20", "--", SCRIPT, "--nproc", "3", "--", "x", gpus=8)
    assert plan.sizes == (1, 8) and plan.steps == 20 and plan.args == ("--nproc", "3", "--", "x")


def test_the_jobs_own_torchrun_line_is_taken_apart_by_torch(workdir: Path) -> None:
    plan = _plan(workdir, "--", "torchrun", "--standalone", "--nproc-per-node=4", SCRIPT, "--lr", "1", gpus=8)
    assert plan.sizes == (1, 2, 4) and plan.args == ("--lr", "1") and plan.launch_command[0] == "torchrun"


@pytest.mark.parametrize(("argv", "message"), [
    ([SCRIPT], "put -- before the script"),
    (["--steps", "5"], "put -- before the script"),
    (["--"], "no script after --"),
    (["--", "missing.py"], "script not found: missing.py"),
    (["--", "configs"], "configs is a directory, not a script"),
    (["--nproc", "0", "--", SCRIPT], "rank counts >= 1, got 0"),
    (["--nproc", "1,x", "--", SCRIPT], "'x' is not a whole number"),
    (["--nproc", "4", "--", SCRIPT], "no GPU is visible, and this node has 2 CPU cores"),
    (["--steps", "0", "--", SCRIPT], "expected a number >= 1"),
    (["--from-report", "nothing.json", "--", SCRIPT], "cannot read --from-report"),
])
def test_bad_input_is_one_clear_line(workdir: Path, argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=None) as raised:
        _plan(workdir, *argv)
    assert message in str(raised.value)


def test_more_ranks_than_visible_gpus_names_the_visible_count(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    expected = r"--nproc 8 is more than the 2 GPUs visible here \(CUDA_VISIBLE_DEVICES=0,1\)"
    with pytest.raises(UsageError, match=expected):
        _plan(workdir, "--nproc", "1,8", "--", SCRIPT, gpus=2)


def test_busbw_comes_from_the_bandwidth_check_of_a_report(tmp_path: Path) -> None:
    report = {"checks": [
        {"id": "test_nccl_bandwidth.py::test_allreduce_bandwidth", "metrics": [
            {"name": "busbw_peak", "value": 181.5, "unit": "GB/s"}]},
        {"id": "test_nccl_bandwidth.py::test_nccl_p2p", "metrics": [
            {"name": "p2p_off_busbw_peak", "value": 200.0, "unit": "GB/s"}]}]}
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(report))
    value, source = busbw_from_report(path)
    assert value == 181.5 and "test_allreduce_bandwidth" in source
    path.write_text(json.dumps({"checks": []}))
    with pytest.raises(UsageError, match="has no all-reduce busbw"):
        busbw_from_report(path)


@pytest.mark.e2e
def test_the_command_prints_one_line_and_exits_2(workdir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for argv, message in ((["rehearse", SCRIPT], "put -- before the script"),
                          (["rehearse", "--", "configs"], "configs is a directory, not a script")):
        result = subprocess.run([sys.executable, "-m", "preflight", *argv], capture_output=True, text=True,
                                cwd=workdir, env=env, timeout=120)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("preflight: error: "), result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
    assert not (workdir / "reports").exists()


# -- issue 25 item 3: the interpreter the job's command names --------------------------------------------


def _plan_python(workdir: Path, *argv: str) -> str:
    seen: list[str] = []

    def node(python: str) -> Capacity:
        seen.append(python)
        return Capacity(0, 2)

    plan = make_plan(list(argv), workdir, node=node)[0]
    assert seen == [plan.python]  # the GPUs are counted by the job's own torch
    return plan.python


def test_the_job_runs_in_the_interpreter_its_command_names(workdir: Path, tmp_path: Path) -> None:
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    python = other / "python3"
    python.write_text("#!/bin/sh\nexec /usr/bin/env python3 \"$@\"\n")
    python.chmod(0o755)
    assert _plan_python(workdir, "--", SCRIPT) == sys.executable
    assert _plan_python(workdir, "--python", str(python), "--", SCRIPT) == str(python)
    assert _plan_python(workdir, "--", str(python), "-u", SCRIPT, "--lr", "1") == str(python)
    assert _plan_python(workdir, "--", str(python), "-m", "torch.distributed.run", "--nproc-per-node=1",
                        SCRIPT) == str(python)
    launcher = other / "torchrun"
    launcher.write_text(f"#!{python}\nimport sys\n")
    launcher.chmod(0o755)
    assert _plan_python(workdir, "--", str(launcher), "--nproc-per-node=1", SCRIPT) == str(python)
    launcher.write_text(f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\n")  # pip's trampoline for long paths
    assert _plan_python(workdir, "--", str(launcher), SCRIPT) == str(python)


@pytest.mark.parametrize(("argv", "message"), [
    (["--python", "/no/such/python", "--", SCRIPT], "no such interpreter: '/no/such/python'"),
    (["--", "/no/such/python", SCRIPT], "no such interpreter: /no/such/python"),
    (["--", sys.executable, "-c", "print(1)"], "rehearse runs a script file"),
    (["--", sys.executable], "no script after"),
    (["--python", "/usr/bin/env", "--", sys.executable, SCRIPT], "give one of them"),
    (["--step-function", "not a name", "--", SCRIPT], "takes a function name or Class.method"),
    (["--step-function", "train_step", "--", SCRIPT], "defines no function of that name"),
])
def test_bad_interpreters_and_step_functions_are_one_line(workdir: Path, argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        _plan(workdir, *argv)
    assert message in str(raised.value)


def test_a_step_function_the_script_defines_is_taken(workdir: Path) -> None:
    (workdir / SCRIPT).write_text("def train_step():\n    pass\n")
    assert _plan(workdir, "--step-function", "train_step", "--", SCRIPT).step_function == "train_step"


def test_a_junit_path_that_cannot_be_written_is_refused_before_anything_runs(workdir: Path) -> None:
    blocker = workdir / "file"
    blocker.write_text("")
    probed: list[str] = []

    def node(python: str) -> Capacity:
        probed.append(python)
        return Capacity(0, 2)

    with pytest.raises(UsageError, match="cannot write the JUnit XML to"):
        make_plan(["--junitxml", str(blocker / "junit.xml"), "--", SCRIPT], workdir, node=node)
    assert probed == []  # refused before the job's torch is even asked


def test_reports_go_to_a_directory_of_their_own_by_default(workdir: Path) -> None:
    args = make_plan(["--", SCRIPT], workdir, node=lambda python: Capacity(0, 2))[1]
    assert args.report_dir == Path("reports") / "rehearse"
