"""Bad input and hostile runs: exit 2 with one line, or a clear verdict; nothing lost, leaked or left.

The cases are in ``tests/bad_inputs.py`` (files for ``topology``, ``nccl-log``, ``report`` and
``merge``; option values) and ``tests/bad_runs.py`` (whole runs). FIFO and standard-input cases run in
a child process under a deadline, so a regression that blocks on a FIFO fails the test instead of
hanging the suite; the runs are child processes, each started once per module and shared by the
cases that assert on it.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from preflight.cli import main
from preflight.inputs import MAX_INPUT_BYTES, UnreadableInput, read_bytes, read_text
from preflight.report.model import SCHEMA_VERSION
from preflight.report.validate import SchemaError, first_problem, report_schema
from tests.bad_inputs import (
    CASES,
    OPTION_CASES,
    BadInput,
    BadOption,
    argv,
    every_case,
    good_report,
    option_argv,
    prepare,
    run_child,
    run_option_child,
)
from tests.bad_runs import FAULT_CASES, FaultCase, run_fault
from tests.conftest import REPO_ROOT, SCHEMA_PATH, validate_report
from tests.fleet_reports import busbw_check, hung_ddp, make_report

IN_CHILD = {"fifo", "stdin-over-256-MiB"}


def _params(in_child: bool) -> list[object]:
    return [pytest.param(case, command, id=f"{command}-{case.id}") for case, command in every_case()
            if (case.id in IN_CHILD) == in_child]


@pytest.mark.parametrize(("case", "command"), _params(in_child=False))
def test_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: BadInput, command: str) -> None:
    path = prepare(case, tmp_path)
    assert main(argv(case, command, path, tmp_path)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight: error: "), captured.err
    assert case.message in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "out.html").exists() and not (tmp_path / "fleet").exists()


@pytest.mark.e2e
@pytest.mark.parametrize(("case", "command"), _params(in_child=True))
def test_refused_in_one_line_in_a_child(case: BadInput, command: str) -> None:
    ok, line = run_child(REPO_ROOT, case, command, timeout_s=60)
    assert ok, line
    assert case.message in line


@pytest.fixture
def deadline() -> Iterator[None]:
    """A FIFO case must not block: SIGALRM after 20 s interrupts a blocking open or read (PEP 475 lets the
    handler's exception through), so a regression fails here instead of hanging the suite."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("blocked for 20 s: a FIFO was opened or read")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in OPTION_CASES])
def test_a_bad_option_value_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, deadline: None,
                                                   case: BadOption) -> None:
    for name, value in (case.env(tmp_path) if case.env else {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    assert main(option_argv(case, tmp_path)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight: error: "), captured.err
    assert case.message in lines[0] and "Traceback" not in captured.err
    assert not (tmp_path / "reports" / "preflight.json").exists()


@pytest.mark.e2e
def test_a_fifo_option_is_refused_in_a_child_too() -> None:
    """One FIFO case as ``python -m tests.bad_inputs`` runs it: a child process under a deadline."""
    ok, line = run_option_child(REPO_ROOT, next(c for c in OPTION_CASES if c.blocks), timeout_s=60)
    assert ok, line


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder for the module: each hostile run starts once and serves every case on it."""
    return tmp_path_factory.mktemp("runs")


@pytest.mark.e2e
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FAULT_CASES if c.run])
def test_a_hostile_run_ends_in_a_clear_verdict(runs_dir: Path, case: FaultCase) -> None:
    missing = case.needs()
    if missing is not None:
        pytest.skip(missing)
    ok, why = run_fault(REPO_ROOT, case, runs_dir)
    assert ok, why


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FAULT_CASES if not c.run])
def test_a_fault_judged_in_process(tmp_path: Path, case: FaultCase) -> None:
    ok, why = run_fault(REPO_ROOT, case, tmp_path)
    assert ok, why


def test_the_bad_report_cases_are_bad_for_jsonschema_too(tmp_path: Path) -> None:
    """Each malformed report that parses as JSON is refused by the jsonschema package as well
    (with node relaxed the same way), so the hand-written reader is not stricter than the schema."""
    validator = jsonschema.Draft202012Validator(report_schema())
    for case in CASES:
        if case.commands != ("report", "merge") or case.id.startswith(("node-nesting", "int-of", "duration-nan")):
            continue  # special files are for the reader, not the schema; these three never parse
        scratch = tmp_path / case.id
        scratch.mkdir()
        path = Path(prepare(case, scratch))
        assert path.is_file() and path.stat().st_size < 1_000_000, case.id
        try:
            data = json.loads(path.read_bytes())
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION and isinstance(data.get("tool"), dict):
            if case.id == "started-at-not-a-date":  # jsonschema checks formats only with a FormatChecker
                continue
            assert not validator.is_valid(data), case.id
            assert first_problem(data) is not None, case.id


# -- the schema reader agrees with jsonschema ------------------------------------------------------


def _mutations() -> list[tuple[str, object]]:
    """Type swaps at many places of a real report: (dotted path, new value)."""
    places = ["run", "run.argv", "run.options", "run.duration_s", "run.exit_code", "run.interrupted",
              "run.startup_s", "verdict", "summary", "summary.PASS", "environment", "checks", "checks.0",
              "checks.0.summary", "checks.0.code", "checks.0.remediation", "checks.0.metrics", "checks.0.metrics.0",
              "checks.0.metrics.0.value", "checks.0.metrics.0.name", "checks.0.metrics.0.unit", "checks.0.evidence",
              "checks.0.views", "checks.0.details", "checks.0.duration_s", "checks.1.status", "checks.1.code",
              "not_run", "tool.version"]
    values: list[object] = [None, True, 0, -1, 2.5, "", "x", "NOT READY", [], [1], {}, {"a": "b"}]
    return [(place, value) for place in places for value in values]


def _apply(data: dict[str, Any], place: str, value: object) -> None:
    *parents, last = place.split(".")
    target: object = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]  # type: ignore[index]
    target[int(last) if isinstance(target, list) else last] = value  # type: ignore[index]


def test_agrees_with_jsonschema_on_every_mutation() -> None:
    validator = jsonschema.Draft202012Validator(report_schema())
    base = make_report("n1", [busbw_check(300.0), hung_ddp()], gpu_name="NVIDIA A100-SXM4-80GB", gpus=4)
    assert first_problem(base) is None and validator.is_valid(base)
    disagreements = []
    for place, value in _mutations():
        data = json.loads(json.dumps(base))
        _apply(data, place, value)
        ours = first_problem(data)
        theirs = validator.is_valid(data)
        if (ours is None) != theirs:
            disagreements.append((place, value, ours))
    assert disagreements == []


def test_the_full_shipped_schema_is_interpreted_too() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    report = good_report()
    validate_report(report)
    assert first_problem(report, schema) is None
    report["node"] = {"hostname": "n1"}
    assert first_problem(report, schema) == "node has no 'os'"
    assert first_problem(report) == "node has no 'os'"  # the node model's sections are described by the schema


def test_an_uninterpreted_keyword_in_the_schema_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    schema["properties"]["verdict"]["oneOf"] = [{"const": "READY"}]
    changed = tmp_path / "schema.json"
    changed.write_text(json.dumps(schema))
    monkeypatch.setattr("preflight.report.validate.SCHEMA_PATH", changed)
    report_schema.cache_clear()
    try:
        with pytest.raises(SchemaError, match="oneOf"):
            report_schema()
    finally:
        report_schema.cache_clear()


# -- merge: a bad report among good ones -----------------------------------------------------------


def _save(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_merge_skips_a_bad_report_and_merges_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = [_save(tmp_path, f"n{i}", make_report(f"n{i}", [busbw_check(300.0 + i)])) for i in range(3)]
    bad = _save(tmp_path, "bad", {**make_report("n9", []), "run": "x"})
    assert main(["merge", good[0], bad, *good[1:], "--out", str(tmp_path / "fleet")]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"preflight: skipped: {bad} is not a valid preflight report: run is a string "
                                         "(\"x\"), expected an object"]
    assert "fleet: 3 nodes: 3 READY, 0 DEGRADED, 0 NOT READY (1 unreadable report(s) skipped)" in captured.out
    fleet = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert [n["name"] for n in fleet["nodes"]] == ["n0", "n1", "n2"]
    assert fleet["skipped"] == [{"source": bad, "reason": captured.err.split("skipped: ", 1)[1].strip()}]
    assert "Reports not read (1)" in (tmp_path / "fleet" / "fleet.html").read_text()


def test_merge_exits_by_the_good_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hung = _save(tmp_path, "hung", make_report("n1", [hung_ddp()]))
    fifo = tmp_path / "pipe"
    import os

    os.mkfifo(fifo)
    assert main(["merge", hung, str(fifo), str(tmp_path / "missing.json"), "--out", str(tmp_path / "f")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("preflight: skipped: ") for line in err)


def test_merge_with_no_good_report_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _save(tmp_path, "a", "[]")
    second = _save(tmp_path, "b", "{")
    assert main(["merge", first, second, "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [f"preflight: skipped: {first} is not a preflight report (no tool.name 'preflight')",
                       f"preflight: skipped: {second} is not a preflight report (not JSON: Expecting property name "
                       "enclosed in double quotes: line 1 column 2 (char 1))"]
    assert err[2] == "preflight: error: none of the 2 reports could be read (each one is named above)"
    assert not (tmp_path / "f").exists()


def test_merge_reads_one_report_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    other = _save(tmp_path, "n2", make_report("n2", [busbw_check(300.0)]))
    piped = json.dumps(make_report("n1", [busbw_check(301.0)])).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(piped)))
    assert main(["merge", "-", other, "--out", str(tmp_path / "f")]) == 0
    fleet = json.loads((tmp_path / "f" / "fleet.json").read_text())
    assert [(n["name"], n["source"]) for n in fleet["nodes"]] == [("n1", "standard input"), ("n2", other)]
    assert main(["merge", "-", "-"]) == 2
    assert "'-' (standard input) can be given only once" in capsys.readouterr().err


def test_report_reads_stdin_with_oneline(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    piped = json.dumps(make_report("n1", [hung_ddp()])).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(piped)))
    assert main(["report", "-", "--oneline"]) == 1
    assert capsys.readouterr().out.startswith("NOT READY: DDP_RANK_HUNG")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(piped)))
    assert main(["report", "-"]) == 2
    assert "needs --out FILE" in capsys.readouterr().err


def test_a_deep_but_allowed_node_still_renders(tmp_path: Path) -> None:
    data = good_report()
    nested: dict[str, Any] = {"leaf": 1}
    for _ in range(40):
        nested = {"x": nested}
    data["node"]["extra"] = nested
    path = _save(tmp_path, "deep", data)
    assert main(["report", path]) == 0
    assert (tmp_path / "deep.html").is_file()


# -- the shared reader -----------------------------------------------------------------------------


def test_text_with_a_byte_order_mark_or_in_utf16(tmp_path: Path) -> None:
    text = "GPU0\tX\tNV4\n"
    (tmp_path / "sig").write_bytes(codecs.BOM_UTF8 + text.encode())
    (tmp_path / "le").write_bytes(text.encode("utf-16"))  # what PowerShell's > writes
    (tmp_path / "be").write_bytes(codecs.BOM_UTF16_BE + text.encode("utf-16-be"))
    (tmp_path / "latin1").write_bytes("caf\xe9\n".encode("latin-1"))
    assert read_text(str(tmp_path / "sig")) == text
    assert read_text(str(tmp_path / "le")) == text
    assert read_text(str(tmp_path / "be")) == text
    assert read_text(str(tmp_path / "latin1")) == "caf\ufffd\n"


def test_the_cap_is_256_mib_and_checked_on_what_is_read(tmp_path: Path) -> None:
    assert MAX_INPUT_BYTES == 256 * 1024 * 1024
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    assert read_bytes(str(path), limit=11) == b"x" * 11
    with pytest.raises(UnreadableInput, match="over the 0.0 MiB limit"):
        read_bytes(str(path), limit=10)


def test_stdin_without_a_buffer_and_closed_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("abc"))
    assert read_text("-") == "abc"
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(UnreadableInput, match="there is none"):
        read_text("-")
    closed = io.StringIO("abc")
    closed.close()
    monkeypatch.setattr(sys, "stdin", closed)
    with pytest.raises(UnreadableInput, match="cannot read standard input"):
        read_text("-")


# -- what the option cases rest on -------------------------------------------------------------------------


def test_yaml_is_told_apart_from_json_configs() -> None:
    """The YAML hint fires on YAML only: none of the JSON configs of tests/data/ds_config is called YAML."""
    from preflight.parse.ds_config import looks_like_yaml

    configs = sorted((REPO_ROOT / "tests" / "data" / "ds_config").glob("*.json"))
    assert configs and not any(looks_like_yaml(path.read_text()) for path in configs)
    assert looks_like_yaml("# DeepSpeed\n---\nzero_optimization:\n  stage: 3\n")
    assert looks_like_yaml("train_batch_size: 32\n") and not looks_like_yaml('{"train_batch_size": 32}')
    assert not looks_like_yaml("train_batch_size 32\n")  # not JSON either, but not YAML: the JSON error stands


def test_text_that_is_not_utf8_is_written_escaped() -> None:
    from preflight.report.writer import printable

    raw = os.fsdecode(b"/tmp/caf\xe9")
    assert printable({"argv": [raw, "ok"], raw: 1}) == {"argv": ["/tmp/caf\\xe9", "ok"], "/tmp/caf\\xe9": 1}
