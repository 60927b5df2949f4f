"""The run under faults a scheduler or an unlucky user brings: SIGKILL at bad moments, two runs in one
report directory, a tight --timeout, a killed run beside an old READY report, a full disk.

Every run is the real ``python -m preflight`` in a child process on CPU (gloo ranks); processes are
found by the ``PREFLIGHT_TEST_RUN`` tag they inherit, so other tests' processes are never counted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from preflight.report.ownership import LOGS, logs_dir
from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.replayed_torch import STORE_ENV
from tests.test_safety_e2e import HOSTILE, _rank_waits_in_the_step

pytestmark = pytest.mark.e2e


def _env(run: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    # the test fakes' switches off; the session's recorded torch answers kept (tests/fakes/replayed_torch.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_TEST_") or k == STORE_ENV}
    env.update(extra or {})
    env["PREFLIGHT_TEST_RUN"] = run
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _start(run: str, args: list[str], extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "preflight", "--cpu", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(run, extra))


def _tagged(run: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if process.environ().get("PREFLIGHT_TEST_RUN") == run:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def _wait(condition: object, limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _rank_in_phase(report_dir: Path, phase: str) -> bool:
    for path in (report_dir / LOGS / "rehearsal").glob("rank*.progress"):
        try:
            if json.loads(path.read_text())["phase"] == phase:
                return True
        except (OSError, ValueError, KeyError):
            continue
    return False


HANG = ["-k", "ddp", "--", "-p", "tests.fakes.faulty_ddp"]


@pytest.mark.parametrize("point", ["torchrun started", "ranks in their phase", "a rank hung in its phase"])
def test_sigkill_of_preflight_leaves_no_process_within_5_s(tmp_path: Path, point: str) -> None:
    run = f"sigkill-{point.replace(' ', '-')}"
    out = tmp_path / "reports"
    proc = _start(run, ["--report-dir", str(out), *HANG], {"PREFLIGHT_TEST_FAULT": "hang:1"})
    try:
        if point == "torchrun started":
            _wait(lambda: any("torch.distributed.run" in " ".join(p.cmdline()) for p in _tagged(run)), 120, point)
        elif point == "ranks in their phase":
            _wait(lambda: _rank_in_phase(out, "ddp"), 180, point)
        else:  # rank 1 sleeps in the phase, rank 0 waits in its broadcast
            _wait(lambda: _rank_in_phase(out, "ddp") and _rank_waits_in_the_step(out), 180, "the ranks")
        assert len(_tagged(run)) >= 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _tagged(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [" ".join(p.cmdline())[:120] for p in _tagged(run)]
        assert not left, f"still running 5 s after SIGKILL of preflight: {left}"
    finally:
        for p in _tagged(run):
            p.kill()


def test_a_second_run_into_a_directory_in_use_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    first = _start("two-runs-a", ["--report-dir", str(out), *HANG], {"PREFLIGHT_TEST_FAULT": "hang:1"})
    try:
        _wait(lambda: (out / ".preflight.lock").exists() and _rank_in_phase(out, "ddp"), 180, "the first run")
        second = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "-k", "ddp"],
                                capture_output=True, text=True, env=_env("two-runs-b"), timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "another preflight run (pid" in lines[0] and str(out) in lines[0], lines
        assert "Traceback" not in second.stderr
        # the first run's ranks are untouched by the refused one
        assert _rank_in_phase(out, "ddp") and len(_tagged("two-runs-a")) >= 3
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    assert report["run"]["interrupted"]


def test_a_tight_timeout_is_a_run_deadline_never_a_hang_of_the_node(tmp_path: Path) -> None:
    """A rank hangs in its DDP step (budget 60 s): the run's --timeout ends it first, and both checks say the
    run's deadline cut them, never that the node hung. 24 s leaves a loaded machine time to reach the launch
    (14 s did not, once: the run ended before the DDP check was reported)."""
    out = tmp_path / "reports"
    result = subprocess.run([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "--timeout", "24",
                             "-k", "ddp or allreduce", "--", "-p", "tests.fakes.faulty_ddp"], capture_output=True,
                            text=True, env=_env("tight", {"PREFLIGHT_TEST_FAULT": "hang:1"}), timeout=120)
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("test_ddp_step", "test_allreduce_bandwidth"):
        assert checks[name]["status"] != "FAIL", checks[name]
        assert checks[name]["code"] == "RUN_DEADLINE", checks[name]
    assert "--timeout 24 s" in checks["test_ddp_step"]["summary"]
    assert result.returncode == 1


def test_a_killed_run_leaves_none_of_the_previous_runs_reports(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    for name, text in (("preflight.json", '{"verdict": "READY"}'), ("preflight.html", "READY"),
                       ("preflight-junit.xml", "<testsuites/>"), ("preflight.jsonl", "{}\n")):
        (out / name).write_text(text)
    (logs_dir(out) / "ddp").mkdir()  # an earlier run's launch folder, in preflight's own marked folder
    (out / LOGS / "ddp" / "rank0.json").write_text("{}")
    run = "killed-beside-old"
    mark = tmp_path / "stalled"  # killed half way: while a check runs (no launch: the outputs go at the start)
    proc = _start(run, ["--report-dir", str(out), "-k", "planted_stall", "--", *HOSTILE],
                  {"PREFLIGHT_TEST_STALL": "check", "PREFLIGHT_TEST_STALL_MARK": str(mark)})
    try:
        _wait(mark.exists, 180, "the stalled check")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        for p in _tagged(run):
            p.kill()
    assert not (out / "preflight.json").exists() and not (out / "preflight.html").exists()
    assert not (out / "preflight-junit.xml").exists() and not (out / LOGS / "ddp").exists()
    lines = (out / "preflight.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # this run's own, whole lines


def _small_tmpfs(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``path`` (root only); False where it cannot be done."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_a_full_report_filesystem_gives_a_verdict_and_one_line(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    if not _small_tmpfs(out, "64k"):
        pytest.skip("needs root to mount a 64 KiB tmpfs for the report directory")
    try:
        (out / "filler").write_bytes(b"x" * (60 * 1024))
        result = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(out), "-m",
                                 "not distributed"], capture_output=True, text=True, env=_env("full-disk"),
                                timeout=240)
        assert "INTERNALERROR" not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        last = result.stdout.strip().splitlines()[-1]
        assert last.split("  ")[0] in ("READY", "DEGRADED", "NOT READY"), result.stdout
        assert "No space left on device" in last or (out / "preflight.json").exists()
        messages = [line for line in result.stderr.splitlines() if "could not write" in line]
        assert len(messages) <= 1
        lines = (out / "preflight.jsonl").read_text().splitlines() if (out / "preflight.jsonl").exists() else []
        assert all(json.loads(line) for line in lines)
    finally:
        subprocess.run(["umount", str(out)], capture_output=True)


def test_the_checkpoint_write_probe_fails_on_a_full_disk(tmp_path: Path) -> None:
    from preflight.probe.host import probe_disk

    place = tmp_path / "ckpt"
    if not _small_tmpfs(place, "512k"):
        pytest.skip("needs root to mount a 512 KiB tmpfs for the checkpoint directory")
    try:
        facts = probe_disk(str(place))
        assert facts.writable is False and facts.problem and "No space left on device" in facts.problem
    finally:
        subprocess.run(["umount", str(place)], capture_output=True)
