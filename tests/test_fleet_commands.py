"""``preflight report`` (re-render a saved JSON) and ``preflight merge`` (the fleet report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.cli import main as cli_main
from preflight.commands import merge, report
from preflight.errors import UsageError
from preflight.outcome import Verdict
from preflight.report.fleet import outlier_reason
from tests.conftest import validate_report
from tests.fleet_reports import busbw_check, ddp_check, hung_ddp, make_report, slow_p2p

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def save(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


# -- preflight report -----------------------------------------------------------------------------


def test_a_saved_report_is_rendered_again_beside_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = make_report("gpu-node-7", [hung_ddp(), slow_p2p()], gpu_name=H100, gpus=8)
    validate_report(data)
    path = save(tmp_path, "preflight", data)
    assert report.main([path]) == 1  # the run's exit code: a script reading the last report sees NOT READY
    html = (tmp_path / "preflight.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "gpu-node-7" in html and "DDP_RANK_HUNG" in html
    assert html.index("DDP_RANK_HUNG") < html.index("All checks")
    assert capsys.readouterr().out.strip() == f"NOT READY  report: {tmp_path / 'preflight.html'}"


def test_rendering_says_the_verdict_as_the_run_did_and_exits_with_its_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu = make_report("n", [ddp_check()])
    cpu["run"]["cpu_rehearsal"] = True
    assert report.main([save(tmp_path, "cpu", cpu)]) == 0
    assert capsys.readouterr().out.startswith("READY (CPU rehearsal)  report: ")
    strict = make_report("n", [ddp_check(), slow_p2p()])
    strict["run"]["exit_code"] = 1  # DEGRADED under --strict
    assert report.main([save(tmp_path, "strict", strict)]) == 1
    assert capsys.readouterr().out.startswith("DEGRADED  report: ")
    unknown = make_report("n", [hung_ddp()])
    unknown["run"]["exit_code"] = None  # a run that ended before it knew its code: the verdict's
    assert report.main([save(tmp_path, "unknown", unknown)]) == 1


def test_out_chooses_the_html_file(tmp_path: Path) -> None:
    path = save(tmp_path, "r", make_report("n", [ddp_check()]))
    assert report.main([path, "--out", str(tmp_path / "sub" / "x.html")]) == 0
    assert "READY" in (tmp_path / "sub" / "x.html").read_text()


@pytest.mark.parametrize(("checks", "line", "code"), [
    ([ddp_check()], "READY", 0),
    ([ddp_check(), slow_p2p()], "DEGRADED: NCCL_P2P_SLOW - P2P bandwidth gpu0-gpu1 is 12 GB/s, expected 40", 0),
    ([hung_ddp(), slow_p2p()], "NOT READY: DDP_RANK_HUNG (+1 more) - ddp: rank 3 hung in all_reduce (rank 3 g...", 1),
])
def test_oneline_prints_the_status_and_exits_like_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], checks: list[tuple[str, Verdict]], line: str, code: int) -> None:
    path = save(tmp_path, "r", make_report("n", checks))
    assert report.main([path, "--oneline"]) == code
    out = capsys.readouterr().out
    assert out == line + "\n" and len(line) <= 80
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(("content", "message"), [
    ("not json at all", "is not a preflight report (not JSON"),
    ('{"name": "something else"}', "is not a preflight report (no tool.name 'preflight')"),
    ("[1, 2, 3]", "is not a preflight report (no tool.name 'preflight')"),
    ('{"tool": {"name": "preflight"}, "schema_version": "3.0"}', "has report schema version '3.0'; this preflight reads 2.0"),
    ('{"tool": {"name": "preflight"}}', "has report schema version None"),
    ('{"tool": {"name": "preflight"}, "schema_version": "2.0", "verdict": "READY"}', "is not a complete preflight report"),
])
def test_anything_but_a_supported_report_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str) -> None:
    path = save(tmp_path, "bad", content)
    assert cli_main(["report", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("preflight: error:") and message in err[0], err
    assert not (tmp_path / "bad.html").exists()


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        report.main([str(tmp_path / "nope.json")])


def test_a_report_missing_a_field_the_html_needs_is_refused_not_a_traceback(tmp_path: Path) -> None:
    data = make_report("n", [ddp_check()])
    del data["run"]["duration_s"]
    with pytest.raises(UsageError, match="is not a complete preflight report"):
        report.main([save(tmp_path, "r", data)])


# -- preflight merge ------------------------------------------------------------------------------


@pytest.fixture
def fleet_dir(tmp_path: Path) -> tuple[Path, list[str]]:
    """Five H100 nodes (one far below its peers yet passing, one with a hung DDP step) and two A100s."""
    nodes = {
        "h1": make_report("h1", [busbw_check(361.0), ddp_check()], gpu_name=H100, gpus=8),
        "h2": make_report("h2", [busbw_check(358.5), ddp_check()], gpu_name=H100, gpus=8),
        "h3": make_report("h3", [busbw_check(362.2), ddp_check(), slow_p2p()], gpu_name=H100, gpus=8),
        "h4": make_report("h4", [busbw_check(250.0), ddp_check()], gpu_name=H100, gpus=8),
        "h5": make_report("h5", [busbw_check(360.1), hung_ddp()], gpu_name=H100, gpus=8),
        "a1": make_report("a1", [busbw_check(230.0), ddp_check()], gpu_name=A100, gpus=8),
        "a2": make_report("a2", [busbw_check(228.0), ddp_check()], gpu_name=A100, gpus=8),
    }
    inputs = [save(tmp_path, name, data) for name, data in nodes.items()]
    return tmp_path, inputs


def test_merge_writes_one_row_per_node_and_flags_the_slow_node(fleet_dir: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path, inputs = fleet_dir
    out = tmp_path / "fleet"
    assert merge.main([*inputs, "--out", str(out)]) == 1
    fleet = json.loads((out / "fleet.json").read_text())
    assert [n["name"] for n in fleet["nodes"]] == ["h1", "h2", "h3", "h4", "h5", "a1", "a2"]
    assert fleet["verdicts"] == {"READY": 5, "DEGRADED": 1, "NOT READY": 1, "ERROR": 0}
    assert fleet["not_ready"] == ["h5"] and fleet["suspect"] == ["h4"]
    h4 = next(n for n in fleet["nodes"] if n["name"] == "h4")
    assert h4["verdict"] == "READY" and h4["bandwidth_outlier_in"] == ["busbw_peak[run=p2p]"]
    assert h4["gpu_kind"] == H100 and h4["gpu_count"] == 8
    stdout = capsys.readouterr().out
    assert "7 nodes: 5 READY, 1 DEGRADED, 1 NOT READY, 1 bandwidth outlier(s): h4" in stdout


def test_merge_says_which_checks_failed_where(fleet_dir: tuple[Path, list[str]]) -> None:
    tmp_path, inputs = fleet_dir
    merge.main([*inputs, "--out", str(tmp_path / "fleet")])
    fleet = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    problems = {c["check"]: c["problem_nodes"] for c in fleet["checks"] if c["problem_nodes"]}
    assert problems == {"test_ddp_step.py::test_ddp_step": ["h5"], "test_nccl_p2p.py::test_nccl_p2p": ["h3"]}
    h5 = next(n for n in fleet["nodes"] if n["name"] == "h5")
    assert [(p["status"], p["code"]) for p in h5["problems"]] == [("FAIL", "DDP_RANK_HUNG")]


def test_bandwidth_is_compared_only_among_nodes_of_the_same_gpu_kind(fleet_dir: tuple[Path, list[str]]) -> None:
    tmp_path, inputs = fleet_dir
    merge.main([*inputs, "--out", str(tmp_path / "fleet")])
    spread = {row["gpu_kind"]: row for row in json.loads((tmp_path / "fleet" / "fleet.json").read_text())["bandwidth"]}
    assert set(spread) == {H100, A100}
    assert spread[H100]["median"] == 360.1 and spread[H100]["nodes"] == 5
    assert [o["node"] for o in spread[H100]["outliers"]] == ["h4"]
    assert "69% of the median" in spread[H100]["outliers"][0]["reason"]
    assert spread[A100]["outliers"] == []  # 228 is far below the H100s, but A100s are compared with A100s
    assert spread[A100]["nodes"] == 2


def test_the_fleet_html_shows_nodes_problems_and_outliers(fleet_dir: tuple[Path, list[str]]) -> None:
    tmp_path, inputs = fleet_dir
    merge.main([*inputs, "--out", str(tmp_path / "fleet")])
    html = (tmp_path / "fleet" / "fleet.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "default-src &#39;none&#39;" in html
    assert html.index(">h5<") < html.index(">h4<") < html.index(">h1<")  # not ready, then suspect, then the rest
    assert "DDP_RANK_HUNG" in html and "SUSPECT" in html and "below 80% of the median" in html


def test_a_healthy_fleet_exits_0(tmp_path: Path) -> None:
    inputs = [save(tmp_path, f"n{i}", make_report(f"n{i}", [busbw_check(360.0 + i)], gpu_name=H100, gpus=8))
              for i in range(4)]
    assert merge.main([*inputs, "--out", str(tmp_path / "f")]) == 0


def test_the_same_host_twice_gets_two_distinct_rows(tmp_path: Path) -> None:
    first = save(tmp_path, "monday", make_report("n1", [ddp_check()]))
    second = save(tmp_path, "tuesday", make_report("n1", [hung_ddp()]))
    merge.main([first, second, "--out", str(tmp_path / "f")])
    names = [n["name"] for n in json.loads((tmp_path / "f" / "fleet.json").read_text())["nodes"]]
    assert names == [f"n1 ({first})", f"n1 ({second})"]


def test_merge_skips_a_bad_input_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = save(tmp_path, "good", make_report("n1", [ddp_check()]))
    bad = save(tmp_path, "bad", '{"tool": {"name": "preflight"}, "schema_version": "9"}')
    assert merge.main([good, bad, "--out", str(tmp_path / "f")]) == 0
    assert f"skipped: {bad} has report schema version '9'" in capsys.readouterr().err
    assert json.loads((tmp_path / "f" / "fleet.json").read_text())["skipped"][0]["source"] == bad
    with pytest.raises(UsageError, match=f"{bad} has report schema version '9'"):
        merge.main([bad, "--out", str(tmp_path / "g")])
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize(("value", "median", "mad", "flagged"), [
    (79.0, 100.0, 0.5, "below 80%"),      # far below: always flagged
    (85.0, 100.0, 0.5, "MADs below"),     # tight cluster, clearly out of it, and > 10 % below
    (95.0, 100.0, 0.5, None),             # tight cluster, but only 5 % below: noise, not a suspect
    (85.0, 100.0, 10.0, None),            # wide cluster: 85 is within its spread
    (100.0, 100.0, 0.0, None),
])
def test_the_outlier_rule(value: float, median: float, mad: float, flagged: str | None) -> None:
    reason = outlier_reason(value, median, mad)
    assert (reason is None) if flagged is None else (reason is not None and flagged in reason)
