"""The environment check on variables that break or trap a ``torchrun --standalone`` job (issue 16 item 9).

What each variable does was read in torch 2.13's source and tried here (see
``preflight/judge/job_environment.py``); the end-to-end test at the bottom shows the first case for real:
preflight's own FSDP rehearsal runs clean under ``PYTHONWARNINGS=error``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.judge.host_session import env_findings, judge_environment
from preflight.judge.job_environment import omp_threads_valid, tasks_per_node, warning_error_entries
from preflight.outcome import Status
from tests.conftest import REPO_ROOT

CLEAN = {"PATH": "/usr/bin", "HOME": "/home/alice", "OMP_NUM_THREADS": "8", "NCCL_DEBUG": "WARN",
         "PYTHONWARNINGS": "ignore::DeprecationWarning", "SLURM_NTASKS": "16", "SLURM_NNODES": "16",
         "SLURM_TASKS_PER_NODE": "1(x16)"}
"""A clean environment, including values that look close to the bad ones but are fine: warnings ignored
(not raised), one Slurm task per node on 16 nodes (the deploy README's srun line)."""


def test_a_clean_environment_passes() -> None:
    verdict = judge_environment(CLEAN, ranks=8, cores_per_rank=24)
    assert verdict.status is Status.PASS, verdict.summary
    assert verdict.summary == "no environment variables that slow or break a job"
    assert verdict.details["variables"] == [] and verdict.details["noted"] == []


@pytest.mark.parametrize(
    ("value", "scope"),
    [("error", "every warning"), ("e", "every warning"), ("error::UserWarning", "every UserWarning"),
     ("default,error::DeprecationWarning", "every DeprecationWarning"),
     ("error:FSDP2-wrapped module", "whose message starts with 'FSDP2-wrapped module'"),
     ("error::FutureWarning:transformers", "raised from module 'transformers'"), ("ERROR::Warning", "every warning")],
)  # fmt: skip
def test_warnings_turned_into_errors_warn(value: str, scope: str) -> None:
    verdict = judge_environment({**CLEAN, "PYTHONWARNINGS": value}, ranks=8, cores_per_rank=24)
    assert (verdict.status, verdict.code) == (Status.WARN, "ENV_HYGIENE")
    assert verdict.details["variables"] == ["PYTHONWARNINGS"]
    assert verdict.summary.startswith(f"PYTHONWARNINGS={value}: Python raises ")
    assert scope in verdict.summary and "crashes that rank" in verdict.summary
    assert verdict.remediation and verdict.remediation.startswith("unset PYTHONWARNINGS")


@pytest.mark.parametrize("value", ["ignore", "default", "always::UserWarning", "once,module", "", "i::Warning"])
def test_warnings_not_turned_into_errors_pass(value: str) -> None:
    assert warning_error_entries(value) == []
    assert judge_environment({**CLEAN, "PYTHONWARNINGS": value}, ranks=8, cores_per_rank=24).status is Status.PASS


@pytest.mark.parametrize("value", ["0", "abc", "", "-1", "1.5", "4,0", " ", "٣"])
def test_omp_threads_libgomp_rejects_warn(value: str) -> None:
    verdict = judge_environment({**CLEAN, "OMP_NUM_THREADS": value}, ranks=8, cores_per_rank=24)
    assert (verdict.status, verdict.code) == (Status.WARN, "ENV_HYGIENE")
    assert verdict.details["variables"] == ["OMP_NUM_THREADS"]
    assert "Invalid value for environment variable OMP_NUM_THREADS" in verdict.summary
    assert "oversubscribed 8-fold" in verdict.summary and "only when the variable is absent" in verdict.summary
    assert verdict.remediation == "export OMP_NUM_THREADS=24"


def test_omp_threads_rejected_with_one_rank_says_no_oversubscription() -> None:
    found = env_findings({"OMP_NUM_THREADS": "0"}, ranks=1, cores_per_rank=None)
    assert [f.variable for f in found] == ["OMP_NUM_THREADS"]
    assert "oversubscribed" not in found[0].why and found[0].fix.startswith("unset OMP_NUM_THREADS")


@pytest.mark.parametrize("value", ["1", "8", " 4 ", "4,2", "007"])
def test_omp_threads_libgomp_accepts(value: str) -> None:
    assert omp_threads_valid(value)


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [("RANK", "3", "joins as rank 3"), ("WORLD_SIZE", "16", "a world of 16"),
     ("LOCAL_RANK", "5", "runs on GPU 5")],
)  # fmt: skip
def test_launch_variables_left_set_warn(variable: str, value: str, words: str) -> None:
    verdict = judge_environment({**CLEAN, variable: value}, ranks=8, cores_per_rank=24)
    assert (verdict.status, verdict.code) == (Status.WARN, "ENV_HYGIENE")
    assert verdict.details["variables"] == [variable]
    assert "the job ignores it" in verdict.summary and words in verdict.summary
    assert verdict.remediation == f"unset {variable} (left from another launch; torchrun sets them for each rank)"


def test_a_whole_leaked_launch_environment_is_one_fix() -> None:
    env = {**CLEAN, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.5",
           "MASTER_PORT": "29501"}
    verdict = judge_environment(env, ranks=8, cores_per_rank=24)
    assert verdict.details["variables"] == ["RANK", "WORLD_SIZE", "LOCAL_RANK"]
    assert verdict.details["noted"] == ["MASTER_ADDR", "MASTER_PORT"]
    assert verdict.remediation == ("unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT (left from another "
                                   "launch; torchrun sets them for each rank)")
    assert "MASTER_PORT=29501" in verdict.evidence["environment"] and "RANK=1" in verdict.evidence["environment"]


@pytest.mark.parametrize("variable", ["MASTER_ADDR", "MASTER_PORT"])
def test_rendezvous_address_alone_is_a_note_not_a_warning(variable: str) -> None:
    """--standalone replaces both for every rank: saying so is useful, degrading the verdict is not."""
    verdict = judge_environment({**CLEAN, variable: "29501"}, ranks=8, cores_per_rank=24)
    assert verdict.status is Status.PASS
    assert verdict.details["noted"] == [variable]
    assert f"noted: {variable}=29501: ignored by torchrun --standalone" in verdict.summary


@pytest.mark.parametrize(
    ("env", "per_node"),
    [({"SLURM_NTASKS": "4"}, 4), ({"SLURM_NTASKS": "8", "SLURM_NNODES": "2"}, 4),
     ({"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NTASKS": "7"}, 2), ({"SLURM_NTASKS_PER_NODE": "8"}, 8)],
)  # fmt: skip
def test_several_slurm_tasks_per_node_warn(env: dict[str, str], per_node: int) -> None:
    clean = {k: v for k, v in CLEAN.items() if not k.startswith("SLURM_")}
    verdict = judge_environment({**clean, **env}, ranks=8, cores_per_rank=24)
    assert (verdict.status, verdict.code) == (Status.WARN, "ENV_HYGIENE")
    assert f"{per_node} Slurm tasks per node" in verdict.summary and "reads no SLURM_ variable" in verdict.summary
    assert verdict.remediation and "--ntasks-per-node=1" in verdict.remediation


@pytest.mark.parametrize(
    "env", [{}, {"SLURM_NTASKS": "1"}, {"SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "16"},
            {"SLURM_TASKS_PER_NODE": "1(x4)"}, {"SLURM_TASKS_PER_NODE": "garbled"}, {"SLURM_NTASKS": "x"}],
)  # fmt: skip
def test_one_slurm_task_per_node_or_unknown_passes(env: dict[str, str]) -> None:
    assert (tasks_per_node(env) or 1) <= 1
    clean = {k: v for k, v in CLEAN.items() if not k.startswith("SLURM_")}
    assert judge_environment({**clean, **env}, ranks=8, cores_per_rank=24).status is Status.PASS


# ---------------------------------------------------------------------------------------------
# End to end: preflight's own rehearsal raises no warning of its own
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_fsdp_rehearsal_runs_under_pythonwarnings_error(tmp_path: Path) -> None:
    """The tiny FSDP model returned a view (a linear over a 3-D input), and FSDP2 warns on every forward
    of a wrapped module that does; under PYTHONWARNINGS=error that crashed every rank (FSDP_RANK_CRASHED).
    The user's filter stays as it is: the check's environment finding is what names it."""
    out = tmp_path / "reports"
    env = {**os.environ, "PYTHONWARNINGS": "error",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "-k",
                             "fsdp or environment_hygiene"], capture_output=True, text=True, env=env, timeout=300)
    report = json.loads((out / "preflight.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["test_strategy_step[fsdp]"]["status"] == "PASS", result.stdout[-3000:]
    hygiene = checks["test_environment_hygiene"]
    assert hygiene["status"] == "WARN" and "PYTHONWARNINGS" in hygiene["details"]["variables"]
    assert not list(out.rglob("*.error.json"))
