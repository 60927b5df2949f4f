"""Bad inputs and hostile conditions, each with what handling it cleanly means (issues 16 and 25).

* :data:`CASES`: bad files for the four sub-commands that read what a person hands them; each
  :class:`BadInput` builds its input under a scratch directory and names the fragment the one-line
  refusal must contain.
* :data:`OPTION_CASES`: bad values for the run's file and number options, ``preflight rehearse`` and
  ``preflight size`` (a FIFO, ``/dev/zero``, YAML for JSON, ``--gpus 10000000``, an unwritable cache
  folder): refused in one line, exit 2, without blocking.
* :data:`FAULT_CASES` (``tests/bad_runs.py``): whole runs under hostile conditions (no check able to
  finish, a project directory as the report directory, secrets in command lines, closed standard
  streams, non-UTF-8 paths, a full disk, another preflight running): each a clear verdict or one line,
  nothing lost, leaked or left.

``tests/test_bad_inputs.py`` runs them (in-process where nothing can block, else in a child process);
``python -m tests.bad_inputs [REPO]`` runs every case in a child process against the checkout REPO
(default: this one), each under a deadline and a memory cap, and counts those handled cleanly.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fleet_reports import ddp_check, make_report, slow_p2p

COMMANDS = ("topology", "nccl-log", "report", "merge")
OVER_CAP = 300 * 1024 * 1024


@dataclass(frozen=True)
class BadInput:
    """One bad input: ``make(tmp)`` returns the path to hand the command; stdin from ``stdin``."""

    id: str
    commands: tuple[str, ...]
    make: Callable[[Path], str]
    message: str
    stdin: str | None = None  # a file to feed as standard input; the path argument is then '-'


def argv(case: BadInput, command: str, path: str, tmp: Path) -> list[str]:
    """The command line of ``case`` for ``command``."""
    extra = {"report": ["--oneline"] if path == "-" else ["--out", str(tmp / "out.html")],
             "merge": ["--out", str(tmp / "fleet")]}.get(command, [])
    return [command, path, *extra]


def _write(name: str, content: bytes | str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        path = tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return str(path)
    return make


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "pipe")
    return str(tmp / "pipe")


def _directory(tmp: Path) -> str:
    (tmp / "a-directory").mkdir()
    return str(tmp / "a-directory")


def _socket(tmp: Path) -> str:
    path = tmp / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))  # the socket file stays after the socket is closed
    return str(path)


def _sparse(tmp: Path) -> str:
    path = tmp / "huge.log"
    with open(path, "wb") as handle:
        handle.truncate(OVER_CAP)  # sparse: takes no disk
    return str(path)


def _link_to_zero(tmp: Path) -> str:
    (tmp / "capture.txt").symlink_to("/dev/zero")
    return str(tmp / "capture.txt")


def _dangling(tmp: Path) -> str:
    (tmp / "gone.txt").symlink_to(tmp / "never-there")
    return str(tmp / "gone.txt")


def _fixed(path: str) -> Callable[[Path], str]:
    return lambda tmp: path


def good_report() -> dict[str, Any]:
    """A report exactly as preflight writes it."""
    return make_report("gpu-node-1", [ddp_check(), slow_p2p()], gpu_name="NVIDIA H100 80GB HBM3", gpus=8)


def _report(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        data = copy.deepcopy(good_report())
        changed = change(data)
        path = tmp / "preflight.json"
        path.write_text(changed if isinstance(changed, str) else json.dumps(data if changed is None else changed))
        return str(path)
    return make


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or with ``...`` delete) the field at a dotted path like ``checks.0.status``."""
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if value is ...:
            del target[key]
        else:
            target[key] = value
    return change


def _field(path: str, value: Any) -> Callable[[Path], str]:
    """A real report with the field at ``path`` set to ``value`` (``...`` deletes it)."""
    return _report(_set(path, value))


def _deep_node(levels: int) -> Callable[[dict[str, Any]], str]:
    def change(data: dict[str, Any]) -> str:
        text = json.dumps(data)
        return text.replace('"node": {', '"node": {"x": ' + '{"x": ' * levels + "1" + "}" * levels + ", ", 1)
    return change


def _nan_duration(data: dict[str, Any]) -> str:
    return json.dumps(data).replace('"duration_s": 0.5', '"duration_s": NaN', 1)


def _chart_with_text(data: dict[str, Any]) -> None:
    data["checks"][0]["views"] = [{"kind": "chart", "title": "busbw", "data": {"width": 600, "height": 300,
                                   "plot": {"x0": "left", "x1": "right", "y0": 1, "y1": 2}}}]


ALL = COMMANDS
TEXT = ("topology", "nccl-log")
JSON = ("report", "merge")

CASES: tuple[BadInput, ...] = (
    BadInput("dev-zero", ALL, _fixed("/dev/zero"), "is a character device, not a regular file"),
    BadInput("dev-null", ALL, _fixed("/dev/null"), "is a character device, not a regular file"),
    BadInput("fifo", ALL, _fifo, "is a named pipe (FIFO), not a regular file"),
    BadInput("directory", ALL, _directory, "is a directory, not a regular file"),
    BadInput("unix-socket", ALL, _socket, "is a socket, not a regular file"),
    BadInput("symlink-to-dev-zero", ALL, _link_to_zero, "is a character device"),
    BadInput("missing", ALL, lambda tmp: str(tmp / "no-such-file"), "No such file or directory"),
    BadInput("dangling-symlink", ALL, _dangling, "No such file or directory"),
    BadInput("newline-in-name", ALL, lambda tmp: str(tmp / "two\nlines"), "No such file or directory"),
    BadInput("file-over-256-MiB", ALL, _sparse, "is 300 MiB, over the 256 MiB limit"),
    BadInput("stdin-over-256-MiB", ALL, _fixed("-"), "standard input is over the 256 MiB limit", stdin="/dev/zero"),
    BadInput("nul-bytes", TEXT, _write("core", b"\x7fELF\x02\x01\x01\x00\x00\x00"), "binary data"),
    BadInput("empty-text", TEXT, _write("empty.txt", ""), "empty"),
    BadInput("blank-lines-only", TEXT, _write("blank.txt", "\n  \n\t\n"), "empty"),
    BadInput("empty-json", JSON, _write("empty.json", ""), "not JSON"),
    BadInput("not-json", JSON, _write("r.json", "READY\n"), "not JSON"),
    BadInput("not-utf8", JSON, _write("r.json", b'{"verdict": "\xff\xfe"}'), "not JSON"),
    BadInput("nul-bytes-json", JSON, _write("core", b"\x7fELF\x02\x01\x01\x00\x00\x00"), "not JSON"),
    BadInput("nesting-200k", JSON, _write("deep.json", "[" * 200_000 + "]" * 200_000), "nested too deeply"),
    BadInput("node-nesting-200k", JSON, _report(_deep_node(200_000)), "nested too deeply"),
    BadInput("node-nesting-500", JSON, _report(_deep_node(500)), "nested more than 48 levels"),
    BadInput("top-level-array", JSON, _write("r.json", "[1, 2, 3]"), "no tool.name 'preflight'"),
    BadInput("top-level-string", JSON, _write("r.json", '"READY"'), "no tool.name 'preflight'"),
    BadInput("tool-a-string", JSON, _field("tool", "preflight"), "no tool.name 'preflight'"),
    BadInput("schema-version-3", JSON, _field("schema_version", "3.0"), "schema version '3.0'"),
    BadInput("schema-version-a-list", JSON, _field("schema_version", [1]), "schema version list"),
    BadInput("run-a-string", JSON, _field("run", "yesterday"), 'run is a string ("yesterday"), expected an object'),
    BadInput("run-missing", JSON, _field("run", ...), "no 'run' field"),
    BadInput("node-a-list", JSON, _field("node", ["gpu-node-1"]), "node is an array, expected an object"),
    BadInput("node-null", JSON, _field("node", None), "node is null, expected an object"),
    BadInput("checks-hold-numbers", JSON, _field("checks", [1, 2]), "checks[0] is a number (1), expected an object"),
    BadInput("checks-hold-strings", JSON, _field("checks", ["test_x"]), "checks[0] is a string"),
    BadInput("checks-hold-null", JSON, _field("checks.1", None), "checks[1] is null"),
    BadInput("checks-an-object", JSON, _field("checks", {"a": 1}), "checks is an object, expected an array"),
    BadInput("check-without-status", JSON, _field("checks.1.status", ...), "checks[1] has no 'status'"),
    BadInput("check-status-unknown", JSON, _field("checks.0.status", "OK"), "checks[0].status is \"OK\""),
    BadInput("check-id-a-number", JSON, _field("checks.0.id", 7), "checks[0].id is a number (7)"),
    BadInput("warn-without-code", JSON, _field("checks.1.code", None), "checks[1].code is null, expected a string"),
    BadInput("metrics-an-object", JSON, _field("checks.0.metrics", {"ranks": 8}), "checks[0].metrics is an object"),
    BadInput("metric-without-name", JSON, _field("checks.0.metrics.0.name", ...), "checks[0].metrics[0] has no 'name'"),
    BadInput("evidence-not-text", JSON, _field("checks.0.evidence", {"log": [1]}), "evidence.log is an array"),
    BadInput("view-a-string", JSON, _field("checks.0.views", ["chart"]), "checks[0].views[0] is a string"),
    BadInput("verdict-unknown", JSON, _field("verdict", "GREEN"), "verdict is \"GREEN\", expected one of"),
    BadInput("summary-missing", JSON, _field("summary", ...), "no 'summary' field"),
    BadInput("summary-count-negative", JSON, _field("summary.FAIL", -1), "summary.FAIL is -1, below the minimum 0"),
    BadInput("exit-code-a-string", JSON, _field("run.exit_code", "0"), "run.exit_code is a string"),
    BadInput("duration-nan", JSON, _report(_nan_duration), "NaN is not a JSON value"),
    BadInput("started-at-not-a-date", JSON, _field("run.started_at", "yesterday"), "not an RFC 3339 date-time"),
    BadInput("environment-value-a-number", JSON, _field("environment", {"NCCL_DEBUG": 1}), "environment.NCCL_DEBUG"),
    BadInput("int-of-5000-digits", JSON, _field("run.exit_code", "@BIG@"), "not JSON"),
    BadInput("argv-holds-null", JSON, _field("run.argv", [None]), "run.argv[0] is null"),
    BadInput("not-run-a-string", JSON, _field("not_run", "none"), "not_run is a string"),
    BadInput("interrupted-a-string", JSON, _field("run.interrupted", "no"), "run.interrupted is a string"),
)

RENDER_CASES: tuple[BadInput, ...] = (
    # Valid against the schema (a view's data is free-form) but the chart cannot be drawn from it.
    BadInput("chart-with-text-coordinates", ("report",), _report(_chart_with_text), "cannot render its HTML"),
)


def _big_int_fix(path: str) -> None:
    """``@BIG@`` stands for an integer of 5000 digits (Python refuses to read more than 4300)."""
    file = Path(path)
    if file.is_file() and file.stat().st_size < 10_000_000:
        text = file.read_text(errors="replace")
        if '"@BIG@"' in text:
            file.write_text(text.replace('"@BIG@"', "9" * 5000))


def prepare(case: BadInput, tmp: Path) -> str:
    """Build the input of ``case`` under ``tmp`` and return the path argument."""
    path = case.make(tmp)
    _big_int_fix(path)
    return path


# -- bad option values (issue 25 items 1 and 5) ------------------------------------------------------


@dataclass(frozen=True)
class BadOption:
    """A bad value for an option: ``argv(tmp)`` is the command line after ``preflight``; ``env(tmp)`` adds
    variables; refused with exit 2 and one line containing ``message``. ``blocks``: a regression would
    block (a FIFO opened), so the case runs in a child process under a deadline."""

    id: str
    argv: Callable[[Path], list[str]]
    message: str
    env: Callable[[Path], dict[str, str]] | None = None
    blocks: bool = False


def _yaml_config(tmp: Path) -> str:
    path = tmp / "ds_config.yaml"  # what a YAML-reading launcher's config looks like, handed to DeepSpeed
    path.write_text("train_micro_batch_size_per_gpu: 4\nzero_optimization:\n  stage: 2\n  overlap_comm: true\n")
    return str(path)


def _sparse_config(tmp: Path) -> str:
    path = tmp / "ds_config.json"
    with open(path, "wb") as handle:
        handle.truncate(5 * 1024 * 1024)  # over the 4 MiB a config may be; sparse: takes no disk
    return str(path)


def _script(tmp: Path) -> str:
    path = tmp / "train.py"
    path.write_text("print('training')\n")
    return str(path)


def _not_a_folder(tmp: Path) -> dict[str, str]:
    """PREFLIGHT_TORCH_EXTENSIONS_DIR below a regular file: no user, root included, can write there."""
    (tmp / "a-file").write_text("")
    return {"PREFLIGHT_TORCH_EXTENSIONS_DIR": str(tmp / "a-file" / "torch_extensions")}


def _cores() -> int:
    return len(os.sched_getaffinity(0))


OPTION_CASES: tuple[BadOption, ...] = (
    BadOption("ds-config-dev-zero", lambda tmp: ["--ds-config", "/dev/zero"], "is a character device"),
    BadOption("ds-config-fifo", lambda tmp: ["--ds-config", _fifo(tmp)], "is a named pipe (FIFO)", blocks=True),
    BadOption("ds-config-directory", lambda tmp: ["--ds-config", _directory(tmp)], "is a directory"),
    BadOption("ds-config-yaml", lambda tmp: ["--ds-config", _yaml_config(tmp)], "looks like YAML, not JSON"),
    BadOption("ds-config-over-4-MiB", lambda tmp: ["--ds-config", _sparse_config(tmp)], "over the 4 MiB limit"),
    BadOption("script-dev-zero", lambda tmp: ["--script", "/dev/zero"], "script /dev/zero is a character device"),
    BadOption("script-fifo", lambda tmp: ["--script", _fifo(tmp)], "is a named pipe (FIFO)", blocks=True),
    BadOption("launch-script-dev-zero", lambda tmp: ["--launch", "torchrun --nproc-per-node=2 /dev/zero"],
              "the launch command's script /dev/zero is a character device"),
    BadOption("launch-script-fifo", lambda tmp: ["--launch", f"torchrun {_fifo(tmp)} --epochs 1"],
              "is a named pipe (FIFO)", blocks=True),
    BadOption("rehearse-from-report-dev-zero",
              lambda tmp: ["rehearse", "--from-report", "/dev/zero", "--", _script(tmp)], "is a character device"),
    BadOption("rehearse-from-report-fifo", lambda tmp: ["rehearse", "--from-report", _fifo(tmp), "--", _script(tmp)],
              "is a named pipe (FIFO)", blocks=True),
    BadOption("rehearse-script-dev-zero", lambda tmp: ["rehearse", "--", "/dev/zero"], "is a character device"),
    BadOption("rehearse-script-fifo", lambda tmp: ["rehearse", "--", _fifo(tmp)], "is a named pipe (FIFO)",
              blocks=True),
    BadOption("size-gpus-10000000", lambda tmp: ["size", "--model-params", "7B", "--gpus", "10000000",
                                                 "--gpu-memory", "80GB"], "at most 65536"),
    BadOption("size-gpus-5000-digits", lambda tmp: ["size", "--model-params", "7B", "--gpus", "9" * 5000,
                                                    "--gpu-memory", "80GB"], "is not a whole number"),
    BadOption("timeout-1e300", lambda tmp: ["--timeout", "1e300"], "at most 604800 seconds"),
    BadOption("nvml-timeout-1e20", lambda tmp: ["--nvml-timeout", "1e20"], "at most 604800 seconds"),
    BadOption("nproc-100000", lambda tmp: ["--nproc", "100000"], "at most 1024 ranks"),
    BadOption("cpu-nproc-over-cores", lambda tmp: ["--cpu", "--nproc", str(_cores() + 1)], "one per core at most"),
    BadOption("prometheus-unwritable", lambda tmp: ["--prometheus", "/sys/fs/preflight.prom", "-k", "shared_memory"],
              "cannot write the Prometheus textfile to /sys/fs/preflight.prom"),
    BadOption("torch-extensions-dir-unwritable", lambda tmp: ["-k", "shared_memory"],
              "PREFLIGHT_TORCH_EXTENSIONS_DIR=", env=_not_a_folder),
)


def option_argv(case: BadOption, tmp: Path) -> list[str]:
    """The command line of ``case`` (a run's report directory in the scratch folder, never ./reports)."""
    argv = case.argv(tmp)
    if argv and argv[0] in ("rehearse", "size"):
        return argv
    return ["--report-dir", str(tmp / "reports"), *argv]


def run_option_child(repo: Path, case: BadOption, timeout_s: float = 60.0) -> tuple[bool, str]:
    """Run one option case in a child process against ``repo``; (handled cleanly, why not)."""
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        argv = option_argv(case, tmp)
        env = {**os.environ, "PYTHONPATH": str(repo), **(case.env(tmp) if case.env else {})}
        try:
            done = subprocess.run([sys.executable, "-m", "preflight", *argv], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, errors="replace", env=env, cwd=tmp,
                                  timeout=timeout_s, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            return False, f"still running after {timeout_s:.0f} s"
    return _one_line(done, case.message)


def _one_line(done: subprocess.CompletedProcess[str], message: str) -> tuple[bool, str]:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if "Traceback" in done.stderr:
        return False, f"traceback: {lines[-1] if lines else ''}"
    if done.returncode != 2:
        return False, f"exit code {done.returncode}"
    if len(lines) != 1:
        return False, f"{len(lines)} lines on stderr"
    if message not in lines[0]:
        return False, f"the line does not say {message!r}: {lines[0]}"
    return True, lines[0]


def every_case() -> list[tuple[BadInput, str]]:
    """(case, command) for every bad input and every command it applies to."""
    return [(case, command) for case in (*CASES, *RENDER_CASES) for command in case.commands]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * 1024**3, 4 * 1024**3))


def run_child(repo: Path, case: BadInput, command: str, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Run one case in a child process against ``repo``; (handled cleanly, why not)."""
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        path = prepare(case, tmp)
        env = {**os.environ, "PYTHONPATH": str(repo)}
        stdin = open(case.stdin, "rb") if case.stdin else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            done = subprocess.run([sys.executable, "-m", "preflight", *argv(case, command, path, tmp)], stdin=stdin,
                                  capture_output=True, text=True, errors="replace", env=env, cwd=tmp,
                                  timeout=timeout_s, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            return False, f"still running after {timeout_s:.0f} s"
        finally:
            if case.stdin:
                stdin.close()  # type: ignore[union-attr]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if "Traceback" in done.stderr:
        return False, f"traceback: {lines[-1] if lines else ''}"
    if done.returncode != 2:
        return False, f"exit code {done.returncode}"
    if len(lines) != 1:
        return False, f"{len(lines)} lines on stderr"
    return True, lines[0]


# -- preflight rehearse: usage errors found before anything runs (issue 25 items 3 and 8) ----------------
# Appended as a block of its own: it wraps argv() and every_case() so the tables above stay as they are.


def _train_py(tmp: Path) -> Path:
    script = tmp / "train.py"
    script.write_text("def train_step():\n    pass\n")
    return script


def _unwritable_junit(tmp: Path) -> str:
    _train_py(tmp)
    (tmp / "a-file").write_text("")
    return str(tmp / "a-file" / "junit.xml")  # its parent is a file


def _missing_python(tmp: Path) -> str:
    _train_py(tmp)
    return str(tmp / "no-venv" / "bin" / "python")


def _script_only(tmp: Path) -> str:
    return str(_train_py(tmp))


REHEARSE_FLAGS = {
    "rehearse-junit-under-a-file": ["--junitxml"],
    "rehearse-python-missing": ["--python"],
    "rehearse-command-python-missing": [],
    "rehearse-step-function-missing": ["--step-function", "sgd_update", "--"],
    "rehearse-step-function-not-a-name": ["--step-function", "x y", "--"],
}
REHEARSE_CASES: tuple[BadInput, ...] = (
    BadInput("rehearse-junit-under-a-file", ("rehearse",), _unwritable_junit, "cannot write the JUnit XML to"),
    BadInput("rehearse-python-missing", ("rehearse",), _missing_python, "no such interpreter"),
    BadInput("rehearse-command-python-missing", ("rehearse",), _missing_python, "no such interpreter"),
    BadInput("rehearse-step-function-missing", ("rehearse",), _script_only, "defines no function of that name"),
    BadInput("rehearse-step-function-not-a-name", ("rehearse",), _script_only, "takes a function name"),
)

_file_argv = argv
_file_cases = every_case


def argv(case: BadInput, command: str, path: str, tmp: Path) -> list[str]:  # type: ignore[no-redef]  # noqa: F811 - wraps the one above
    """The command line of ``case`` for ``command`` (``rehearse``: the case's flags, then the script)."""
    if command != "rehearse":
        return _file_argv(case, command, path, tmp)
    flags = REHEARSE_FLAGS[case.id]
    if case.id == "rehearse-command-python-missing":
        return ["rehearse", "--", path, str(tmp / "train.py")]
    if flags and flags[-1] == "--":
        return ["rehearse", *flags, path]
    return ["rehearse", *flags, path, "--", str(tmp / "train.py")]


def every_case() -> list[tuple[BadInput, str]]:  # type: ignore[no-redef]  # noqa: F811 - wraps the one above
    """(case, command) for every bad input and every command it applies to, rehearse's included."""
    return [*_file_cases(), *((case, "rehearse") for case in REHEARSE_CASES)]


if __name__ == "__main__":
    from tests.bad_runs import FAULT_CASES, run_fault

    repo = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    clean = 0
    cases = every_case()
    for case, command in cases:
        ok, why = run_child(repo, case, command)
        clean += ok
        print(f"{'ok ' if ok else 'BAD'} {command:9} {case.id:28} {why[:150]}")
    for option in OPTION_CASES:
        ok, why = run_option_child(repo, option)
        clean += ok
        print(f"{'ok ' if ok else 'BAD'} {'option':9} {option.id:28} {why[:150]}")
    tried = len(cases) + len(OPTION_CASES)
    with tempfile.TemporaryDirectory() as runs:
        for fault in FAULT_CASES:
            ok, why = run_fault(repo, fault, Path(runs))
            clean += ok
            tried += 1
            print(f"{'ok ' if ok else 'BAD'} {'run':9} {fault.id:28} {why[:150]}")
    print(f"{clean} of {tried} bad inputs and faults handled cleanly (a clear verdict, or exit 2 with one line; "
          f"nothing lost, leaked or left) by {repo}")
