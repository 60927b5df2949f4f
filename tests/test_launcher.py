"""The launcher on real torchrun with gloo ranks: a clean run, a crash, a signal death, a hang."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from preflight.judge.ddp import judge_ddp_step
from preflight.launch.outcome import LaunchResult
from preflight.launch.phase_results import DdpResult
from preflight.launch.plan import Phase
from preflight.outcome import Status

from tests.conftest import REPO_ROOT
from tests.launching import launch_phase, launch_phases

pytestmark = pytest.mark.e2e
LEFTOVER_WAIT_S = 10.0


@pytest.fixture(autouse=True, scope="module")
def _importable_tests() -> Iterator[None]:
    """Ranks must import tests.workers.faulty (set for the module: its shared launch starts first)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        yield


@pytest.fixture(scope="module")
def ddp_then_crash(tmp_path_factory: pytest.TempPathFactory) -> LaunchResult:
    """One launch for two tests: the real DDP step, then a phase in which rank 1 crashes (a crash ends a
    launch, so it comes last; the clean phase before it is answered as a launch of its own would be)."""
    phases = [Phase("ddp", "preflight.workers.ddp:run", parse_output=DdpResult.parse),
              Phase("crash", "tests.workers.faulty:run", ("crash", "1"), parse_output=DdpResult.parse)]
    return launch_phases(phases, nproc=2, run_dir=tmp_path_factory.mktemp("ddp-then-crash"))


def test_two_gloo_ranks_finish_a_ddp_step_with_identical_parameters(ddp_then_crash: LaunchResult) -> None:
    result = ddp_then_crash.phase("ddp")
    assert result.ok, result.describe() + ddp_then_crash.launcher_tail
    digests = {r.param_sha256 for r in result.outputs(DdpResult)}
    assert len(digests) == 1
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.PASS
    run_dir = ddp_then_crash.run_dir
    assert (run_dir / "rank0.log").exists() and (run_dir / "rank1.log").exists()
    assert (run_dir / "rank0.log").stat().st_mode & 0o077 == 0  # logs are as private as the reports


def test_a_crashing_rank_is_named_with_its_error(ddp_then_crash: LaunchResult) -> None:
    result = ddp_then_crash.phase("crash")
    assert not result.ok and not result.timed_out
    assert result.root_cause() == 1
    assert "injected crash on rank 1" in result.describe()
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.FAIL and verdict.code == "DDP_RANK_CRASHED"
    assert "rank 1" in verdict.summary
    assert any("injected crash" in text for text in verdict.evidence.values())


def test_a_rank_killed_by_a_signal_is_named_with_the_signal(tmp_path: Path) -> None:
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["sigkill", "0"], run_dir=tmp_path,
                          parse_output=DdpResult.parse)
    assert result.root_cause() == 0
    assert "SIGKILL" in result.describe()
    assert result.ranks[1].state in ("stopped", "crashed")


def test_a_hung_rank_ends_at_the_deadline_and_leaves_no_process(tmp_path: Path) -> None:
    started = time.monotonic()
    # The phase's budget counts from the last rank's entry into it, so torch's import (10 s on a loaded
    # 2-core machine) is not part of it; the launch's deadline is only the backstop.
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["hang", "1"], run_dir=tmp_path, budget_s=5,
                          parse_output=DdpResult.parse)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert elapsed < 60 + 5 + 12, f"launch outlived its budget: {elapsed:.1f} s"
    assert result.ranks_in("hung") == [0, 1]
    assert result.stuck_ranks() == [1]
    assert "rank 1 got the least far" in result.describe()
    pids = [json.loads(p.read_text())["pid"] for p in tmp_path.glob("rank*.pid")]
    assert pids and not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.FAIL and verdict.code == "DDP_RANK_HUNG"
    assert "rank 1" in verdict.summary


def test_torchrun_killed_by_sigkill_is_named_as_the_oom_killers_not_a_peer_failure(tmp_path: Path) -> None:
    result = launch_phase("tests.workers.faulty:run", nproc=2, args=["kill-torchrun", "1"], run_dir=tmp_path,
                          parse_output=DdpResult.parse)
    assert not result.ok and result.launcher_signal == 9
    text = result.describe()
    assert text.startswith("torchrun was killed by signal 9 (SIGKILL), probably the OOM killer: see `dmesg")
    assert "after a peer failed" not in text
    verdict = judge_ddp_step(result)
    assert verdict.status is Status.FAIL and "OOM killer" in verdict.summary


HOSTILE = '''
import os, shutil, subprocess, sys, time
run_dir = os.environ["PREFLIGHT_RUN_DIR"]
sleep_s = sys.argv[1]  # this run's own: both daemons carry it in their command lines
os.dup2(os.open(os.path.join(run_dir, "rank0.log"), os.O_WRONLY | os.O_APPEND), 1)  # as a rank's bootstrap does
sys.stdout.write(("z" * 1023 + "\\n") * 1024 * 40)  # 40 MB
print("the end of the log", flush=True)
if os.fork() == 0:  # a setsid double-fork daemon: it keeps the environment (the run's tag)
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
subprocess.Popen(["setsid", "sleep", sleep_s], env={}, start_new_session=True)  # no tag: only a cgroup finds it
time.sleep(0.5)
shutil.rmtree(run_dir)  # "cleaning up"
'''


def _alive_with(word: str) -> list[str]:
    """Command lines of the living processes that carry ``word`` as one of their arguments."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        line = proc.info["cmdline"] or []
        if word in line and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(" ".join(line))
    return found


def test_a_hostile_script_loses_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """It prints 40 MB, leaves two daemons and deletes the launch's directory: the logs come back (cut to
    their ends), the daemons are found and stopped, and the launch says what it had to stop. The daemons
    sleep for a time of this run's own, so a process of another test running beside it is never taken
    for one of them."""
    from preflight.launch.logs import KEEP_BYTES
    from preflight.launch.reaper import LaunchCgroup
    from preflight.launch.torchrun import launch_script

    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    sleep_s = f"301.{secrets.randbelow(10**6):06d}"  # unique on this machine: `sleep` takes a fraction
    run_dir = tmp_path / "reports" / "logs" / "run"
    result = launch_script(script, nproc=1, run_dir=run_dir, deadline_s=120, args=[sleep_s])
    assert result.files_removed and result.log_bytes[0] > 40 * 2**20
    log = run_dir / "rank0.log"
    assert KEEP_BYTES <= log.stat().st_size < KEEP_BYTES + 1000 and "the end of the log" in result.ranks[0].log_tail
    assert "bytes of this log left out" in log.read_text(errors="replace")
    for path in (run_dir, run_dir.parent, run_dir.parent.parent):
        assert path.stat().st_mode & 0o777 == 0o700
    assert log.stat().st_mode & 0o777 == (run_dir / "torchrun.log").stat().st_mode & 0o777 == 0o600
    others = [s for s in result.stopped if s.role == "other"]
    assert any(s.found_by == "the run's tag" for s in others), result.stopped
    if LaunchCgroup.make() is not None:  # root or a delegated cgroup: the sleeper without the tag too
        assert any(f"sleep {sleep_s}" in s.command and s.found_by == "the launch's cgroup" for s in others), \
            result.stopped
    assert result.leftovers == ()
    until = time.monotonic() + LEFTOVER_WAIT_S  # the killed daemons may take a moment to be reaped
    while _alive_with(sleep_s) and time.monotonic() < until:
        time.sleep(0.1)
    assert not _alive_with(sleep_s)  # neither the script's forked daemon nor the bare sleeper lives on


def test_the_runs_tag_finds_a_process_whatever_its_parent_and_the_cgroup_whatever_its_environment(tmp_path: Path) -> None:
    import subprocess
    import sys

    from preflight.launch.reaper import LaunchCgroup, Stopped, tagged
    from preflight.workers.common import RUN_DIR_ENV

    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, RUN_DIR_ENV: str(run_dir)})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, RUN_DIR_ENV: str(run_dir) + "-another-run"})
    try:
        time.sleep(0.3)
        assert tagged(run_dir) == [child.pid]  # never another run's process, not even a prefix of its name
    finally:
        child.kill()
        other.kill()
        child.wait()
        other.wait()
    cgroup = LaunchCgroup.make()
    if cgroup is None:
        pytest.skip("no cgroup v2 of our own can be made here (not root, no delegation)")
    bare = subprocess.Popen(["sleep", "60"], env={}, preexec_fn=cgroup.enter)
    time.sleep(0.2)
    assert cgroup.pids() == [bare.pid]
    cgroup.kill()
    bare.wait(timeout=10)
    cgroup.remove()
    assert not cgroup.path.exists()
    fork = Stopped(pid=1, command="/v/bin/python -u /x/preflight/rehearse/bootstrap.py t.py", found_by="x",
                   role="other", needed_kill=False)
    assert fork.what == "a fork of a rank" and Stopped(2, "/bin/sleep 601", "x", "other", False).what == "sleep 601"
