"""A signal at the very start of a run never loses the report (issue 16 item 5).

SIGTERM or SIGINT the moment the run's lock file appears, the moment ``preflight.jsonl`` appears, while
pytest's session starts and while it collects: every run must end with exit code 1, a valid
``preflight.json`` marked interrupted whose verdict the jsonl finish line repeats, no file left of the
run before it, and nothing of the run still alive. ``PREFLIGHT_TEST_EARLY_REPEAT=N`` runs each case N
times (the file-watching points race the run by design: each repetition lands a little later).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import as_foreground_job, validate_report
from tests.test_safety_e2e import HOSTILE, _env, _left_after

pytestmark = pytest.mark.e2e

REPEAT = int(os.environ.get("PREFLIGHT_TEST_EARLY_REPEAT", "1"))
WATCHED = {"lock": ".preflight.lock", "jsonl": "preflight.jsonl"}
"""Points marked by a file of the run appearing in the report directory."""
STALLED = ("session", "collect")
"""Points where the hostile node plugin stalls the run (``PREFLIGHT_TEST_STALL``)."""
STALE = "STALE-OUTPUT-OF-AN-EARLIER-RUN"


def _plant_an_earlier_run(out: Path) -> None:
    out.mkdir(parents=True)
    for name in ("preflight.json", "preflight.html", "preflight-junit.xml", "preflight.jsonl"):
        (out / name).write_text(f'{{"verdict": "READY", "note": "{STALE}"}}\n')


def _wait_for(point: str, out: Path, mark: Path, proc: subprocess.Popen[str], limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    watched = out / WATCHED[point] if point in WATCHED else mark
    while time.monotonic() < deadline:
        if point == "jsonl":
            try:
                if STALE not in watched.read_text():
                    return  # this run's own (empty) line log, not the planted one
            except OSError:
                pass
        elif point == "lock":
            if watched.exists():
                return
        elif mark.exists():
            time.sleep(0.2)
            return
        assert proc.poll() is None, f"preflight ended before reaching {point}: {proc.communicate()}"
        time.sleep(0.001)
    raise AssertionError(f"preflight never reached {point}")


@pytest.mark.parametrize("repeat", range(REPEAT))
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("point", [*WATCHED, *STALLED])
def test_early_signal_leaves_an_interrupted_report(tmp_path: Path, point: str, how: str, repeat: int) -> None:
    out = tmp_path / "reports"
    _plant_an_earlier_run(out)
    mark = tmp_path / "stalled"
    run = str(tmp_path)
    env = {"PREFLIGHT_TEST_RUN": run, "PREFLIGHT_TEST_STALL": point if point in STALLED else "",
           "PREFLIGHT_TEST_STALL_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "--report-dir", str(out), "-k", "planted_pass",
                             "--", *HOSTILE], env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=as_foreground_job)
    try:
        _wait_for(point, out, mark, proc)
        proc.send_signal(getattr(signal, how))
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert "Traceback" not in stdout + stderr and "INTERNALERROR" not in stdout + stderr, stderr[-3000:]
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    assert report["run"]["interrupted"] is True, report["run"]
    assert report["verdict"] == "NOT READY" and report["run"]["exit_code"] == 1
    assert stdout.strip().splitlines()[-1].startswith("NOT READY  reports: ")
    assert (out / "preflight.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    finish = [json.loads(line) for line in (out / "preflight.jsonl").read_text().splitlines()
              if json.loads(line)["type"] == "finish"]
    assert [(f["verdict"], f["interrupted"]) for f in finish] == [("NOT READY", True)]
    left = [p.name for p in out.iterdir() if p.is_file() and STALE in p.read_text(errors="replace")]
    assert left == [], "an earlier run's outputs were left beside this run's report"
    assert _left_after(run, within_s=1.0) == []  # children killed with preflight are reaped by their parents
