"""``preflight rehearse`` for real on CPU: torchrun, gloo ranks, the user's scripts in
tests/data/rehearse/, one verdict per failure kind, the reports, and nothing left running."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from preflight.judge.rehearse import judge_size, scaling_rows
from preflight.outcome import Status, Verdict
from preflight.rehearse import beat as beats
from preflight.rehearse.facts import SizeRun, size_figures
from preflight.rehearse.plan import RehearsalPlan, busbw_from_report
from preflight.rehearse.session import RehearsalSession, launch_size
from preflight.report.ownership import LOGS
from tests.conftest import REPO_ROOT, TEST_DATA, validate_report
from tests.jit_cache import extensions_cache

pytestmark = pytest.mark.e2e
SCRIPTS = TEST_DATA / "rehearse"
SEED = str(SCRIPTS / "ddp_seed.py")
SHORT = ("--warmup", "1", "--steps", "4", "--no-sweep", "--measure-for", "1")
REPORTS = Path("reports") / "rehearse"  # rehearse's own directory: a node report in ./reports stays
LEFTOVER_WAIT_S = 10.0


def rehearse(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``preflight rehearse ARGS`` in ``cwd``; its result and the JSON report (None when absent)."""
    result = subprocess.run([sys.executable, "-m", "preflight", "rehearse", *args], capture_output=True, text=True,
                            cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=600)
    path = cwd / REPORTS / "preflight.json"
    report = json.loads(path.read_text()) if path.exists() else None
    if report is not None:
        validate_report(report)
    return result, report


def size(section: dict[str, Any], ranks: int) -> dict[str, Any]:
    """One size's entry of a rehearsal section (the report's ``rehearsal``)."""
    return next(s for s in section["sizes"] if s["ranks"] == ranks)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def _ours(proc: psutil.Process, cwd: Path, pids: set[int]) -> bool:
    try:
        if proc.pid in pids:
            return True
        return str(cwd) in " ".join(proc.cmdline()) or proc.cwd().startswith(str(cwd))
    except (psutil.Error, OSError):
        return False


def assert_nothing_left(cwd: Path) -> None:
    """No torchrun, rank or child of a rank that ran in ``cwd`` is still alive."""
    pids = {int(json.loads(p.read_text())["pid"]) for p in cwd.rglob("rank*.pid")}
    until = time.monotonic() + LEFTOVER_WAIT_S
    while True:
        alive = [p for p in psutil.process_iter() if p.pid != os.getpid() and _ours(p, cwd, pids)]
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > until:
            break
        time.sleep(0.2)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


def plan_for(cwd: Path, script: str, *args: str, sizes: tuple[int, ...] = (1,), **fields: Any) -> RehearsalPlan:
    """What ``preflight rehearse --warmup 1 --steps 4 --measure-for 1 [fields] -- SCRIPT ARGS`` plans in ``cwd``."""
    values: dict[str, Any] = {"warmup": 1, "steps": 4, "timeout_s": 300.0, "measure_for_s": 1.0, **fields}
    return RehearsalPlan(script=Path(script), script_text=Path(script).name, args=args, cwd=cwd, sizes=sizes,
                         cpu_cores=os.cpu_count() or 1, **values)


def run_size(plan: RehearsalPlan, nproc: int) -> tuple[SizeRun, Verdict]:
    """One size of ``plan`` launched from this process (real torchrun, bootstrap and ranks; no pytest session
    and no reports around it: those are the CLI tests') and judged as its check judges it."""
    previous = os.getcwd()
    os.chdir(plan.cwd)  # the job runs where preflight runs
    try:
        run = launch_size(plan, nproc, plan.cwd / "run")
    finally:
        os.chdir(previous)
    return run, judge_size(run, size_figures(run))


def launched(tmp_path: Path, script: str, *args: str, nproc: int = 1, **fields: Any) -> tuple[SizeRun, Verdict]:
    """One size of a rehearsal of ``script ARGS`` on ``nproc`` ranks, launched from this process and judged."""
    return run_size(plan_for(tmp_path, script, *args, sizes=(nproc,), **fields), nproc)


def rehearsed(tmp_path: Path, script: str, *args: str, sizes: tuple[int, ...], **fields: Any) -> dict[str, Any]:
    """Every size, then the scaling and the communication model, as ``preflight rehearse`` runs them, from this
    process (no pytest session, no reports): the rehearsal section its report would carry."""
    session = RehearsalSession(plan_for(tmp_path, script, *args, sizes=sizes, **fields), tmp_path / REPORTS)
    previous = os.getcwd()
    os.chdir(tmp_path)
    try:
        session.judge_scaling()
    finally:
        os.chdir(previous)
    return session.section()


def fake_report(tmp_path: Path, busbw: float = 2.5) -> str:
    """A preflight report whose bandwidth check measured ``busbw`` (what --from-report reads)."""
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"checks": [{"id": "test_nccl_bandwidth.py::test_allreduce_bandwidth",
                                            "metrics": [{"name": "busbw_peak", "value": busbw, "unit": "GB/s"}]}]}))
    return str(path)


@dataclass(frozen=True, slots=True)
class SeedRun:
    """One ``preflight rehearse`` of the seed-style script: what it printed, its report, and the HTML and
    JUnit reports as it left them (the next run replaces them)."""

    result: subprocess.CompletedProcess[str]
    report: dict[str, Any] | None
    html: str
    junit: str


NODE_REPORT = '{"verdict": "READY"}'


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SeedRun]]:
    """Two rehearsals in a row of the seed-style script on 1 and 2 gloo ranks (a price, the script's own
    arguments; the all-reduce sweep in the first), in one directory that already holds a node report in
    ./reports. The seed test reads the first; the repeat test compares the two: the sizes, the scaling and
    the verdict, which the sweep does not decide."""
    cwd = tmp_path_factory.mktemp("seed")
    node_report = cwd / "reports" / "preflight.json"
    node_report.parent.mkdir()
    node_report.write_text(NODE_REPORT)
    runs = []
    for again in ((), ("--no-sweep",)):  # the sweep's figure is asserted on the first; the second keeps 8 CPU-s
        result, report = rehearse(cwd, "--warmup", "2", "--steps", "6", "--price-per-hour", "98", "--measure-for",
                                  "1", *again, "--", SEED, "--checkpoint", "ckpt.pt")
        html, junit = (cwd / REPORTS / "preflight.html"), (cwd / REPORTS / "preflight-junit.xml")
        runs.append(SeedRun(result, report, html.read_text() if html.exists() else "",
                            junit.read_text() if junit.exists() else ""))
    return cwd, runs


def test_a_seed_style_ddp_script_on_one_and_two_gloo_ranks(seed_runs: tuple[Path, list[SeedRun]]) -> None:
    cwd, (first, _) = seed_runs
    result, report = first.result, first.report
    assert report is not None, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["verdict"] in ("READY", "DEGRADED")  # DEGRADED where the scaling is measurable and low
    section = report["rehearsal"]
    assert [s["ranks"] for s in section["sizes"]] == [1, 2]
    assert size(section, 1)["status"] == size(section, 2)["status"] == "PASS"
    one, two = size(section, 1)["steps_reached"], size(section, 2)["steps_reached"]
    assert one[0] >= 8 and two[0] == two[1] >= 8  # at least the plan's; every rank stops at the same step
    assert size(section, 2)["measured_steps"] == two[0] - 2 and size(section, 2)["memory_kind"] == "RSS"
    assert size(section, 2)["steps_per_s_spread"] is not None
    assert size(section, 1)["scaling"] == 1.0 and size(section, 2)["scaling"] > 0
    comm = section["communication"]
    assert comm["strategy"] == "ddp" and comm["params"] == 32 * 64 + 64 + 64 + 1
    assert "all-reduce sweep on 2 gloo ranks" in comm["busbw_source"]
    assert size(section, 2)["comm_per_step_s"] > 0 and size(section, 2)["cost_per_1k_steps_usd"] > 0
    out = result.stdout
    assert "Rehearsal of " in out and "ranks  first step" in out and "* batches/s = per-rank batch" in out
    assert out.strip().splitlines()[-1].startswith(report["verdict"])
    assert "<svg" in first.html and "<script" not in first.html and "Throughput by rank count" in first.html
    assert "test_rehearsal_size" in first.junit and "test_rehearsal_scaling" in first.junit
    assert (cwd / "ckpt.pt").exists()  # the script ran in the working directory, with its arguments
    logs = cwd / REPORTS / LOGS
    assert (logs / "rehearse-2ranks" / "rank0.log").exists() and (logs / "rehearse-2ranks" / "rank1.log").exists()
    assert_nothing_left(cwd)


def test_two_rehearsals_in_a_row_give_the_same_verdict_in_preflights_own_words(
        seed_runs: tuple[Path, list[SeedRun]]) -> None:
    """On this 2-core machine two gloo ranks share the cores: the scaling is not measurable, every time.
    The output is preflight's (no pytest progress, the verdict once) and the reports go to
    reports/rehearse, beside an earlier node report that stays as it was."""
    cwd, seeds = seed_runs
    runs = [(run.result, run.report) for run in seeds]
    verdicts = [(report or {}).get("verdict") for _, report in runs]
    assert verdicts[0] == verdicts[1] == "READY", [r.stdout for r, _ in runs]
    for result, report in runs:
        assert report is not None
        scaling = check(report, "test_rehearsal_scaling")
        if (os.cpu_count() or 0) <= 2:
            assert scaling["status"] == "SKIP" and scaling["summary"].startswith("not measurable on this machine")
        out = result.stdout
        assert "[100%]" not in out and " passed" not in out and "..W" not in out
        assert out.splitlines()[0].startswith("preflight rehearse: asking ")
        assert sum(1 for line in out.splitlines() if line.strip() == "READY") == 1
        assert "ranks  first step" in out
        # A phase line is printed only after 2 s of silence (report/live.py): whether start-up lasts that long
        # depends on the machine's load, so only its form is asserted, for whichever phases were shown.
        phases = [line for line in out.splitlines() if line.startswith("  > rehearse 2 ranks: ")]
        assert all(" (2 ranks, budget " in line for line in phases), phases
    assert (cwd / "reports" / "preflight.json").read_text() == NODE_REPORT


def test_a_crash_at_step_3_on_rank_1_names_rank_1_and_its_error(tmp_path: Path) -> None:
    result, report = rehearse(tmp_path, "--nproc", "2", *SHORT, "--", SEED, "--crash-at-step", "3", "--fault-rank", "1")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    assert report["verdict"] == "NOT READY"
    crash = check(report, "test_rehearsal_size[ranks2]")
    assert crash["code"] == "REHEARSAL_CRASHED"
    assert "rank 1 crashed (RuntimeError: injected failure in the training loop at step 3)" in crash["summary"]
    assert "after step 3" in crash["summary"]
    assert "injected failure" in crash["evidence"]["rank 1 traceback (tail)"]
    assert check(report, "test_rehearsal_scaling")["status"] == "SKIP"
    assert "2 ranks FAIL REHEARSAL_CRASHED" in result.stdout
    assert_nothing_left(tmp_path)


def test_a_hang_at_step_2_on_rank_0_names_rank_0_and_where_it_stopped(tmp_path: Path) -> None:
    run, hang = launched(tmp_path, SEED, "--hang-at-step", "2", "--fault-rank", "0", nproc=2, stall_s=6.0,
                         timeout_s=150.0)
    assert hang.code == "REHEARSAL_HUNG", hang.summary
    assert hang.summary.startswith("2 ranks hung after step 2: rank 0 stopped in ddp_seed.py:")
    assert "time.sleep(3600)" in hang.summary
    # rank 1 is either still waiting, or already raised from gloo when the watchdog ended rank 0
    assert "rank 1 waits in backward" in hang.summary or "rank 1 lost its peer" in hang.summary, hang.summary
    assert hang.details["ranks_behind"] == [0]
    assert run.elapsed_s < 150 - 10  # the stall limit ended it, not the deadline
    assert_nothing_left(tmp_path)


def test_a_script_that_never_steps_is_named_at_the_deadline(tmp_path: Path) -> None:
    # The rank computes all the while (a loop without optimizer.step()), resting between batches so that the
    # wait for the deadline does not take a core from the other tests; a short deadline keeps it cheap.
    _, verdict = launched(tmp_path, SEED, "--no-step", "--batch-sleep", "0.05", "--epochs", "100000000",
                          timeout_s=15.0)
    assert verdict.code == "REHEARSAL_NO_STEP", verdict.summary
    seconds = re.search(r"no optimizer step in (\d+) s", verdict.summary)  # what it ran: the rank's own
    assert seconds and 10 <= int(seconds.group(1)) <= 15, verdict.summary  # deadline comes 2 s before ours
    assert "ddp_seed.py" in verdict.summary  # where it was at the deadline
    assert_nothing_left(tmp_path)


def test_a_script_that_ends_early_is_measured_on_what_it_ran(tmp_path: Path) -> None:
    run, early = launched(tmp_path, SEED, "--max-steps", "5", steps=8)
    assert early.status is Status.WARN  # the run is DEGRADED, not NOT READY
    assert early.code == "REHEARSAL_ENDED_EARLY" and "ended after 5 of 9 steps" in early.summary
    fig = size_figures(run)
    assert fig is not None and fig.steps_reached == (5,) and fig.steps_per_s and fig.steps_per_s > 0
    assert_nothing_left(tmp_path)


def test_an_allocation_failure_is_called_an_oom(tmp_path: Path) -> None:
    _, oom = launched(tmp_path, SEED, "--oom-at-step", "2")
    assert oom.status is Status.FAIL and oom.code == "REHEARSAL_OOM" and "ran out of memory" in oom.summary
    assert "can't allocate memory" in oom.summary and "after step 2" in oom.summary
    assert_nothing_left(tmp_path)


def test_an_fsdp2_script_on_two_ranks(tmp_path: Path) -> None:
    """Two ranks, each holding a shard of every parameter (DTensors): the steps are counted on both, and the
    communication model counts the whole model from rank 0's DTensors (their sizes are global)."""
    busbw, source = busbw_from_report(Path(fake_report(tmp_path)))  # --from-report
    section = rehearsed(tmp_path, str(SCRIPTS / "fsdp2_train.py"), sizes=(2,), sweep=False, busbw_gbps=busbw,
                        busbw_source=source)
    assert size(section, 2)["status"] == "PASS", size(section, 2)["summary"]
    two = size(section, 2)["steps_reached"]
    assert two[0] == two[1] >= 5  # the window grows past the plan's 5 until its spread is known, on every rank
    comm = section["communication"]
    assert comm["strategy"] == "fsdp"  # DTensor parameters seen by the optimizer
    assert comm["params"] == 2 * (32 * 32 + 32) + 32 + 1 and comm["busbw_gbps"] == 2.5
    assert_nothing_left(tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_a_zero2_script_with_deepspeed_counts_one_step_per_iteration(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks: ZeRO-2 partitions the optimizer's state between them, and calls the inner optimizer once
    per parameter group in every iteration."""
    # On CPU, deepspeed.init_distributed JIT-builds its shared-memory comm op (minutes the first time in an
    # environment); the tests' own cache per environment (tests/jit_cache.py) keeps later runs fast.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions_cache()))
    busbw, source = busbw_from_report(Path(fake_report(tmp_path)))  # --from-report
    section = rehearsed(tmp_path, str(SCRIPTS / "zero2_train.py"), "--iterations", "7", sizes=(2,), sweep=False,
                        busbw_gbps=busbw, busbw_source=source, timeout_s=900.0)
    assert size(section, 2)["status"] == "PASS", size(section, 2)["summary"]
    # the script ends itself after 7 iterations, past the plan's 5: one step per iteration reads 7
    assert size(section, 2)["steps_reached"] == [7, 7]
    comm = section["communication"]
    assert comm["strategy"] == "zero2"
    assert 2177 <= comm["params"] <= 2177 + 8  # ZeRO's flat partitions, padded for alignment
    assert "a ZeRO partition, x2" in comm["params_source"]  # rank 0 holds half
    assert_nothing_left(tmp_path)


def test_sigkill_of_preflight_leaves_no_rank_behind(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "rehearse", "--nproc", "2", *SHORT, "--timeout", "300",
                             "--", SEED, "--no-step", "--batch-sleep", "0.05", "--epochs", "100000000"],
                            cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / REPORTS / LOGS / "rehearse-2ranks"
    until = time.monotonic() + 180

    def started(rank: int) -> bool:
        view = beats.read_path(run_dir / beats.beat_name(rank))
        return view is not None and view.pid > 0

    while not all(started(r) for r in (0, 1)):
        assert proc.poll() is None and time.monotonic() < until, "the ranks never started"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert_nothing_left(tmp_path)
    view = beats.read_path(run_dir / beats.beat_name(0))  # preflight died before turning it into a record
    assert view is not None and view.ended == "parent_gone"


# -- issue 25 items 3, 6-8, issue 26 item 4, issue 27 items 1 and 6 ---------------------------------------

FAULTS = str(SCRIPTS / "faults.py")
MANUAL = str(SCRIPTS / "manual_sgd.py")


def test_a_hostile_script_is_cleaned_up_after_and_loses_nothing(tmp_path: Path) -> None:
    """Daemons (setsid double-fork, an empty-environment sleeper), a Pool whose tasks ignore SIGTERM, 64 MB
    printed and the report directory deleted by the script: all stopped and named, the log kept (cut),
    the figures read through preflight's own handles. The daemons sleep for a time of this test's own, so
    another test's process is never taken for one of them."""
    sleep_s = f"600.{secrets.randbelow(10**6):06d}"  # unique on this machine: `sleep` takes a fraction
    result, report = rehearse(tmp_path, "--nproc", "1", *SHORT, "--", FAULTS, "--daemon", "--daemon-for", sleep_s,
                              "--pool", "--print-mb", "64", "--delete", "reports", "--at-step", "3")
    assert report is not None and result.returncode == 0, result.stdout + result.stderr
    one = check(report, "test_rehearsal_size[ranks1]")
    assert one["status"] == "PASS", one["summary"]
    assert "the script left running" in one["summary"] and "removed the rehearsal's files" in one["summary"]
    assert "rank 0 printed 67 MB" in one["summary"]
    assert "fork of a rank" in one["evidence"]["processes stopped when the launch ended"]
    assert size(report["rehearsal"], 1)["stopped"] and size(report["rehearsal"], 1)["steps_reached"][0] > 5
    log = tmp_path / REPORTS / LOGS / "rehearse-1ranks" / "rank0.log"
    assert log.stat().st_size < 17 * 2**20 and log.stat().st_mode & 0o777 == 0o600
    assert log.parent.stat().st_mode & 0o777 == 0o700
    assert_nothing_left(tmp_path)
    leftovers = [" ".join(p.info["cmdline"]) for p in psutil.process_iter(["cmdline", "status"])
                 if sleep_s in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert not leftovers  # the sleeper and the forked daemon carry the time in their command lines


def test_os_exit_at_step_5_is_named_with_its_code_and_where(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, FAULTS, "--os-exit", "3", "--at-step", "5")
    assert verdict.code == "REHEARSAL_CRASHED", verdict.summary
    assert verdict.summary == "1 rank: rank 0 called os._exit(3) at faults.py:118 (os._exit(args.os_exit)) after step 5"


def test_a_rank_frozen_with_the_gil_held_is_named_and_the_wait_is_shown_live(tmp_path: Path) -> None:
    started = time.monotonic()
    result, report = rehearse(tmp_path, "--nproc", "2", *SHORT, "--stall-timeout", "6", "--timeout", "200", "--",
                              FAULTS, "--gil-hang", "--fault-rank", "1", "--at-step", "3")
    assert report is not None and result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 150  # the stall limit ended it, not the deadline
    hang = check(report, "test_rehearsal_size[ranks2]")
    assert hang["code"] == "REHEARSAL_HUNG" and hang["details"]["ranks_behind"] == [1], hang["summary"]
    assert "rank 1's Python watchdog was silent for" in hang["summary"] and "held the GIL" in hang["summary"]
    assert "> rehearse 2 ranks: waiting for rank 1's step 4 (2 ranks, budget 6 s)" in result.stdout
    assert_nothing_left(tmp_path)


def test_a_rank_that_returns_at_once_is_named_and_left_out_of_the_scaling(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, FAULTS, "--no-ddp", "--idle-rank", "1", nproc=2)
    assert verdict.code == "REHEARSAL_RANK_IDLE" and "rank 1 returned" in verdict.summary, verdict.summary
    fig = size_figures(run)
    assert fig is not None and fig.idle_ranks == (1,) and scaling_rows([fig], None, None) == []


def test_a_rank_killed_by_sigkill_is_named_as_the_oom_killers(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, FAULTS, "--sigkill", "--fault-rank", "1", nproc=2)
    assert verdict.code == "REHEARSAL_OOM", verdict.summary
    assert verdict.summary.startswith("2 ranks: rank 1 killed by signal 9 (SIGKILL), probably the OOM killer: see "
                                      "`dmesg | grep -i oom` after step 3")


def test_a_script_written_for_gpus_rehearsed_on_cpu_says_where_it_needs_cuda(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, FAULTS, "--needs-cuda")
    assert verdict.code == "REHEARSAL_NEEDS_GPU", verdict.summary
    assert verdict.summary.startswith("1 rank: this script calls torch.cuda.set_device at faults.py:85")
    assert "rehearse it on a GPU node" in verdict.summary


def test_a_script_that_exits_by_itself_is_quoted_not_told_to_raise_the_timeout(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, FAULTS, "--say", "Unable to locate sufficient 2 gpus to train the model")
    assert verdict.code == "REHEARSAL_NO_STEP" and "--timeout" not in (verdict.remediation or "")
    assert verdict.summary.endswith('without a single optimizer step; its last output: "Unable to locate '
                                    'sufficient 2 gpus to train the model"'), verdict.summary


def test_hand_written_sgd_cannot_be_counted_until_its_steps_are_marked(tmp_path: Path) -> None:
    run, verdict = launched(tmp_path, MANUAL)
    assert verdict.status is Status.ERROR and verdict.code == "REHEARSAL_STEPS_UNCOUNTED", verdict.summary
    assert "--step-function" in (verdict.remediation or "")
    run, verdict = launched(tmp_path, MANUAL, step_function="train_step")
    assert verdict.status is Status.PASS and run.ranks[0].steps >= 5, verdict.summary


@pytest.fixture(scope="module")
def venv_without_deepspeed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's environment: a venv with torch and everything else of this one but DeepSpeed (its
    site-packages are links to this environment's, less deepspeed)."""
    import site
    import sysconfig

    root = tmp_path_factory.mktemp("jobvenv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for entry in ours.iterdir():
        if not entry.name.lower().startswith("deepspeed") and not (theirs / entry.name).exists():
            (theirs / entry.name).symlink_to(entry)
    assert site.getsitepackages()
    return root / "bin" / "python"


def test_the_job_is_judged_in_the_interpreter_its_command_names(tmp_path: Path, venv_without_deepspeed: Path) -> None:
    """The plan as ``preflight rehearse`` makes it from the command line (the job's torch asked in that
    interpreter), then its one size launched from this process."""
    from preflight.commands.rehearse import make_plan

    script = tmp_path / "ds_train.py"
    script.write_text("import deepspeed  # the job's own environment does not have it\n")
    plan, _ = make_plan(["--nproc", "1", *SHORT, "--", str(venv_without_deepspeed), str(script)], tmp_path)
    assert plan.as_dict()["python"] == str(venv_without_deepspeed)  # the report's rehearsal.python
    _, verdict = run_size(plan, 1)
    assert verdict.code == "REHEARSAL_CRASHED" and "No module named 'deepspeed'" in verdict.summary


def test_a_full_disk_does_not_stop_the_rank_from_stopping_at_its_step(tmp_path: Path) -> None:
    """The report directory on a 8 MB tmpfs (a mount namespace of its own) that the script fills."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available here")
    mount = tmp_path / "small"
    mount.mkdir()
    command = (f"mount -t tmpfs -o size=8m tmpfs {mount} && cd {mount} && {sys.executable} -m preflight rehearse "
               f"--nproc 1 {' '.join(SHORT)} -- {FAULTS} --fill-disk fill.bin --at-step 3; "
               f"echo rc=$?; cat {REPORTS}/preflight.json")
    result = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=tmp_path)
    text = result.stdout
    assert "rc=0" in text, text + result.stderr
    report = json.loads(text[text.index("rc=0") + 4:])
    verdict = check(report, "test_rehearsal_size[ranks1]")
    assert verdict["status"] == "PASS" and size(report["rehearsal"], 1)["steps_reached"][0] >= 5, verdict["summary"]
