"""--oneline and --prometheus: the status line and the node_exporter textfile from a finished report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from preflight.outcome import Metric, error, fail, passed
from preflight.report.document import Report
from preflight.report.oneline import MAX_LENGTH, format_oneline
from preflight.report.prometheus import PrometheusPathError, family_name, prometheus_path, write_prometheus
from tests.conftest import validate_report
from tests.fleet_reports import busbw_check, ddp_check, hung_ddp, make_report, slow_p2p


def samples(path: Path) -> dict[str, list[Sample]]:
    """family name -> its samples, parsed back with prometheus_client's own parser."""
    return {f.name: f.samples for f in text_string_to_metric_families(path.read_text())}


def value(found: dict[str, list[Sample]], family: str, **labels: str) -> float:
    matching = [s.value for s in found[family] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (family, labels, found.get(family))
    return float(matching[0])


# -- --oneline ------------------------------------------------------------------------------------


def test_a_ready_node_is_one_word() -> None:
    assert format_oneline(Report.from_json(make_report("n1", [ddp_check()]))) == "READY"


def test_the_worst_problem_comes_first_with_a_count_of_the_others() -> None:
    report = make_report("n1", [slow_p2p(), hung_ddp(), ("x", error("probe crashed", code="PROBE_CRASHED"))])
    validate_report(report)
    line = format_oneline(Report.from_json(report))
    assert line.startswith("NOT READY: DDP_RANK_HUNG (+2 more) - ddp: rank 3 hung")
    assert len(line) <= MAX_LENGTH


def test_a_degraded_node_names_its_warning() -> None:
    line = format_oneline(Report.from_json(make_report("n1", [ddp_check(), slow_p2p()])))
    assert line.startswith("DEGRADED: NCCL_P2P_SLOW - P2P")


@pytest.mark.parametrize("limit", [80, 40, 30])
def test_the_line_never_exceeds_its_limit_and_never_cuts_the_code(limit: int) -> None:
    long_summary = "rank 7 hung " + "waiting " * 40
    report = make_report("n1", [("ddp_step", fail("DDP_RANK_HUNG", long_summary, "fix it"))])
    line = format_oneline(Report.from_json(report), limit)
    assert len(line) <= limit and "DDP_RANK_HUNG" in line and "\n" not in line
    assert line.isascii()


def test_non_ascii_and_newlines_become_safe_characters() -> None:
    report = make_report("n1", [("gpu", fail("GPU_HOT", "GPU 3 at 95 °C\nthrottling", "cool it"))])
    line = format_oneline(Report.from_json(report))
    assert line == "NOT READY: GPU_HOT - GPU 3 at 95 ?C throttling"


def test_an_interrupted_run_without_a_failing_check_says_so() -> None:
    report = make_report("n1", [ddp_check()], interrupted="overall --timeout of 50 s reached")
    assert format_oneline(Report.from_json(report)) == "NOT READY: RUN_INTERRUPTED - overall --timeout of 50 s reached"


# -- --prometheus ---------------------------------------------------------------------------------


@pytest.fixture
def textfile(tmp_path: Path) -> Path:
    report = make_report("n1", [busbw_check(231.5, "p2p", nop2p=25.0), ddp_check(0.031), slow_p2p()],
                         gpu_name="NVIDIA H100 80GB HBM3", gpus=8)
    path = tmp_path / "preflight.prom"
    write_prometheus(Report.from_json(report), path)
    return path


def test_the_textfile_carries_the_verdict_and_each_checks_status(textfile: Path) -> None:
    found = samples(textfile)
    assert value(found, "preflight_verdict", verdict="DEGRADED") == 1
    assert value(found, "preflight_verdict", verdict="READY") == 0
    assert value(found, "preflight_check_status", check="test_nccl_p2p.py::test_nccl_p2p", status="WARN") == 1
    assert value(found, "preflight_check_status", check="test_nccl_p2p.py::test_nccl_p2p", status="PASS") == 0
    assert value(found, "preflight_check_problem_info", code="NCCL_P2P_SLOW") == 1
    assert value(found, "preflight_checks", status="WARN") == 1
    assert value(found, "preflight_exit_code") == 0


def test_the_key_metrics_are_read_from_the_checks_by_name(textfile: Path) -> None:
    found = samples(textfile)
    assert value(found, "preflight_gpu_count", source="nvml") == 8
    assert value(found, "preflight_gpu_count", source="torch") == 8
    busbw = "preflight_busbw_peak_gigabytes_per_second"
    assert value(found, busbw, run="p2p") == 231.5 and value(found, busbw, run="nop2p") == 25.0
    assert value(found, "preflight_step_time_max_seconds", check="test_ddp_step.py::test_ddp_step") == 0.031
    assert value(found, "preflight_ranks") == 8


def test_the_textfile_has_no_timestamps_and_no_leftover_temp_file(textfile: Path) -> None:
    text = textfile.read_text()
    for line in text.splitlines():
        if not line.startswith("#"):
            assert len(line.rsplit(" ", 1)[1].split()) == 1  # "name{labels} value", nothing after the value
    assert os.listdir(textfile.parent) == ["preflight.prom"]


def test_a_metric_recorded_by_a_check_added_later_shows_up_without_a_change(tmp_path: Path) -> None:
    check = ("new_area", passed("fine", metrics=(Metric("h2d_bandwidth", 24.1, "GB/s", {"gpu": "gpu3", "check": "x"}),
                                                 Metric("driver_ok", True), Metric("driver_name", "open"))))
    path = tmp_path / "n.prom"
    write_prometheus(Report.from_json(make_report("n1", [check])), path)
    found = samples(path)
    assert value(found, "preflight_h2d_bandwidth_gigabytes_per_second", gpu="gpu3", metric_check="x") == 24.1
    assert value(found, "preflight_driver_ok") == 1
    assert not any("driver_name" in name for name in found)


@pytest.mark.parametrize(("name", "unit", "expected"), [
    ("busbw_peak", "GB/s", "preflight_busbw_peak_gigabytes_per_second"),
    ("step_time_max", "s", "preflight_step_time_max_seconds"),
    ("usable_bytes_per_gpu", "B", "preflight_usable_bytes_per_gpu"),
    ("cpu_cores_per_rank", "cores", "preflight_cpu_cores_per_rank"),
    ("ram_bytes_per_rank", "B", "preflight_ram_bytes_per_rank"),
    ("shm_total_bytes", "B", "preflight_shm_total_bytes"),
    ("jit_build_seconds", "s", "preflight_jit_build_seconds"),
    ("launch_ranks", "ranks", "preflight_launch_ranks"),
    ("bytes_sent", "s", "preflight_bytes_sent_seconds"),
    ("ranks", "", "preflight_ranks"),
    ("launch_wall_time_seconds", "s", "preflight_launch_wall_time_seconds"),
    ("verdict", "", "preflight_verdict_metric"),
    ("tokens", "tok/s", "preflight_tokens_tok_per_s"),
])
def test_family_names_follow_prometheus_conventions(name: str, unit: str, expected: str) -> None:
    assert family_name(name, unit) == expected


def test_no_family_repeats_its_unit(tmp_path: Path) -> None:
    """The metrics the host checks record (cores and bytes per rank) come out with the unit said once."""
    from preflight.judge.host import judge_cpu_memory
    from preflight.probe.host import CpuMemoryFacts

    facts = CpuMemoryFacts(logical_cpus=96, usable_cpus=96, cgroup_cpu_limit=None, mem_total_bytes=1 << 40,
                           mem_available_bytes=1 << 39, cgroup_memory_limit_bytes=None)
    verdict = judge_cpu_memory(facts, ranks=8)
    path = tmp_path / "n.prom"
    write_prometheus(Report.from_json(make_report("n1", [("host", verdict)])), path)
    names = [name for name in samples(path) if name.startswith("preflight_")]
    assert "preflight_cpu_cores_per_rank" in names and "preflight_ram_bytes_per_rank" in names
    for name in names:
        tokens = name.removeprefix("preflight_").split("_")
        for unit in ("bytes", "cores", "seconds", "ranks"):
            assert tokens.count(unit) <= 1, name


@pytest.mark.parametrize("text", ["node.txt", "metrics", ".prom"])
def test_the_path_must_be_a_prom_file(text: str) -> None:
    with pytest.raises(PrometheusPathError, match=r"\*\.prom"):
        prometheus_path(text)


def test_a_missing_directory_is_created(tmp_path: Path) -> None:
    path = prometheus_path(str(tmp_path / "textfile" / "preflight.prom"))
    write_prometheus(Report.from_json(make_report("n1", [ddp_check()])), path)
    assert "preflight_verdict" in path.read_text()


# -- wired into a run -----------------------------------------------------------------------------


def test_a_run_writes_the_textfile_after_the_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_checks='''
from preflight.outcome import passed, fail
def test_bw(record):
    record(passed("fast"))
    record.metric("busbw_peak", 180.25, "GB/s", run="p2p")
def test_broken(record):
    record(fail("GPU_LOST", "GPU 3 fell off the bus", "reboot"))
''')
    out = pytester.path / "out"
    prom = pytester.path / "textfile" / "node.prom"
    pytester.runpytest(f"--preflight-report-dir={out}", f"--preflight-prometheus={prom}")
    report = json.loads((out / "preflight.json").read_text())
    found = samples(prom)
    assert report["verdict"] == "NOT READY"
    assert value(found, "preflight_verdict", verdict="NOT READY") == 1
    assert value(found, "preflight_check_problem_info", code="GPU_LOST") == 1
    assert value(found, "preflight_busbw_peak_gigabytes_per_second", run="p2p") == 180.25


def test_without_the_option_no_textfile_is_written(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_checks="def test_ok(record):\n    pass\n")
    pytester.runpytest(f"--preflight-report-dir={pytester.path / 'out'}")
    assert not list(pytester.path.rglob("*.prom"))


def test_a_bad_path_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_checks="def test_ok(record):\n    pass\n")
    result = pytester.runpytest(f"--preflight-report-dir={pytester.path / 'out'}", "--preflight-prometheus=x.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*only reads *.prom files*"])
