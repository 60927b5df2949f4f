"""Whole runs under hostile conditions (issue 25 items 1, 2, 4 and 8), and what handling each means.

A :class:`FaultCase` names a run (one of :data:`RUNS`, started once per scratch folder and shared by
every case that asserts on it) and a check of its result that returns None when the fault was handled,
else why not. ``tests/test_bad_inputs.py`` runs each case as a test; ``python -m tests.bad_inputs``
counts them with the bad inputs.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.locations import checks_dir
from preflight.report.ownership import LOGS, OWNED_MARK

PASSWORD = "hunter2-not-a-real-one"
HF_TOKEN = "hf_" + "Zq8" * 12  # the shape of a Hugging Face token (hf_ + 36 letters and digits)
WANDB_KEY = "0f" * 20  # a W&B API key is 40 hex digits: nothing but its argument's name says it is one
SECRETS = (PASSWORD, HF_TOKEN, WANDB_KEY)
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # Latin-1 bytes in a path or an argument, as Python receives them


@dataclass(frozen=True)
class RunResult:
    """What one run left: its exit code, its output, and its scratch folder."""

    returncode: int
    stdout: str
    stderr: str
    tmp: Path
    report_dir: Path

    def report(self) -> dict[str, Any] | None:
        """The run's preflight.json, or None."""
        path = self.report_dir / "preflight.json"
        return json.loads(path.read_text()) if path.is_file() else None


@dataclass(frozen=True)
class RunSpec:
    """How to start a run: the command after the interpreter, its environment and folder, and which
    standard streams the caller leaves closed."""

    argv: list[str]
    cwd: Path
    report_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    closed: tuple[int, ...] = ()
    timeout_s: float = 300.0


@dataclass(frozen=True)
class FaultCase:
    """One fault: the run it needs and the check of what that run left (None: handled)."""

    id: str
    run: str
    check: Callable[[RunResult], str | None]
    needs: Callable[[], str | None] = lambda: None
    """Why the case cannot run here (a tmpfs needs root), or None."""


# -- the runs -----------------------------------------------------------------------------------------

LEAKY_SCRIPT = """\
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print("arguments:", sys.argv[1:], flush=True)
sys.stdout.write("progress\\0\\r HF_TOKEN=" + sys.argv[sys.argv.index("--hf_token") + 1] + "\\n")
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(8):
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
dist.destroy_process_group()
"""
"""A training script that prints its arguments (secrets among them) and one NUL byte into its rank log."""


def _project(tmp: Path) -> Path:
    """A project folder: TensorBoard events in ``logs/``, an executable ``bin/run.sh``, a leaky script."""
    project = tmp / "project"
    (project / "logs" / "tb").mkdir(parents=True)
    (project / "bin").mkdir()
    (project / "logs" / "tb" / "events.out.tfevents.1700000000.node").write_bytes(b"\x18\x00events")
    (project / "bin" / "run.sh").write_text("#!/bin/sh\nexec torchrun --standalone --nproc-per-node=gpu train.py\n")
    (project / "train.py").write_text(LEAKY_SCRIPT)
    for path, mode in (("logs", 0o755), ("logs/tb", 0o755), ("logs/tb/events.out.tfevents.1700000000.node", 0o644),
                       ("bin", 0o755), ("bin/run.sh", 0o755), ("train.py", 0o644)):
        (project / path).chmod(mode)
    return project


PROJECT_MODES = {"logs": 0o755, "logs/tb": 0o755, "logs/tb/events.out.tfevents.1700000000.node": 0o644,
                 "bin": 0o755, "bin/run.sh": 0o755, "train.py": 0o644}


def _preflight(*args: str) -> list[str]:
    return ["-m", "preflight", *args]


def _no_check_can_finish(tmp: Path) -> RunSpec:
    """``pytest checks/`` (no CLI pre-check) with a ``-k`` typo that selects no check: nothing is judged."""
    out = tmp / "reports"
    where = str(checks_dir())
    return RunSpec(["-m", "pytest", where, "--rootdir", where, "-c", os.devnull, "-p", "no:cacheprovider", "-q",
                    "-k", "shared_memroy", "--preflight-cpu", f"--preflight-report-dir={out}",
                    f"--junitxml={out / 'junit.xml'}", f"--preflight-prometheus={tmp / 'node.prom'}"], tmp, out)


def _op_cache_unusable(tmp: Path) -> RunSpec:
    """``pytest checks/`` (no CLI pre-check) with the op cache below a regular file, as on a read-only HOME."""
    (tmp / "a-file").write_text("")
    out = tmp / "reports"
    where = str(checks_dir())
    return RunSpec(["-m", "pytest", where, "--rootdir", where, "-c", os.devnull, "-p", "no:cacheprovider", "-q",
                    "-k", "deepspeed_ops or zero1", "--preflight-cpu", f"--preflight-report-dir={out}"], tmp, out,
                   env={"PREFLIGHT_TORCH_EXTENSIONS_DIR": str(tmp / "a-file" / "torch_extensions")})


def _broken_plugin(tmp: Path) -> RunSpec:
    out = tmp / "reports"
    return RunSpec(_preflight("--report-dir", str(out), "--oneline", "--prometheus", str(tmp / "node.prom"),
                              "--", "-p", "tests.fakes.broken_plugin"), tmp, out)


def _project_run(tmp: Path) -> RunSpec:
    project = _project(tmp)
    return RunSpec(_preflight("--report-dir", ".", "-k", "shared_memory or locked_memory"), project, project)


def _project_rehearse(tmp: Path) -> RunSpec:
    project = _project(tmp)
    return RunSpec(_preflight("rehearse", "--report-dir", ".", "--nproc", "1", "--warmup", "1", "--steps", "3",
                              "--no-sweep", "--", "train.py", "--password", PASSWORD, "--hf_token", HF_TOKEN,
                              f"--wandb_key={WANDB_KEY}", "--run-name", NOT_UTF8), project, project)


def _launch_secrets(tmp: Path) -> RunSpec:
    (tmp / "train.py").write_text("import torch\n")
    out = tmp / "reports"
    launch = f"torchrun --nproc-per-node=2 train.py --password {PASSWORD} --hf_token {HF_TOKEN} --wandb_key={WANDB_KEY}"
    return RunSpec(_preflight("--report-dir", str(out), "--launch", launch, "-k", "launch_command or script_traps",
                              "-v"), tmp, out)


def _report_dir_not_utf8(tmp: Path) -> RunSpec:
    out = tmp / f"reports-{NOT_UTF8}"
    return RunSpec(_preflight("--report-dir", str(out), "-k", "shared_memory"), tmp, out)


def _closed(fd: int) -> Callable[[Path], RunSpec]:
    def spec(tmp: Path) -> RunSpec:
        out = tmp / "reports"
        return RunSpec(_preflight("--report-dir", str(out), "-k", "shared_memory or locked_memory"), tmp, out,
                       closed=(fd,))
    return spec


def _logs_name_taken(tmp: Path) -> RunSpec:
    out = tmp / "reports"
    (out / LOGS).mkdir(parents=True)  # the user's own folder of that name, without preflight's mark
    (out / LOGS / "notes.txt").write_text("mine\n")
    return RunSpec(_preflight("--report-dir", str(out), "-k", "shared_memory"), tmp, out)


def _full_disk_junit(tmp: Path) -> RunSpec:
    tiny = tmp / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tiny)], check=True, capture_output=True)
    (tiny / "filler").write_bytes(b"x" * 52_000)  # 12 KiB left: the JUnit file of 40 checks does not fit
    out = tmp / "reports"
    return RunSpec(_preflight("--report-dir", str(out), "--junitxml", str(tiny / "junit.xml"), "-m",
                              "not distributed"), tmp, out)


RUNS: dict[str, Callable[[Path], RunSpec]] = {
    "no-check-can-finish": _no_check_can_finish,
    "op-cache-unusable": _op_cache_unusable,
    "broken-plugin": _broken_plugin,
    "project-dir": _project_run,
    "project-dir-rehearse": _project_rehearse,
    "launch-secrets": _launch_secrets,
    "report-dir-not-utf8": _report_dir_not_utf8,
    "stdout-closed": _closed(1),
    "stderr-closed": _closed(2),
    "logs-name-taken": _logs_name_taken,
    "full-disk-junit": _full_disk_junit,
}


def start(repo: Path, name: str, tmp: Path) -> RunResult:
    """Start run ``name`` in ``tmp`` against the checkout ``repo`` and wait for it."""
    spec = RUNS[name](tmp)
    env = {**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "100", **spec.env}

    def close_streams() -> None:
        for fd in spec.closed:
            os.close(fd)

    try:
        done = subprocess.run([sys.executable, *spec.argv], cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=spec.timeout_s, preexec_fn=close_streams)
    finally:
        if name == "full-disk-junit":  # what the full disk holds is kept before it goes with the mount
            if (tmp / "tiny" / "junit.xml").exists():
                shutil.copyfile(tmp / "tiny" / "junit.xml", tmp / "junit-left.xml")
            subprocess.run(["umount", str(tmp / "tiny")], capture_output=True)
    return RunResult(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"),
                     tmp, spec.report_dir)


_STARTED: dict[tuple[str, str], RunResult] = {}


def run_fault(repo: Path, case: FaultCase, scratch: Path) -> tuple[bool, str]:
    """Run (or reuse) the case's run under ``scratch``, then check it: (handled, why not / how)."""
    missing = case.needs()
    if missing is not None:
        return True, f"not applicable here: {missing}"
    if not case.run:  # judged in-process, on what a run would see
        why = case.check(RunResult(0, "", "", scratch, scratch))
        return (True, "handled") if why is None else (False, why)
    key = (str(scratch), case.run)
    if key not in _STARTED:
        tmp = scratch / case.run
        tmp.mkdir(parents=True, exist_ok=True)
        _STARTED[key] = start(repo, case.run, tmp)
    why = case.check(_STARTED[key])
    return (True, "handled") if why is None else (False, why)


# -- the checks -----------------------------------------------------------------------------------------


def _no_traceback(result: RunResult) -> str | None:
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if "Traceback" in text or "INTERNALERROR" in text:
            return f"a traceback on {name}: {text.strip().splitlines()[-1] if text.strip() else ''}"
    return None


def _error_verdict(result: RunResult) -> str | None:
    report = result.report()
    if report is None:
        return "no preflight.json"
    error = report["run"].get("error") or {}
    if report["verdict"] != "ERROR" or error.get("code") != "NO_CHECK_FINISHED":
        return f"verdict {report['verdict']}, run.error {error.get('code')}"
    if report["run"]["exit_code"] != 2 or "no check matches the selection" not in error.get("summary", ""):
        return f"exit code {report['run']['exit_code']}, cause {error.get('summary')!r}"
    return None


def _op_cache_named(result: RunResult) -> str | None:
    report = result.report()
    if report is None:
        return "no preflight.json"
    ops = next((c for c in report["checks"] if c["id"].endswith("test_deepspeed_ops")), None)
    if ops is None or ops["status"] != "ERROR" or ops.get("code") != "OP_CACHE_UNUSABLE":
        return f"the op build check is {ops and (ops['status'], ops.get('code'))}"
    if "a-file/torch_extensions" not in ops["summary"] or report["verdict"] != "NOT READY":
        return f"verdict {report['verdict']}, summary {ops['summary']!r}"
    return _no_traceback(result)


def _error_html(result: RunResult) -> str | None:
    html = (result.report_dir / "preflight.html").read_text() if (result.report_dir / "preflight.html").exists() else ""
    if 'class="verdict ERROR"' not in html or "NO_CHECK_FINISHED" not in html or ">READY<" in html:
        return "the HTML does not show the ERROR verdict and its code"
    return None


def _error_prometheus(result: RunResult) -> str | None:
    path = result.tmp / "node.prom"
    text = path.read_text() if path.exists() else ""
    if 'preflight_verdict{verdict="ERROR"} 1.0' not in text or 'preflight_verdict{verdict="READY"} 1.0' in text:
        return "the Prometheus textfile does not say ERROR"
    if "preflight_exit_code 2.0" not in text:
        return "the Prometheus textfile's exit code is not 2"
    return None


def _error_junit(result: RunResult) -> str | None:
    path = result.report_dir / "junit.xml"
    text = path.read_text() if path.exists() else ""
    if 'errors="0"' in text or "<error" not in text:
        return "the JUnit file shows no error (CI would pass the run)"
    return None


def _broken_plugin_oneline(result: RunResult) -> str | None:
    lines = result.stdout.strip().splitlines()
    if result.returncode != 2 or not lines or not lines[-1].startswith("ERROR: NO_CHECK_FINISHED - "):
        return f"exit code {result.returncode}, last line {lines[-1] if lines else ''!r}"
    report = result.report() or {"run": {}}
    if "OSError" not in lines[-1] or "Read-only file system" not in str(report["run"].get("error")):
        return f"the cause is not named: {lines[-1]!r}, run.error {report['run'].get('error')}"
    prom = (result.tmp / "node.prom").read_text() if (result.tmp / "node.prom").exists() else ""
    if 'preflight_verdict{verdict="ERROR"} 1.0' not in prom:
        return "the Prometheus textfile does not say ERROR"
    return _no_traceback(result)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _project_untouched(result: RunResult) -> str | None:
    project = result.report_dir
    events = project / "logs" / "tb" / "events.out.tfevents.1700000000.node"
    if not events.exists() or events.read_bytes() != b"\x18\x00events":
        return "the user's logs/ lost its TensorBoard events"
    changed = {name: oct(_mode(project / name)) for name, mode in PROJECT_MODES.items() if _mode(project / name) != mode}
    if changed:
        return f"the user's files were re-moded: {changed}"
    report = result.report()
    if report is None:
        return f"no report (exit {result.returncode}): {result.stderr.strip()[-300:]}"
    if not (project / LOGS / OWNED_MARK).is_file():
        return f"preflight's own folder {LOGS}/ has no mark"
    if _mode(project / "preflight.json") != 0o600 or _mode(project / LOGS) != 0o700:
        return "preflight's own files are not private"
    return None


def _no_secret(result: RunResult) -> str | None:
    places = [("stdout", result.stdout), ("stderr", result.stderr)]
    for path in sorted(p for p in result.report_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        if "logs" in path.relative_to(result.report_dir).parts[:1] or path.name == "train.py":
            continue  # the user's own files
        places.append((str(path.relative_to(result.report_dir)), path.read_bytes().decode(errors="replace")))
    leaks = [f"{secret[:6]}... in {where}" for where, text in places for secret in SECRETS if secret in text]
    if leaks:
        return "secrets left: " + ", ".join(leaks)
    if result.report() is None:
        return f"no report (exit {result.returncode})"
    return None


def _nul_log_scrubbed(result: RunResult) -> str | None:
    log = result.report_dir / LOGS / "rehearse-1ranks" / "rank0.log"
    if not log.exists():
        return "no rank log"
    data = log.read_bytes()
    if b"\0" not in data or b"HF_TOKEN=hf_[REDACTED]" not in data:
        return "the rank log with a NUL byte was not scrubbed (or lost its NUL)"
    return None


def _exit_code_agrees(result: RunResult) -> str | None:
    report = result.report()
    if report is None:
        return f"no report (exit {result.returncode}): {result.stderr.strip()[-300:]}"
    if report["run"]["exit_code"] != result.returncode:
        return f"exit code {result.returncode}, the JSON says {report['run']['exit_code']}"
    missing = [n for n in ("preflight.html", "preflight-junit.xml") if not (result.report_dir / n).exists()]
    if missing:
        return f"not written: {', '.join(missing)}"
    return _no_traceback(result)


def _complete_report(result: RunResult) -> str | None:
    report = result.report()
    if report is None:
        return "no report"
    if report["verdict"] == "ERROR" or len(report["checks"]) != 2:
        return f"verdict {report['verdict']} with {len(report['checks'])} checks"
    if report["run"]["exit_code"] != result.returncode:
        return f"exit code {result.returncode}, the JSON says {report['run']['exit_code']}"
    return _no_traceback(result)


def _refused_untouched(result: RunResult) -> str | None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.returncode != 2 or len(lines) != 1 or "was not made by preflight" not in lines[0]:
        return f"exit code {result.returncode}, stderr {result.stderr.strip()[-300:]!r}"
    if (result.report_dir / LOGS / "notes.txt").read_text() != "mine\n":
        return "the user's folder was changed"
    return None


def _junit_whole_or_absent(result: RunResult) -> str | None:
    junit = result.tmp / "junit-left.xml"  # what the full disk held when the run ended
    messages = [line for line in result.stderr.splitlines() if "could not write the JUnit XML" in line]
    report = result.report()
    if report is None or len(messages) != 1:
        return f"report {'missing' if report is None else 'written'}, {len(messages)} JUnit messages"
    if "No space left on device" not in messages[0]:
        return messages[0]
    if junit.exists():
        return f"a truncated JUnit file was left ({junit.stat().st_size} bytes)"
    if result.returncode != report["run"]["exit_code"]:
        return f"exit code {result.returncode}, the JSON says {report['run']['exit_code']}"
    return _no_traceback(result)


def _both(*checks: Callable[[RunResult], str | None]) -> Callable[[RunResult], str | None]:
    def check(result: RunResult) -> str | None:
        return next((why for why in (c(result) for c in checks) if why is not None), None)
    return check


# ``ps -eo pid,ppid,args`` on this machine while ``preflight rehearse`` ran a script beside a ``preflight``
# run's launch (2026-12-01; paths shortened, the DataLoader worker added as torch starts one), plus a stray
# torchrun of an earlier job: what either preflight's leftover check sees.
BESIDE_A_REHEARSAL = (
    (5880, 1, "/venv/bin/python -m preflight rehearse --report-dir rr --nproc 1 --warmup 1 --steps 300 -- slow.py"),
    (6077, 5880, "/venv/bin/python -m torch.distributed.run --standalone --nproc-per-node=1 --max-restarts=0 "
                 "--monitor-interval=0.1 /venv/lib/python3.11/site-packages/preflight/rehearse/bootstrap.py slow.py"),
    (6102, 6077, "/venv/bin/python -u /venv/lib/python3.11/site-packages/preflight/rehearse/bootstrap.py slow.py"),
    (6150, 6102, "/venv/bin/python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"),
    (9000, 1, "/venv/bin/python /venv/bin/preflight --cpu"),
    (5945, 9000, "/venv/bin/python -m torch.distributed.run --standalone --nproc-per-node=2 --max-restarts=0 "
                 "--monitor-interval=0.1 -m preflight.workers.rehearsal /tmp/r/preflight-logs/rehearsal/plan.json"),
    (5990, 5945, "/venv/bin/python -u -m preflight.workers.rehearsal /tmp/r/preflight-logs/rehearsal/plan.json"),
    (7001, 1, "/opt/conda/bin/python -m torch.distributed.run --nproc-per-node=8 train.py --epochs 3"),
)


def _rehearsal_is_a_preflight_run(result: RunResult) -> str | None:
    """``preflight`` beside ``preflight rehearse``, and the other way round: each names the other a preflight
    run in progress, never a leftover to kill; the stray torchrun beside them still is one."""
    from preflight.probe.host_processes import PREFLIGHT_RUN, ProcessInfo, training_processes

    table = [ProcessInfo(pid, ppid, args.split()[0].rsplit("/", 1)[-1], tuple(args.split()))
             for pid, ppid, args in BESIDE_A_REHEARSAL]
    for own in (9000, 5880):  # the preflight run, then the rehearsal
        found = {t.process.pid: t.reason for t in training_processes(table, own_pid=own)}
        leftovers = {pid for pid, reason in found.items() if reason != PREFLIGHT_RUN}
        if leftovers != {7001}:
            return f"seen from pid {own}: leftovers {sorted(leftovers)}, expected only the stray torchrun 7001"
    return None


def _needs_root_mount() -> str | None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a 64 KiB tmpfs needs root"
    return None


FAULT_CASES: tuple[FaultCase, ...] = (
    FaultCase("no-check-finished-json", "no-check-can-finish", _error_verdict),
    FaultCase("no-check-finished-html", "no-check-can-finish", _error_html),
    FaultCase("no-check-finished-prometheus", "no-check-can-finish", _error_prometheus),
    FaultCase("no-check-finished-junit", "no-check-can-finish", _error_junit),
    FaultCase("op-cache-unusable-named", "op-cache-unusable", _op_cache_named),
    FaultCase("plugin-crash-oneline-exit-2", "broken-plugin", _broken_plugin_oneline),
    FaultCase("report-dir-dot-keeps-user-files", "project-dir", _project_untouched),
    FaultCase("rehearse-report-dir-dot-keeps-user-files", "project-dir-rehearse", _project_untouched),
    FaultCase("rehearse-script-arg-secrets", "project-dir-rehearse", _no_secret),
    FaultCase("rehearse-rank-log-with-nul-scrubbed", "project-dir-rehearse", _nul_log_scrubbed),
    FaultCase("rehearse-script-arg-not-utf8", "project-dir-rehearse", _exit_code_agrees),
    FaultCase("launch-secrets", "launch-secrets", _no_secret),
    FaultCase("report-dir-not-utf8", "report-dir-not-utf8", _exit_code_agrees),
    FaultCase("stdout-closed", "stdout-closed", _complete_report),
    FaultCase("stderr-closed", "stderr-closed", _complete_report),
    FaultCase("logs-folder-name-taken", "logs-name-taken", _refused_untouched),
    FaultCase("full-disk-junit", "full-disk-junit", _junit_whole_or_absent, needs=_needs_root_mount),
    FaultCase("rehearse-beside-preflight-not-leftover", "", _rehearsal_is_a_preflight_run),
)
