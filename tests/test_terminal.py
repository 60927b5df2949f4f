"""preflight's own terminal output, the recorded selection and what a partial or interrupted run says.

The formatting functions are tested directly (the layout at 80 and 200 columns on the problems of a
faulty 8-GPU node, the folding of per-GPU lines, the order of problems); runs of the real command (a
fast one without launches, one DDP launch on gloo, and the faulty 8x H100 node: the real nvidia-ml-py
over the fake NVML C library, with a toolkit mismatch) check the output's shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import RankProgress, launch_status
from preflight.outcome import fail, skip, warn
from preflight.report.document import Report
from preflight.report.html import render_html
from preflight.report.live import live_text, phase_line
from preflight.report.oneline import format_oneline
from preflight.report.selection import Selection
from preflight.report.terminal import (
    GpuFold,
    Layout,
    check_lines,
    check_title,
    clauses,
    gpu_list,
    gpu_reason,
    layout,
    reason_lines,
    skip_lines,
    verdict_block,
)
from preflight.report.validate import first_problem
from preflight.workers.common import STARTUP
from tests.conftest import REPO_ROOT, validate_report
from tests.fleet_reports import ddp_check, make_report, slow_p2p

RULE = "=" * 80


def partial(report: dict[str, Any], selected: int, collected: int, keyword: str | None = "ddp") -> dict[str, Any]:
    """``report`` as a run that selected ``selected`` of ``collected`` checks with ``-k keyword``."""
    selection = Selection(keyword=keyword, collected=collected, deselected=collected - selected)
    report["run"]["selection"] = selection.as_dict()
    return report


# -- the selection in the report --------------------------------------------------------------------


def test_the_selection_is_in_the_run_section_and_the_schemas_describe_it() -> None:
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    validate_report(report)
    assert first_problem(report) is None
    assert report["run"]["selection"] == {"keyword": "ddp", "markexpr": None, "profile": "full", "strategy": None,
                                          "slow": False, "collected": 45, "selected": 1, "deselected": 44,
                                          "partial": True}


def test_the_strict_reader_refuses_a_selection_it_does_not_know() -> None:
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    report["run"]["selection"]["picked_by"] = "someone"
    assert first_problem(report) == "run.selection.picked_by is not allowed"
    del report["run"]["selection"]["picked_by"], report["run"]["selection"]["selected"]
    assert first_problem(report) == "run.selection has no 'selected'"


def test_a_partial_run_says_how_much_it_covered_everywhere() -> None:
    report = partial(make_report("n1", [ddp_check()]), 1, 45)
    typed = Report.from_json(report)
    assert typed.headline == "READY: 1 of 45 checks selected"
    assert format_oneline(typed) == "READY: 1 of 45 checks selected"
    page = render_html(typed)  # the heading is the verdict and its worst problem, the coverage beside it
    assert "<h1>READY</h1>" in page and "· 1 of 45 checks selected (-k ddp)" in page
    block = verdict_block(typed, written=[], width=80)
    assert block[-1] == "READY: 1 of 45 checks selected (-k ddp)"


def test_a_whole_run_reads_as_before() -> None:
    report = partial(make_report("n1", [ddp_check()]), 45, 45, keyword=None)
    typed = Report.from_json(report)
    assert typed.headline == format_oneline(typed) == "READY"
    assert "<h1>READY</h1>" in render_html(typed)


def test_a_partial_run_with_a_problem_keeps_the_code_first() -> None:
    report = partial(make_report("n1", [ddp_check(), slow_p2p()]), 2, 45)
    assert format_oneline(Report.from_json(report)).startswith("DEGRADED: NCCL_P2P_SLOW (2 of 45 checks selected) - P2P")


def test_an_interrupted_run_names_the_interruption_not_a_warning_and_counts_what_did_not_run() -> None:
    report = make_report("n1", [ddp_check(), slow_p2p()], interrupted="interrupted by the user (Ctrl-C)")
    report["not_run"] = [f"test_x.py::test_{n}" for n in range(12)]
    line = format_oneline(Report.from_json(report))
    assert line == "NOT READY: RUN_INTERRUPTED (+1 more) - 12 checks did not run (interrupted by..."
    assert "NCCL_P2P_SLOW" not in line and len(line) <= 80
    block = verdict_block(Report.from_json(report), written=[], width=80)
    assert "not run: 12 checks (interrupted by the user (Ctrl-C))" in block and block[-1] == "NOT READY"


# -- formatting ---------------------------------------------------------------------------------------


def test_titles_are_the_docstring_without_its_aside_and_keep_the_parameter() -> None:
    assert check_title("Is there an NVIDIA GPU for the job (or a CPU rehearsal)\n\nmore", "test_gpu") == \
        "Is there an NVIDIA GPU for the job"
    assert check_title("Is the GPU free of ECC errors?", "test_gpu_ecc[gpu3]") == "Is the GPU free of ECC errors? [gpu3]"
    assert check_title(None, "test_gpu_ecc") == "gpu ecc"


def test_every_check_title_is_a_question_that_no_status_contradicts() -> None:
    """A title is the question the check answers, phrased so that yes is the healthy answer: it reads right
    beside PASS, WARN, FAIL or SKIP ("PASS There is an NVIDIA GPU" under --cpu, "WARN No earlier training run
    is still running" were statements one status contradicted)."""
    import ast

    titles = {}
    for path in sorted((REPO_ROOT / "checks").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                titles[node.name] = (ast.get_docstring(node) or "").splitlines()[0]
    assert len(titles) >= 45
    assert not [name for name, title in titles.items() if not title.endswith("?")], titles
    assert not [title for title in titles.values() if title.split()[0] in ("No", "There", "The", "A")]


def test_clauses_end_at_punctuation_outside_parentheses_and_before_a_long_aside() -> None:
    assert clauses("2 CPU cores (cgroup: 2) for 2 ranks: 1.0 cores per rank; fine, e.g. here. Next") == [
        "2 CPU cores (cgroup: 2) for 2 ranks:", "1.0 cores per rank;", "fine,", "e.g. here.", "Next"]
    assert clauses("8 GPU(s) (cuda0 = GPU 0 (00000000:18:00.0), cuda1 = GPU 1 (00000000:2A:00.0)) seen") == [
        "8 GPU(s)", "(cuda0 = GPU 0 (00000000:18:00.0), cuda1 = GPU 1 (00000000:2A:00.0)) seen"]
    assert clauses("toolkit CUDA 13.0 (V13.0.48) at /opt vs 12.8") == ["toolkit CUDA 13.0 (V13.0.48) at /opt vs 12.8"]


def test_a_reason_keeps_whole_clauses_and_never_less_than_the_first() -> None:
    reason = "peak all-reduce busbw 0.8 GB/s at 256 MiB on 2 ranks (gloo); no reference figure, so not judged"
    assert reason_lines(reason, 200) == [reason]
    assert reason_lines(reason, 66, lines=1) == ["peak all-reduce busbw 0.8 GB/s at 256 MiB on 2 ranks (gloo) ..."]
    short = reason_lines(reason, 30, lines=1)
    assert " ".join(short).startswith("peak all-reduce busbw 0.8 GB/s at 256 MiB on 2 ranks (gloo)")
    assert short[-1].endswith("...") and all(len(line) <= 30 for line in short)


def test_per_gpu_reasons_lose_the_gpus_own_name_and_fold_by_identical_result() -> None:
    assert gpu_reason("GPU 2 (Fake NVIDIA H100 80GB HBM3, 00000000:3A:00.0): 2 uncorrectable ECC error(s)", 2) == \
        "2 uncorrectable ECC error(s)"
    assert gpu_reason("GPU 0 (NVIDIA H100, 00000000:18:00.0) answers every NVML query", 0) == "answers every NVML query"
    assert gpu_reason("GPU12 NVIDIA A100 (sm_80) runs sm_80 kernels", 12) == "NVIDIA A100 (sm_80) runs sm_80 kernels"
    assert gpu_reason("GPU 3 (x): fine", 2) == "GPU 3 (x): fine"
    assert gpu_list([0, 1, 3, 4, 5, 6, 7]) == "gpu0-1,3-7" and gpu_list([5]) == "gpu5" and gpu_list([2, 0]) == "gpu0,2"
    fold = GpuFold("Is the GPU free of uncorrectable ECC errors?")
    for index in range(8):
        bad = index == 2
        fold.add(index, "FAIL" if bad else "PASS", f"GPU {index} (H100, 0000:{index}): " +
                 ("2 uncorrectable ECC error(s) since the driver loaded" if bad else "no uncorrectable ECC errors"))
    lines = fold.lines(Layout(200, 60))
    assert [status for status, _ in lines] == ["PASS", "FAIL"]
    assert lines[0][1].startswith("PASS  Is the GPU free of uncorrectable ECC errors? [gpu0-1,3-7]")
    assert lines[1][1].endswith("2 uncorrectable ECC error(s) since the driver loaded")


@pytest.mark.parametrize("width", [40, 80, 132, 200])
def test_check_lines_fit_the_width_and_keep_the_status_word_first(width: int) -> None:
    titles = ["Does a job started from this shell survive a dropped SSH connection?", "Short?"]
    shape = layout(titles, width)
    lines = check_lines("PASS", titles[0], "a job started from this shell survives, " * 8, shape)
    assert all(len(line) <= width for line in lines) and lines[0].startswith("PASS  Does a job")
    assert " ".join(lines).rstrip().endswith("...")
    assert check_lines("SKIP", "Short?", "", shape) == ["SKIP  Short?"]
    zero1 = check_lines("SKIP", "Do a few training steps and a checkpoint round trip work? [zero1]", "not selected",
                        shape)
    assert "[zero1]" in " ".join(zero1) and all(len(line) <= width for line in zero1)  # the parameter survives


def test_identical_skips_become_one_entry_with_a_count() -> None:
    groups = {"no NVIDIA GPU visible: libnvidia-ml.so.1 not found": [f"check {n}" for n in range(30)],
              "no DeepSpeed config given": ["Does the DeepSpeed config's batch arithmetic hold on the job's ranks?"]}
    lines = skip_lines(groups, layout(["x" * 40], 80))
    assert lines[0] == "SKIP  30 checks: no NVIDIA GPU visible: libnvidia-ml.so.1 not found"
    assert lines[1].startswith("SKIP  Does the DeepSpeed config's") and "no DeepSpeed config given" in lines[2]


def test_the_verdict_block_lists_each_problem_with_its_fix_and_ends_with_the_verdict_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # report paths inside the working directory are shown relative to it
    long_fix = "Stop them (`kill 1784`, then `kill -9` after a minute) and check nvidia-smi " * 3
    report = make_report("n1", [ddp_check(), ("leftover", warn("LEFTOVER_TRAINING_PROCESSES", "1 process left",
                                                              long_fix)),
                                ("ddp_hang", fail("DDP_RANK_HUNG", "rank 3 hung", "Re-run with NCCL_DEBUG=INFO")),
                                ("ecc", skip("no GPU"))])
    block = verdict_block(Report.from_json(report), written=[tmp_path / "preflight.json"], width=80)
    assert block[0] == RULE and block[-1] == "NOT READY"
    assert all(len(line) <= 80 for line in block)
    text = "\n".join(block)
    assert text.index("FAIL  DDP_RANK_HUNG") < text.index("WARN  LEFTOVER_TRAINING_PROCESSES")
    assert "      fix: Re-run with NCCL_DEBUG=INFO" in block
    assert "checks: 1 PASS, 1 SKIP, 1 WARN, 1 FAIL" in block and "reports: preflight.json" in block
    assert sum("NOT READY" in line for line in block) == 1
    quiet = verdict_block(Report.from_json(report), written=[], width=80, quiet=True)
    assert not any(line.strip().startswith("fix:") for line in quiet)


def _plan() -> LaunchPlan:
    return LaunchPlan("rehearsal", (Phase("ddp", "preflight.workers.ddp:run", budget_s=60.0),
                                    Phase("p2p", "preflight.workers.p2p:run", budget_s=30.0)), nproc=2)


def _mark(phase: str, label: str, started: float, completed: tuple[str, ...] = ()) -> RankProgress:
    return RankProgress(phase, label, 3, started + 1, started, completed, False)


def test_the_live_line_shows_the_slowest_ranks_phase_its_progress_and_the_clocks() -> None:
    now = 1000.0
    marks = [_mark("p2p", "sweep", now - 2, ("ddp",)), _mark("ddp", "forward, backward and step", now - 5)]
    status = launch_status(_plan(), marks, now, now - 20, deadline_s=280.0)
    assert (status.phase, status.ranks_done, status.nproc) == ("ddp", 1, 2)
    text = live_text(status, 80)
    assert text == "  > rehearsal ddp: 1/2 ranks done, 5/60 s, launch 20/280 s  forward, backwar..."
    assert len(text) < 80 and live_text(status, 120).endswith("  forward, backward and step")
    assert phase_line(status, 80) == "  > rehearsal: ddp (2 ranks, budget 60 s) at 20 s"


def test_before_any_rank_reports_the_launch_is_starting_up() -> None:
    status = launch_status(_plan(), [None, None], 1003.0, 1000.0, deadline_s=280.0)
    assert status.phase == STARTUP and status.ranks_done == 0 and status.phase_elapsed_s == 3.0
    assert live_text(status, 80).startswith("  > rehearsal start-up: 0/2 ranks done, 3/60 s"[:30])


# -- the real command ---------------------------------------------------------------------------------


def run_preflight(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "preflight", "--cpu", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def assert_shape(result: subprocess.CompletedProcess[str], report: dict[str, Any]) -> list[str]:
    """The output's shape: within 80 columns, no pytest artefacts, one verdict block ending in the verdict."""
    lines = result.stdout.rstrip("\n").splitlines()
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert not any("::" in line or "site-packages" in line or " passed in " in line for line in lines), lines
    assert lines.count(RULE) == 1 and lines[-1].startswith(report["verdict"])
    after = lines[lines.index(RULE):]
    assert sum(report["verdict"] in line for line in lines) == 1
    assert any(line.startswith("checks: ") for line in after) and "reports: reports/preflight.json" in after
    return lines


@pytest.mark.e2e
def test_a_run_without_launches_prints_titles_grouped_skips_and_one_verdict(tmp_path: Path) -> None:
    result = run_preflight(tmp_path, "-m", "not distributed")
    report = json.loads((tmp_path / "reports" / "preflight.json").read_text())
    lines = assert_shape(result, report)
    selection = report["run"]["selection"]
    assert selection["markexpr"] == "not distributed" and selection["partial"]
    assert lines[-1].startswith(f"{report['verdict']} (CPU rehearsal): {selection['selected']} of "
                                f"{selection['collected']} checks selected (-m 'not distributed')")
    grouped = [line for line in lines if line.startswith("SKIP  ") and " checks: no NVIDIA GPU visible" in line]
    assert len(grouped) == 1  # every per-GPU check skips for the same reason on this machine
    skipped = sum(1 for c in report["checks"] if c["status"] == "SKIP")
    assert sum(1 for line in lines if line.startswith("SKIP  ")) < skipped
    assert any(line.startswith("PASS  Is /dev/shm large enough") for line in lines)


@pytest.mark.e2e
def test_a_launch_shows_its_phases_then_the_check_and_the_verdict(tmp_path: Path) -> None:
    result = run_preflight(tmp_path, "-k", "test_ddp_step")
    report = json.loads((tmp_path / "reports" / "preflight.json").read_text())
    lines = assert_shape(result, report)
    phases = [line for line in lines if line.startswith("  > rehearsal: ")]
    assert phases and phases[-1].startswith("  > rehearsal: ddp (2 ranks, budget")  # not a TTY: one line a phase
    assert len(phases) == len(set(line.split(" at ")[0] for line in phases))
    assert any(line.startswith("PASS  Does one DDP step leave identical parameters") for line in lines)
    assert lines[-1] == (f"READY (CPU rehearsal): 1 of {report['run']['selection']['collected']} checks selected "
                         "(-k test_ddp_step)")


@pytest.mark.e2e
def test_verbose_keeps_pytests_reporter_and_says_the_verdict_once(tmp_path: Path) -> None:
    result = run_preflight(tmp_path, "-v", "-k", "test_shared_memory")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::test_shared_memory" in result.stdout and " passed" in result.stdout
    assert sum("READY (CPU rehearsal)" in line for line in result.stdout.splitlines()) == 1


# -- a faulty 8x H100 node: the order of problems and the layout, everywhere -----------------------------

FAULTS = {"ecc_volatile": {"2": 2}, "remap_pending": [5], "remap_failed": [6]}
FAULTY_WIDTHS = (80, 200)
WORST = "GPU_ROW_REMAP_FAILED"  # GPU 6 needs replacing: the one fault no reset clears


@pytest.fixture(scope="module")
def faulty_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``preflight --with deepspeed -m 'not distributed' --oneline`` on a fake 8x H100 SXM node (the real
    nvidia-ml-py over the fake NVML C library, ``tests/fakes/nvml_profiles.py``) with an uncorrectable ECC
    error on GPU 2, a pending row remap on GPU 5 and a failed one on GPU 6, a CUDA 13.0 toolkit for torch's
    CUDA 12.8 (DeepSpeed's major-version refusal) and a captured ``nvidia-smi topo -m`` of an 8x H100 node;
    run at 80 and at 200 columns, one after the other (a run sees another in progress and says so). The outputs
    and the reports by width, and the HTML."""
    from tests.conftest import shared_fixtures_dir
    from tests.toolkit_fakes import fake_tool, fake_toolkit

    root = tmp_path_factory.mktemp("faulty")
    topo = shared_fixtures_dir() / "topo" / "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"
    if not topo.is_file():
        pytest.skip(f"no shared topology capture at {topo}")
    home = fake_toolkit(root / "cuda-13.0", "13.0")
    fake_tool(root / "tools", "ninja", "1.11.1")
    fake_tool(root / "tools", "c++", "c++ (GCC) 12.2.0")
    fake_tool(root / "smi", "nvidia-smi", "")
    (root / "smi" / "nvidia-smi").write_text(f"#!/bin/sh\ncat '{topo}'\n")
    spec = {"torch": {"version": "2.5.1+cu128", "cuda": "12.8", "arch": "sm_80 sm_86 sm_90"},
            "env": {"PATH": f"{home / 'bin'}{os.pathsep}{root / 'tools'}", "CUDA_HOME": str(home)},
            "toolkit_glob": str(root / "cuda-*"), "deepspeed": {"version": "0.19.8"}}
    (root / "node.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PREFLIGHT_FAKE_TOOLKIT": str(root / "node.json"),
           "PATH": f"{root / 'smi'}{os.pathsep}{os.environ['PATH']}"}
    out, reports = {}, {}
    for width in FAULTY_WIDTHS:
        argv = [sys.executable, "-m", "preflight", "--with", "deepspeed", "-m", "not distributed", "--oneline",
                "--report-dir", str(root / f"reports{width}"), "--", "-p", "tests.fakes.nvml_plugin",
                "--fake-nvml=8x-h100-sxm", f"--fake-nvml-faults={json.dumps(FAULTS)}", "-p", "tests.fakes.fake_toolkit"]
        run = subprocess.run(argv, capture_output=True, text=True, cwd=root, env={**env, "COLUMNS": str(width)},
                             timeout=300)
        assert run.returncode == 1, run.stdout + run.stderr
        out[width] = run.stdout
        reports[width] = json.loads((root / f"reports{width}" / "preflight.json").read_text())
        validate_report(reports[width])
    return {"out": out, "reports": reports, "report": reports[80],
            "html": (root / "reports80" / "preflight.html").read_text()}


@pytest.mark.e2e
def test_on_a_faulty_node_the_first_problem_everywhere_is_the_worst_hardware_fault(faulty_node: dict[str, Any]) -> None:
    report = faulty_node["report"]
    problems = report["problems"]
    assert problems[0]["code"] == WORST and problems[0]["kind"] == "rma"
    assert [p["code"] for p in problems[:3]] == [WORST, "GPU_ECC_UNCORRECTABLE", "GPU_ROW_REMAP_PENDING"]
    kinds = ["rma", "hardware", "blocker", "cost", "note"]
    assert [kinds.index(p["kind"]) for p in problems] == sorted(kinds.index(p["kind"]) for p in problems)
    assert "DEEPSPEED_CUDA_MAJOR_MISMATCH" in [p["code"] for p in problems]
    for width, text in faulty_node["out"].items():
        lines = text.rstrip("\n").splitlines()
        assert lines[-1].startswith(f"NOT READY: {WORST} (+"), lines[-1]  # --oneline
        block = lines[lines.index("=" * 80):]
        shown = [line.split()[1] for line in block if line.split()[:1] in (["FAIL"], ["WARN"], ["ERROR"])]
        assert shown == [p["code"] for p in faulty_node["reports"][width]["problems"]], (width, shown)
    page = faulty_node["html"]
    assert f"<h1>NOT READY: {WORST}</h1>" in page
    first = page.index('<div class="problem ')
    assert page.index(WORST, first) < page.index("GPU_ECC_UNCORRECTABLE", first) < page.index(
        "DEEPSPEED_CUDA_MAJOR_MISMATCH", first)


@pytest.mark.e2e
@pytest.mark.parametrize("width", FAULTY_WIDTHS)
def test_on_a_faulty_node_no_reason_is_cut_before_its_first_clause(faulty_node: dict[str, Any], width: int) -> None:
    text = faulty_node["out"][width]
    lines = text.rstrip("\n").splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    checks = lines[: lines.index("=" * 80)]
    flat = " ".join(" ".join(checks).split())
    missing = []
    for check in faulty_node["reports"][width]["checks"]:
        reason = check["summary"]
        index = (check.get("gpu") or {}).get("index")
        if index is not None:
            reason = gpu_reason(reason, index)
        first = clauses(reason)[0].rstrip(" ;:,")
        if first not in flat:
            missing.append((check["id"], first))
    assert not missing, missing
    # per-GPU results fold: one line for the seven healthy GPUs, the fault in its own words on its own
    assert any("Is the GPU free of uncorrectable ECC errors? [gpu0-1,3-7]" in line for line in checks)
    faulty = next(i for i, line in enumerate(checks) if line.startswith("FAIL") and "ECC errors? [gpu2]" in line)
    assert "2 uncorrectable ECC error(s) since the driver loaded" in " ".join(" ".join(checks[faulty:faulty + 3]).split())
    per_gpu = sum(1 for c in faulty_node["report"]["checks"] if c.get("gpu"))
    assert per_gpu >= 64 and sum(1 for line in checks if "[gpu" in line) < 20


@pytest.mark.e2e
def test_no_reason_or_fix_names_a_test(faulty_node: dict[str, Any]) -> None:
    import re

    named = [(c["id"], text) for c in faulty_node["report"]["checks"]
             for text in (c["summary"], c.get("remediation") or "") if re.search(r"\btest_[a-z]", text)]
    assert not named, named
