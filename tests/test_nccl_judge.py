"""Every verdict of the all-reduce judges, from hand-written sweep runs, plus the reference table."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.judge.busbw_chart import busbw_chart
from preflight.judge.busbw_reference import (
    REFERENCES,
    Expectation,
    Interconnect,
    classify_interconnect,
    job_busbw_expectation,
    expected_busbw,
    gpu_family,
    lookup,
)
from preflight.judge.nccl import (
    algbw_gbps,
    allreduce_busbw_gbps,
    human_bytes,
    judge_busbw,
    judge_p2p_worth_keeping,
)
from preflight.judge.nccl_env import costly_nccl_variables, judge_nccl_env
from preflight.outcome import Status
from preflight.parse.nccl_tests import parse_nccl_tests
from preflight.node.fabric import Layout
from preflight.probe.sweep import RankNote, RunStatus, SizeResult, SweepRun, env_flag_set

MIB = 1 << 20


def sweep(label: str, peak: float, *, ranks: int = 8, status: RunStatus = RunStatus.OK, wrong: bool = False,
          env: dict[str, str] | None = None, top: int = 256 * MIB, notes: tuple[RankNote, ...] = ()) -> SweepRun:
    """A run whose busbw climbs to ``peak`` at its largest size."""
    sizes = []
    if status is RunStatus.OK:
        for fraction, nbytes in ((0.3, MIB), (0.7, top // 4), (1.0, top)):
            busbw = peak * fraction
            algbw = busbw * ranks / (2 * (ranks - 1))
            sizes.append(SizeResult(nbytes, nbytes / (algbw * 1e9), algbw, busbw, not (wrong and nbytes == top)))
    return SweepRun(label=label, status=status, backend="nccl", world_size=ranks, sizes=tuple(sizes), env=env or {},
                    rank_notes=notes, deadline_s=60.0)


H100 = Expectation(475.0, "nccl-tests#290", "8x H100 SXM over NVSwitch")
HUNG_NOTES = (RankNote(0, "hung", "still running at the deadline at 'all-reduce of 268435456 bytes' for 55 s"),
              RankNote(1, "hung", "still running at the deadline"))


# --- nccl-tests definitions -------------------------------------------------------------------------

def test_definitions_match_nccl_tests_tables(shared_fixtures: Path) -> None:
    # Recompute algbw and busbw from size and time of a real 8-GPU all-reduce table.
    result = parse_nccl_tests((shared_fixtures / "nccl_tests" / "8xH100-SXM-single-node-all_reduce_perf-128M-4G-NVLS.txt").read_text())
    for row in result.rows:
        algbw = algbw_gbps(row.size_bytes, row.out_of_place.time_us / 1e6)
        assert algbw == pytest.approx(row.out_of_place.algbw_gbps, abs=0.01)
        assert allreduce_busbw_gbps(algbw, 8) == pytest.approx(row.out_of_place.busbw_gbps, abs=0.02)


def test_busbw_equals_algbw_for_two_ranks_and_zero_for_one() -> None:
    assert allreduce_busbw_gbps(47.38, 2) == 47.38
    assert allreduce_busbw_gbps(10.0, 1) == 0.0
    with pytest.raises(ValueError):
        allreduce_busbw_gbps(1.0, 0)
    with pytest.raises(ValueError):
        algbw_gbps(1, 0.0)


@pytest.mark.parametrize(("nbytes", "text"), [(512, "512 B"), (MIB, "1 MiB"), (256 * MIB, "256 MiB"), (1 << 30, "1 GiB"), (1536 * 1024, "1.5 MiB")])
def test_human_bytes(nbytes: int, text: str) -> None:
    assert human_bytes(nbytes) == text


# --- P2P on vs off -----------------------------------------------------------------------------------

def test_p2p_hang_with_working_fallback_is_p2p_broken() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 0, status=RunStatus.HUNG, notes=HUNG_NOTES), sweep("NCCL_P2P_DISABLE=1", 21.3), H100)
    assert verdict.status is Status.FAIL and verdict.code == "NCCL_P2P_BROKEN"
    assert "hung (ranks 0, 1 did not finish within 60 s)" in verdict.summary
    assert "21.3 GB/s busbw at 256 MiB" in verdict.summary
    assert "iommu=pt" in (verdict.remediation or "") and "intel_iommu=off" in (verdict.remediation or "")
    assert "ACS" in (verdict.remediation or "") and "BIOS" in (verdict.remediation or "") and "VM" in (verdict.remediation or "")
    assert "NCCL_P2P_DISABLE=1" in (verdict.remediation or "") and "4% of the 475 GB/s expected" in (verdict.remediation or "")
    assert "at 'all-reduce of 268435456 bytes'" in verdict.evidence["as-is"]


def test_p2p_crash_is_p2p_broken_without_expectation() -> None:
    notes = (RankNote(1, "crashed", "RuntimeError: Cuda failure 'peer access is not supported'"), RankNote(0, "stopped"))
    verdict = judge_p2p_worth_keeping(sweep("as-is", 0, status=RunStatus.FAILED, notes=notes), sweep("off", 15.0))
    assert verdict.code == "NCCL_P2P_BROKEN" and "failed (rank 1 crashed, rank 0 stopped)" in verdict.summary
    assert "reaches 15.0 GB/s busbw." in (verdict.remediation or "")


def test_wrong_values_only_with_p2p_are_p2p_broken() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 200.0, wrong=True), sweep("off", 20.0))
    assert verdict.code == "NCCL_P2P_BROKEN" and "returned wrong values" in verdict.summary


def test_shm_clearly_faster_warns_with_both_figures() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 10.0), sweep("NCCL_P2P_DISABLE=1", 15.0))
    assert verdict.status is Status.WARN and verdict.code == "NCCL_P2P_SLOWER_THAN_SHM"
    assert "50% faster" in verdict.summary and "10.0" in verdict.summary and "15.0" in verdict.summary
    assert "export NCCL_P2P_DISABLE=1" in (verdict.remediation or "")
    assert {m.name: m.value for m in verdict.metrics} == {"p2p_on_busbw_peak": 10.0, "p2p_off_busbw_peak": 15.0}


def test_shm_slightly_faster_is_within_noise() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 10.0), sweep("off", 11.0))
    assert verdict.status is Status.PASS and "keep P2P enabled" in verdict.summary


def test_p2p_much_faster_passes() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 230.0), sweep("off", 20.0))
    assert verdict.status is Status.PASS and "11.5x as fast" in verdict.summary


def test_both_runs_failing_is_a_fail_with_each_ranks_log() -> None:
    notes_on = (RankNote(0, "crashed", "NCCL WARN Cuda failure 'unspecified launch failure'"),)
    notes_off = (RankNote(1, "crashed", "Bus error (core dumped) in ncclShmOpen"),)
    verdict = judge_p2p_worth_keeping(sweep("as-is", 0, status=RunStatus.FAILED, notes=notes_on),
                        sweep("NCCL_P2P_DISABLE=1", 0, status=RunStatus.FAILED, notes=notes_off))
    assert verdict.status is Status.FAIL and verdict.code == "NCCL_ALLREDUCE_FAILED"
    assert "unspecified launch failure" in verdict.evidence["as-is"]
    assert "ncclShmOpen" in verdict.evidence["NCCL_P2P_DISABLE=1"]
    assert "/dev/shm" in (verdict.remediation or "")


def test_fallback_failing_warns_that_the_workaround_would_not_work() -> None:
    verdict = judge_p2p_worth_keeping(sweep("as-is", 230.0), sweep("off", 0, status=RunStatus.HUNG))
    assert verdict.status is Status.WARN and verdict.code == "NCCL_P2P_DISABLED_FAILS"
    assert "hung (no rank finished within 60 s)" in verdict.summary


def test_runs_without_a_common_size_are_not_compared() -> None:
    on = SweepRun(label="as-is", status=RunStatus.OK, backend="nccl", world_size=2,
                  sizes=(SizeResult(MIB, 0.001, 1.05, 1.05, True),))
    off = SweepRun(label="off", status=RunStatus.OK, backend="nccl", world_size=2,
                   sizes=(SizeResult(4 * MIB, 0.001, 4.2, 4.2, True),))
    verdict = judge_p2p_worth_keeping(on, off)
    assert verdict.status is Status.SKIP and "share no message size" in verdict.summary


# --- measured vs expected ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("peak", "status", "code"),
    [(470.0, Status.PASS, None), (340.0, Status.PASS, None), (320.0, Status.WARN, "NCCL_BUSBW_LOW"),
     (190.0, Status.WARN, "NCCL_BUSBW_LOW"), (185.0, Status.FAIL, "NCCL_BUSBW_LOW"), (15.0, Status.FAIL, "NCCL_BUSBW_LOW")],
)
def test_peak_against_expected(peak: float, status: Status, code: str | None) -> None:
    verdict = judge_busbw(sweep("as-is", peak), H100)
    assert verdict.status is status and verdict.code == code
    assert f"{peak:.1f} GB/s" in verdict.summary and "475 GB/s expected for 8x H100 SXM over NVSwitch" in verdict.summary
    assert verdict.evidence["expected"].endswith("nccl-tests#290")


def test_no_reference_reports_figures_without_threshold() -> None:
    verdict = judge_busbw(sweep("as-is", 3.2, ranks=2), None)
    assert verdict.status is Status.PASS and "no reference figure" in verdict.summary
    assert [m.name for m in verdict.metrics] == ["busbw_peak"]


def test_small_sweep_is_not_judged() -> None:
    verdict = judge_busbw(sweep("as-is", 1.0, top=16 * MIB), H100)
    assert verdict.status is Status.PASS and "too small to compare" in verdict.summary


def test_failed_run_fails_with_rank_notes() -> None:
    verdict = judge_busbw(sweep("as-is", 0, status=RunStatus.HUNG, notes=HUNG_NOTES), H100)
    assert verdict.code == "NCCL_ALLREDUCE_FAILED" and "rank 0 hung" in verdict.evidence["as-is"]


def test_wrong_values_fail() -> None:
    verdict = judge_busbw(sweep("as-is", 300.0, wrong=True), H100)
    assert verdict.code == "NCCL_ALLREDUCE_WRONG_RESULT" and "256 MiB" in verdict.summary


# --- inherited NCCL_* variables ----------------------------------------------------------------------

def test_costly_variables_are_named() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC", "NCCL_DEBUG": "INFO", "NCCL_SHM_DISABLE": "0",
           "NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "1048576", "NCCL_TOPO_FILE": "/x.xml",
           "NCCL_IB_DISABLE": "1", "PATH": "/bin"}
    names = [v.name for v in costly_nccl_variables(env)]
    assert names == ["NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_TOPO_FILE"]


@pytest.mark.parametrize(("value", "on"), [("1", True), ("0", False), ("", False), ("true", False), (" 2 ", True), (None, False)])
def test_env_flag_reads_like_nccl(value: str | None, on: bool) -> None:
    assert env_flag_set(value) is on


def test_env_without_costly_variables_passes() -> None:
    assert judge_nccl_env({"NCCL_DEBUG": "INFO"}).status is Status.PASS


def test_costly_variable_with_measured_cost_warns() -> None:
    env = {"NCCL_P2P_DISABLE": "1"}
    verdict = judge_nccl_env(env, sweep("as-is", 20.0, env=env), sweep("without NCCL_P2P_DISABLE", 230.0))
    assert verdict.status is Status.WARN and verdict.code == "NCCL_ENV_COSTS_SPEED"
    assert "costs 91% of all-reduce speed: 20.0 GB/s busbw with it, 230.0 GB/s without" in verdict.summary
    assert "unset NCCL_P2P_DISABLE" in (verdict.remediation or "")


def test_costly_variable_that_is_needed_passes() -> None:
    env = {"NCCL_P2P_DISABLE": "1"}
    verdict = judge_nccl_env(env, sweep("as-is", 20.0, env=env), sweep("without", 0, status=RunStatus.HUNG))
    assert verdict.status is Status.PASS and "needed here" in verdict.summary


def test_costly_variable_without_measurable_cost_passes() -> None:
    verdict = judge_nccl_env({"NCCL_ALGO": "Ring"}, sweep("as-is", 230.0), sweep("without", 235.0))
    assert verdict.status is Status.PASS and "costs nothing measurable" in verdict.summary


def test_costly_variable_not_measured_warns() -> None:
    verdict = judge_nccl_env({"NCCL_NVLS_ENABLE": "0"})
    assert verdict.code == "NCCL_ENV_COSTS_SPEED" and "not measured" in verdict.summary


# --- reference table ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "family"),
    [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
     ("NVIDIA H200", "H200 SXM"), ("NVIDIA A100-SXM4-80GB", "A100 SXM"), ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
     ("NVIDIA A100-PCIE-40GB", "A100 PCIe"), ("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"),
     ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell"),
     ("NVIDIA A40", "A40"), ("NVIDIA L40S", "L40S"), ("Tesla V100-SXM2-16GB", None)],
)
def test_gpu_family(name: str, family: str | None) -> None:
    assert gpu_family(name) == family


def test_every_reference_row_names_its_source() -> None:
    assert all(row.source and row.busbw_gbps > 0 and row.min_gpus <= row.max_gpus for row in REFERENCES)


@pytest.mark.parametrize(
    ("name", "gpus", "link", "figure"),
    [("NVIDIA H100 80GB HBM3", 8, Interconnect.NVSWITCH, 475.0), ("NVIDIA H100 80GB HBM3", 4, Interconnect.NVSWITCH, 355.0),
     ("NVIDIA H200", 8, Interconnect.NVSWITCH, 475.0), ("NVIDIA A100-SXM4-80GB", 8, Interconnect.NVSWITCH, 230.0),
     ("NVIDIA GeForce RTX 4090", 8, Interconnect.PCIE_GEN4, 15.0), ("NVIDIA L40S", 4, Interconnect.PCIE_GEN4, 15.0),
     ("NVIDIA A40", 2, Interconnect.NVLINK_BRIDGE, 47.0), ("NVIDIA L40S", 4, Interconnect.PCIE_GEN5, 20.0)],
)
def test_lookup(name: str, gpus: int, link: Interconnect, figure: float) -> None:
    reference = lookup(name, gpus, link)
    assert reference is not None and reference.busbw_gbps == figure


@pytest.mark.parametrize(
    ("name", "gpus", "link"),
    [("NVIDIA H200", 4, Interconnect.NVSWITCH), ("Tesla V100-SXM2-16GB", 8, Interconnect.UNKNOWN),
     ("NVIDIA L40S", 4, Interconnect.PCIE_GEN3), ("NVIDIA L40S", 1, Interconnect.PCIE_GEN4)],
)
def test_no_reference_means_no_threshold(name: str, gpus: int, link: Interconnect) -> None:
    assert expected_busbw(name, gpus, link) is None


def test_user_figure_wins() -> None:
    expectation = expected_busbw("NVIDIA H100 80GB HBM3", 8, Interconnect.NVSWITCH, override_gbps=300.0)
    assert expectation == Expectation(300.0, "given with --expect-busbw", "8x H100 SXM over NVSwitch")


@pytest.mark.parametrize(
    ("layout", "gpus", "gen", "link"),
    [(Layout.NVSWITCH, 8, 5, Interconnect.NVSWITCH), (Layout.NVLINK_ALL, 2, 4, Interconnect.NVLINK_BRIDGE),
     (Layout.NVLINK_PAIRS, 4, 4, Interconnect.PCIE_GEN4), (Layout.PCIE, 4, 4, Interconnect.PCIE_GEN4),
     (Layout.PCIE, 4, None, Interconnect.UNKNOWN), (Layout.NVLINK_ALL, 4, 4, Interconnect.UNKNOWN)],
)
def test_classify_interconnect(layout: Layout, gpus: int, gen: int | None, link: Interconnect) -> None:
    assert classify_interconnect(layout, gpus, gen) is link


def _expectation(profile: str, gpus: int) -> Expectation | None:
    from preflight.node.fabric import fabric_from
    from tests.fakes.nvml import walk_fake

    snapshot = walk_fake(profile)
    job = snapshot.gpus[:gpus]
    return job_busbw_expectation(job, fabric_from(snapshot).layout([g.index for g in job]))


@pytest.mark.parametrize(
    ("profile", "gpus", "figure"),
    [("8x-h100-sxm", 8, 475.0), ("8x-a100-sxm", 8, 230.0), ("4x-a100-pcie-bridged", 4, 25.0),
     ("8x-l40s", 8, 15.0), ("8x-v100-sxm2", 8, None), ("8x-h200-hgx", 8, 475.0), ("8x-b200-hgx", 8, 830.0),
     ("2x-l4", 2, 15.0), ("8x-unknown-nvswitch", 8, None)],
)
def test_expected_figure_from_fake_machines(profile: str, gpus: int, figure: float | None) -> None:
    """The class from NVML (an H200/B200 board reaches NVSwitches whatever its name), the figure from the table."""
    expectation = _expectation(profile, gpus)
    assert (expectation.busbw_gbps if expectation else None) == figure


def test_bridged_pair_of_a_pcie_machine() -> None:
    expectation = _expectation("4x-a100-pcie-bridged", 2)
    assert expectation is not None and expectation.platform == "2x A100 PCIe over NVLink bridge"


# --- chart ----------------------------------------------------------------------------------------------

def test_chart_geometry_and_labels() -> None:
    view = busbw_chart([sweep("as-is", 230.0), sweep("NCCL_P2P_DISABLE=1", 20.0)], H100)
    data = view.data
    assert view.kind == "chart" and len(data["series"]) == 2
    assert data["expected"]["label"] == "expected 475 GB/s (8x H100 SXM over NVSwitch)"
    plot = data["plot"]
    for series in data["series"]:
        for marker in series["markers"]:
            assert plot["x0"] <= marker["x"] <= plot["x1"] and plot["y1"] <= marker["y"] <= plot["y0"]
    assert [t["label"] for t in data["xticks"]] == ["1 MiB", "64 MiB", "256 MiB"]
    assert data["series"][0]["label"] == "as-is (peak 230.0 GB/s)"


def test_chart_of_failed_runs_has_no_series() -> None:
    view = busbw_chart([sweep("as-is", 0, status=RunStatus.HUNG)], None)
    assert view.data["series"] == [] and view.data["expected"] is None


def test_chart_template_escapes_labels() -> None:
    from preflight.report.html import _environment

    run = sweep("<script>alert(1)</script>", 10.0)
    template = _environment().get_template("views/chart.html.j2")
    html = template.render(view=busbw_chart([run], None).as_dict())
    assert "<script>" not in html and "&lt;script&gt;" in html and "<polyline" in html


def test_broken_p2p_with_the_workaround_already_set_is_a_warning() -> None:
    env = {"NCCL_P2P_DISABLE": "1"}
    verdict = judge_p2p_worth_keeping(sweep("without NCCL_P2P_DISABLE", 0, status=RunStatus.HUNG), sweep("as-is", 20.0, env=env), H100,
                        workaround_set=True)
    assert verdict.status is Status.WARN and verdict.code == "NCCL_P2P_BROKEN"
    assert "already sets NCCL_P2P_DISABLE" in verdict.summary


def test_faster_workaround_already_set_passes() -> None:
    verdict = judge_p2p_worth_keeping(sweep("without NCCL_P2P_DISABLE", 10.0), sweep("as-is", 15.0, env={"NCCL_P2P_DISABLE": "1"}),
                        workaround_set=True)
    assert verdict.status is Status.PASS and "already set" in verdict.summary


def test_chart_labels_every_other_size_when_crowded() -> None:
    sizes = tuple(SizeResult(MIB << k, 0.001, 1.0, 1.0, True) for k in range(11))
    run = SweepRun(label="as-is", status=RunStatus.OK, backend="nccl", world_size=8, sizes=sizes)
    labels = [t["label"] for t in busbw_chart([run], None).data["xticks"]]
    assert labels[:3] == ["1 MiB", "", "4 MiB"] and labels[-1] == "1 GiB" and len(labels) == 11
