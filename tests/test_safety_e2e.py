"""Fault injection against the real ``preflight`` command: secrets, hostile markup, signals, bad input.

Every run is ``python -m preflight`` in a child process with test-only plugins
(``tests.fakes.hostile_node``, ``tests.fakes.faulty_ddp``) and test-only checks
(``tests/fakes/planted_checks.py``) that plant fake secrets and markup in every field a node or a
check can fill. A test marked ``xfail(strict=True)`` documents a promise the framework breaks
today; it turns into a failure (XPASS) as soon as the framework keeps it, so the mark gets removed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psutil
import pytest

from preflight import cli
from preflight.settings import OPTIONS
from preflight.report.ownership import LOGS
from tests.conftest import REPO_ROOT, as_foreground_job, validate_report
from tests.fakes import planted
from tests.fakes.replayed_torch import STORE_ENV

pytestmark = pytest.mark.e2e

PLANTED_CHECKS = str(REPO_ROOT / "tests" / "fakes" / "planted_checks.py")
# --confcutdir: no conftest.py above the planted checks' folder loads in the child run, so tests/conftest.py
# (which imports torch into the test process) does not import torch into preflight's own, as no real run does
HOSTILE = ["-p", "tests.fakes.hostile_node", f"--confcutdir={REPO_ROOT / 'tests' / 'fakes'}", PLANTED_CHECKS]
REPORT_FILES = ("preflight.json", "preflight.html", "preflight.jsonl", "preflight-junit.xml")

def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # the test fakes' switches off; the session's recorded torch answers kept (tests/fakes/replayed_torch.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_TEST_") or k == STORE_ENV}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _preflight(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "preflight", *args], capture_output=True, text=True,
                          env=_env(env), cwd=cwd, timeout=timeout)


def _processes_of(run: str, command_part: str = "") -> list[psutil.Process]:
    """Live processes started for the run tagged ``PREFLIGHT_TEST_RUN=run`` (they inherit it), so
    runs of other tests on the same machine are never mistaken for leftovers."""
    found = []
    for process in psutil.process_iter(["status", "cmdline"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if process.environ().get("PREFLIGHT_TEST_RUN") != run:
                continue
        except (psutil.Error, OSError):
            continue
        if command_part in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def _left_after(run: str, within_s: float = 1.0) -> list[str]:
    """The command lines of the run's processes still alive ``within_s`` after it ended (children killed with
    preflight are reaped by their parents meanwhile): polled, so a clean run answers at once."""
    deadline = time.monotonic() + within_s
    while (left := _processes_of(run)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [" ".join(p.cmdline()) for p in left]


# ---------------------------------------------------------------------------------------------
# (1) Secrets: planted in the environment, in node facts and in check texts
# ---------------------------------------------------------------------------------------------


# Two runs on a hostile node with secrets in the environment, both with the planted checks: one CPU
# launch whose real DDP step passes (worker logs) and whose FSDP phase then prints and raises planted
# secrets on every rank (rank logs, error files, torchrun's log), and the GPU checks against a fake NVML
# whose GPU name carries markup.
RUNS: dict[str, tuple[list[str], dict[str, str], list[str]]] = {
    "cpu-launch": (["--cpu", "--strategy", "ddp,fsdp", "-k", "planted or ddp or fsdp"], {},
                   ["-p", "tests.fakes.planted_phase"]),
    "fake-gpu": (["-m", "not distributed"], {"PREFLIGHT_TEST_HOSTILE_GPU": "1"}, []),
}


@pytest.fixture(scope="module")
def _runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {}


def _run_once(runs: dict[str, dict[str, Any]], name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if name not in runs:
        selection, env, plugins = RUNS[name]
        out = tmp_path_factory.mktemp(name) / "reports"
        result = _preflight(["--report-dir", str(out), *selection, "--", *plugins, *HOSTILE],
                            env={**planted.ENVIRONMENT, **env})
        runs[name] = {"name": name, "out": out, "result": result,
                      "report": json.loads((out / "preflight.json").read_text())}
    return runs[name]


@pytest.fixture(scope="module", params=list(RUNS))
def leaky_run(request: pytest.FixtureRequest, _runs: dict[str, dict[str, Any]],
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each planted run, once per module."""
    return _run_once(_runs, request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def gpu_run(_runs: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run whose GPU name (from the fake NVML) carries markup."""
    return _run_once(_runs, "fake-gpu", tmp_path_factory)


def _leaks(text: str) -> list[str]:
    return [secret for secret in planted.LEAKS if secret in text]


@pytest.mark.parametrize(
    "name",
    REPORT_FILES,
)
def test_no_planted_secret_in_a_report_file(leaky_run: dict[str, Any], name: str) -> None:
    path = leaky_run["out"] / name
    assert path.is_file(), f"{name} was not written"
    assert _leaks(path.read_text(encoding="utf-8")) == []


def test_no_planted_secret_in_any_other_file(leaky_run: dict[str, Any]) -> None:
    others = [p for p in leaky_run["out"].rglob("*") if p.is_file() and p.name not in REPORT_FILES]
    if leaky_run["name"] != "fake-gpu":
        assert others, "the DDP launch should have left its logs"
    for path in others:
        assert _leaks(path.read_text(encoding="utf-8", errors="replace")) == [], path


def test_rank_logs_and_error_files_are_scrubbed_not_lost(_runs: dict[str, dict[str, Any]],
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    """The ranks wrote the secrets raw (tests/workers/planted.py); what is left says where they were."""
    logs = _run_once(_runs, "cpu-launch", tmp_path_factory)["out"] / LOGS / "rehearsal"
    for rank in (0, 1):
        log = (logs / f"rank{rank}.log").read_text()
        assert f"rank {rank} could not download https://deploy:[REDACTED]@artifacts.example/simple with token " \
               "ghp_[REDACTED] (hf_[REDACTED])" in log
        assert "MASTER_ADDR was admin:[REDACTED]@10.0.0.5" in log
        error = json.loads((logs / f"rank{rank}.fsdp.error.json").read_text())
        assert "ghp_[REDACTED]" in error["error"] and "hf_[REDACTED]" in error["traceback"]


def test_every_file_under_the_report_directory_is_private(leaky_run: dict[str, Any]) -> None:
    """Links are not files of the run (the launcher's staged import path links to the package)."""
    out: Path = leaky_run["out"]
    paths = [p for p in [out, *out.rglob("*")] if not p.is_symlink()]
    loose = [f"{oct(p.lstat().st_mode & 0o777)} {p.relative_to(out)}" for p in paths
             if p.lstat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)]
    assert loose == []


def test_no_planted_secret_on_the_terminal(leaky_run: dict[str, Any]) -> None:
    result = leaky_run["result"]
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "PLANTED_LEAK" in result.stdout  # the problem is shown, its secrets are not
    assert _leaks(result.stdout + result.stderr) == []


def test_redacted_text_still_explains_the_problem(leaky_run: dict[str, Any]) -> None:
    checks = {c["name"]: c for c in leaky_run["report"]["checks"]}
    leak = checks["test_planted_fail_with_secrets"]
    assert leak["summary"] == ("could not fetch https://deploy:[REDACTED]@artifacts.example/simple "
                               "with ghp_[REDACTED]")
    assert leak["details"]["token"] == "[REDACTED]"
    assert "[REDACTED PRIVATE KEY]" in leak["evidence"]["stderr"]
    assert checks["test_planted_crash"]["code"] == "CHECK_CRASHED"
    assert "password=[REDACTED]" in checks["test_planted_crash"]["summary"]


def test_environment_in_the_report_is_allow_listed_and_redacted(leaky_run: dict[str, Any]) -> None:
    environment = leaky_run["report"]["environment"]
    for name in ("HF_TOKEN", "GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert name not in environment
    assert environment["NCCL_IB_TOKEN"] == "[REDACTED]"
    assert environment["NCCL_PLUGIN_INDEX"] == "https://deploy:[REDACTED]@artifacts.example/simple"
    assert environment["MASTER_ADDR"] == "admin:[REDACTED]@10.0.0.5"
    # data stays data in the JSON; escaping is the HTML's job
    assert environment["TORCH_PLANTED_MARKUP"] == planted.ENVIRONMENT["TORCH_PLANTED_MARKUP"]


def test_the_report_is_valid_and_real_checks_still_work(leaky_run: dict[str, Any]) -> None:
    report = leaky_run["report"]
    validate_report(report)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    if leaky_run["name"] == "cpu-launch":
        assert statuses["test_ddp_step"] == "PASS"
        fsdp = next(c for c in report["checks"] if c["name"] == "test_strategy_step[fsdp]")
        assert (fsdp["status"], fsdp["code"]) == ("FAIL", "FSDP_RANK_CRASHED")
        assert "could not download https://deploy:[REDACTED]@artifacts.example/simple" in fsdp["summary"]
    else:
        assert statuses["test_gpu_count"] == "PASS" and statuses["test_gpu_ecc[gpu0]"] == "PASS"
        assert [gpu["name"] for gpu in report["node"]["gpus"]["gpus"]] == [planted.GPU_NAME]


def test_deselected_checks_are_not_reported_as_not_run(leaky_run: dict[str, Any]) -> None:
    """Each planted run selects a few checks (-k, -m) and runs to its end."""
    result, report = leaky_run["result"], leaky_run["report"]
    assert " checks selected (" in result.stdout.strip().splitlines()[-1], result.stdout[-2000:]
    assert report["run"]["interrupted"] is False
    assert report["not_run"] == [], "checks left out by -k or -m are not checks that did not run"


# ---------------------------------------------------------------------------------------------
# (2) HTML: every node-provided value inert, restrictive CSP, no external loads
# ---------------------------------------------------------------------------------------------


_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})


class _Document(HTMLParser):
    """Every element, attribute and text run of an HTML document, as a browser would see them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in _VOID:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.text.setdefault(self._open[-1] if self._open else "", []).append(data)

    def all_text(self) -> str:
        return "".join(part for parts in self.text.values() for part in parts)


@pytest.fixture(scope="module")
def html_document(gpu_run: dict[str, Any]) -> _Document:
    return _Document((gpu_run["out"] / "preflight.html").read_text(encoding="utf-8"))


def test_html_has_no_active_element(html_document: _Document) -> None:
    tags = {tag for tag, _ in html_document.tags}
    assert not tags & {"script", "img", "svg", "iframe", "object", "embed", "link", "base", "form", "frame"}
    metas = [attrs for tag, attrs in html_document.tags if tag == "meta"]
    assert all(a.get("http-equiv", "").lower() != "refresh" for a in metas)


def test_html_has_no_event_handler_or_script_url(html_document: _Document) -> None:
    for tag, attrs in html_document.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert not [v for v in attrs.values() if "javascript:" in v.lower()], (tag, attrs)


def test_html_loads_nothing_from_outside(gpu_run: dict[str, Any], html_document: _Document) -> None:
    for tag, attrs in html_document.tags:
        for name in ("src", "href", "action", "data", "poster", "srcset"):
            assert not attrs.get(name, "").lower().startswith(("http:", "https:", "//")), (tag, attrs)
    styles = "".join(html_document.text.get("style", []))
    assert "@import" not in styles and "url(" not in styles
    raw = (gpu_run["out"] / "preflight.html").read_text(encoding="utf-8")
    assert "@import" not in raw


def test_html_has_a_restrictive_content_security_policy(html_document: _Document) -> None:
    policies = [a["content"] for tag, a in html_document.tags
                if tag == "meta" and a.get("http-equiv", "").lower() == "content-security-policy"]
    assert len(policies) == 1
    directives = {d.split()[0]: d.split()[1:] for d in policies[0].split(";") if d.strip()}
    assert directives["default-src"] == ["'none'"]
    assert directives.get("script-src", ["'none'"]) == ["'none'"]
    assert directives["base-uri"] == ["'none'"] and directives["form-action"] == ["'none'"]
    sources = [s for values in directives.values() for s in values]
    assert not [s for s in sources if s in ("*", "http:", "https:") or "://" in s]


@pytest.mark.parametrize(
    ("where", "text"),
    [("hostname (title)", planted.HOSTNAME), ("GPU name fact", planted.GPU_NAME),
     ("check title", "<b>Markup</b> in the title <script>alert('title')</script>"),
     ("check summary", f"summary {planted.MARKUP}"), ("remediation", f"remediation {planted.MARKUP}"),
     ("error text", f"RuntimeError: {planted.MARKUP} could not reach"),
     ("environment value", planted.ENVIRONMENT["TORCH_PLANTED_MARKUP"]),
     ("node fact key", f"planted{planted.MARKUP}")],
)  # fmt: skip
def test_hostile_text_is_shown_as_text(html_document: _Document, where: str, text: str) -> None:
    """The markup reached the page as readable text, so it was escaped and not dropped."""
    assert text in html_document.all_text(), where


def test_hostname_markup_stays_inside_the_title(html_document: _Document) -> None:
    assert planted.HOSTNAME in "".join(html_document.text.get("title", []))


# ---------------------------------------------------------------------------------------------
# (3) Interruption: SIGINT / SIGTERM at several points leave valid partial reports, no workers
# ---------------------------------------------------------------------------------------------

# point -> (-k selection, checks finished before the signal, checks that must be listed as not run)
POINTS: dict[str, tuple[str, set[str], set[str]]] = {
    "collect": ("planted_pass or planted_stall or ddp", set(), set()),
    "collected": ("planted_pass or planted_stall or ddp", set(),
                  {"::test_planted_pass", "::test_planted_stall", "test_ddp_step.py::test_ddp_step"}),
    "check": ("planted_pass or planted_stall or ddp", {"test_planted_pass"},
              {"::test_planted_stall", "test_ddp_step.py::test_ddp_step"}),
    "launch": ("planted_pass or ddp", {"test_planted_pass"}, {"test_ddp_step.py::test_ddp_step"}),
    "report": ("planted_pass", {"test_planted_pass"}, set()),
}


def _ranks_in_phase(report_dir: Path, phase: str) -> int:
    """Ranks of the rehearsal launch whose progress says they are in ``phase``."""
    found = 0
    for path in (report_dir / LOGS / "rehearsal").glob("rank*.progress"):
        try:
            found += json.loads(path.read_text())["phase"] == phase
        except (OSError, ValueError, KeyError):
            continue
    return found


def _rank_waits_in_the_step(report_dir: Path) -> bool:
    """Rank 0 is inside the DDP step, in its first collective, waiting on rank 1 (which sleeps from its first
    line: tests/workers/faulty.py)."""
    try:
        progress = json.loads((report_dir / LOGS / "rehearsal" / "rank0.progress").read_text())
    except (OSError, ValueError):
        return False
    return progress.get("phase") == "ddp" and str(progress.get("label", "")).startswith("building the DDP model")


def _wait_for(point: str, mark: Path, proc: subprocess.Popen[str], run: str, limit_s: float = 90) -> None:
    """Block until the run reaches ``point``: the stall plugin's mark, or both hung DDP ranks in the step."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"preflight ended before reaching {point}: {proc.communicate()}"
        if point == "launch":
            if _ranks_in_phase(mark.parent / "reports", "ddp") >= 2 and _rank_waits_in_the_step(mark.parent / "reports"):
                return
        elif mark.exists():
            time.sleep(0.3)
            return
        time.sleep(0.1)
    raise AssertionError(f"preflight never reached {point}")


@pytest.mark.parametrize(
    ("point", "how"),
    [
        ("collect", "SIGINT"), ("collect", "SIGTERM"), ("collected", "SIGTERM"),
        ("check", "SIGINT"), ("check", "SIGTERM"),
        ("launch", "SIGINT"), ("launch", "SIGTERM"), ("launch", "ctrl-c"),
        ("report", "SIGINT"), ("report", "SIGTERM"),
    ],
)  # fmt: skip
def test_interrupted_run_leaves_a_valid_partial_report(tmp_path: Path, point: str, how: str) -> None:
    out = tmp_path / "reports"
    mark = tmp_path / "stalled"
    selection, finished, not_run = POINTS[point]
    run = str(tmp_path)
    env = {"PREFLIGHT_TEST_STALL": point, "PREFLIGHT_TEST_STALL_MARK": str(mark), "PREFLIGHT_TEST_RUN": run}
    extra = ["--", *HOSTILE]
    if point == "launch":
        env["PREFLIGHT_TEST_FAULT"] = "hang:1"
        extra = ["--launch-timeout", "120", "--", "-p", "tests.fakes.faulty_ddp", *HOSTILE]
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "--cpu", "--report-dir", str(out), "-k", selection, *extra],
                            env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_foreground_job)
    try:
        _wait_for(point, mark, proc, run)
        signalled = time.monotonic()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
        else:
            proc.send_signal(getattr(signal, how))
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    assert took < 30, f"preflight needed {took:.0f} s to stop after {how}"
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    if point != "report":  # during report writing every check has finished: the report is complete
        assert report["run"]["interrupted"] is True
        assert report["verdict"] == "NOT READY" and report["run"]["exit_code"] == 1
    assert {c["name"] for c in report["checks"]} >= finished
    assert set(report["not_run"]) >= not_run
    assert (out / "preflight.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    lines = [json.loads(line) for line in (out / "preflight.jsonl").read_text().splitlines()]
    assert {r["name"] for r in lines if r["type"] == "check"} >= finished
    assert _left_after(run, within_s=1.0) == []  # killed workers are reaped by their parents


# ---------------------------------------------------------------------------------------------
# (4) Bad input: one line, exit code 2, never a traceback
# ---------------------------------------------------------------------------------------------

UNWRITABLE = ["--report-dir", "/proc/preflight-cannot-write-here"]  # stops a wrongly accepted value early
NUMERIC_OPTIONS = [o.name for o in OPTIONS if o.type is not None and o.type is not str]
CHOICE_OPTIONS = [o.name for o in OPTIONS if o.choices]


def _assert_one_line_usage_error(code: int, stdout: str, stderr: str, *, what: str) -> None:
    assert code == 2, f"{what}: exit code {code}\n{stdout[-1500:]}\n{stderr[-1500:]}"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("preflight: error: "), f"{what}: {stderr!r}"
    assert "Traceback" not in stdout + stderr


@pytest.mark.parametrize("value", ["abc", "-3", "0", "nan", "inf", "1e999", "", "2,5"])
@pytest.mark.parametrize("name", NUMERIC_OPTIONS)
def test_bad_number_is_one_line(capsys: pytest.CaptureFixture[str], name: str, value: str) -> None:
    code = cli.main([f"--{name}", value, *UNWRITABLE])
    captured = capsys.readouterr()
    _assert_one_line_usage_error(code, captured.out, captured.err, what=f"--{name} {value!r}")
    assert f"--{name}" in captured.err


@pytest.mark.parametrize("name", CHOICE_OPTIONS)
def test_bad_choice_is_one_line(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code = cli.main([f"--{name}", "no-such-choice", *UNWRITABLE])
    captured = capsys.readouterr()
    _assert_one_line_usage_error(code, captured.out, captured.err, what=f"--{name}")


@pytest.mark.parametrize("args", [["--no-such-option"], ["--report-dir"], ["-k"], ["--strict=yes"], ["stray"]])
def test_bad_option_is_one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code = cli.main([*UNWRITABLE, *args])
    captured = capsys.readouterr()
    _assert_one_line_usage_error(code, captured.out, captured.err, what=" ".join(args))
    assert "cannot write reports" not in captured.err


def test_report_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "reports"
    blocker.write_text("not a directory")
    for target in (blocker, blocker / "nested"):
        result = _preflight(["--report-dir", str(target)], cwd=tmp_path)
        _assert_one_line_usage_error(result.returncode, result.stdout, result.stderr, what=str(target))
        assert "cannot write reports" in result.stderr


@pytest.mark.parametrize("args", [["-k", "and and"], ["-m", "(("]])
def test_malformed_selection_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """pytest itself rejects the expression: one line, exit code 2, though in pytest's words."""
    result = _preflight(["--report-dir", str(tmp_path / "r"), *args], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-1500:] + result.stderr[-1500:]
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and args[1] in lines[0] and "expression" in lines[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_unknown_pytest_option_after_separator_is_one_line(tmp_path: Path) -> None:
    result = _preflight(["--report-dir", str(tmp_path / "r"), "--", "--no-such-pytest-option"], cwd=tmp_path)
    _assert_one_line_usage_error(result.returncode, result.stdout, result.stderr, what="-- --no-such-pytest-option")


@pytest.mark.parametrize(("value", "code"), [("0,,1", "CUDA_VISIBLE_DEVICES_MALFORMED"),
                                            ("GPU-zz,1", "CUDA_VISIBLE_DEVICES_MALFORMED"),
                                            ("x", "CUDA_VISIBLE_DEVICES_MALFORMED"),
                                            ("", "CUDA_VISIBLE_DEVICES_EMPTY")])
def test_malformed_cuda_visible_devices_is_a_clear_fail(tmp_path: Path, value: str, code: str) -> None:
    """The inventory area answers a malformed value with a FAIL (exit 1) naming what CUDA will do,
    not with a usage error (exit 2) as issue 9 item 4 words it: the variable belongs to the node
    the job will run on, and the report says what to write instead. No traceback either way."""
    out = tmp_path / "r"
    result = _preflight(["--report-dir", str(out), "-k", "cuda_visible_devices", "--", "-p", "tests.fakes.nvml_plugin",
                         "--fake-nvml=8x-h100-sxm"], env={"CUDA_VISIBLE_DEVICES": value}, cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert code in result.stdout and f"CUDA_VISIBLE_DEVICES={value!r}" in result.stdout
    report = json.loads((out / "preflight.json").read_text())
    check = next(c for c in report["checks"] if c["name"] == "test_cuda_visible_devices")
    assert check["status"] == "FAIL" and check["code"] == code and check["remediation"]
