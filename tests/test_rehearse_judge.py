"""The rehearsal's judges on hand-written launches: each failure named, figures, scaling, the link's
predicted share, and the views. Stacks and messages are the shapes real runs record (the e2e
tests in test_rehearse_e2e.py produce them for real)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from preflight.judge.rehearse import (
    CommModel,
    judge_scaling,
    judge_size,
    scaling_rows,
)
from preflight.judge.rehearse_chart import scaling_chart
from preflight.judge.rehearse_failure import ended_early, name_failure, waiting_place
from preflight.outcome import Status
from preflight.rehearse.facts import Frame, RankRun, SizeFigures, SizeRun, percentile, size_figures
from preflight.rehearse.table import table_view, terminal_lines
from preflight.rehearse.watch import Spread

SITE = "/venv/lib/python3.11/site-packages"
RUNPY = (Frame("/venv/preflight/rehearse/bootstrap.py", 430, "main", "runpy.run_path(script)"),
         Frame("<frozen runpy>", 88, "_run_code"), Frame("/work/train.py", 87, "<module>", "main()"))
SLEEPING = (*RUNPY, Frame("/work/train.py", 73, "main", "time.sleep(3600)"))
IN_BACKWARD = (*RUNPY, Frame("/work/train.py", 63, "main", "loss.backward()"),
               Frame(f"{SITE}/torch/_tensor.py", 623, "backward"),
               Frame(f"{SITE}/torch/autograd/graph.py", 979, "_engine_run_backward"))
IN_DDP_INIT = (*RUNPY, Frame("/work/train.py", 40, "main", "ddp = DDP(model)"),
               Frame(f"{SITE}/torch/nn/parallel/distributed.py", 835, "__init__", "_sync_module_states(...)"),
               Frame(f"{SITE}/torch/distributed/utils.py", 300, "_sync_params_and_buffers"))
IN_JIT_BUILD = (*RUNPY, Frame("/work/train.py", 19, "main", "deepspeed.init_distributed()"),
                Frame(f"{SITE}/deepspeed/comm/torch.py", 207, "__init__", "self.shm_comm_op = build_shm_op()"),
                Frame(f"{SITE}/deepspeed/ops/op_builder/builder.py", 613, "jit_load"),
                Frame(f"{SITE}/torch/utils/cpp_extension.py", 2893, "_run_ninja_build", "subprocess.run("))


def _done(rank: int, steps: int = 12, step_s: float = 0.1, first: float = 5.0, **extra: Any) -> RankRun:
    starts = tuple(first + i * step_s for i in range(steps))
    return RankRun(rank=rank, ended=extra.pop("ended", "steps_done"), steps=steps, step_starts_s=starts,
                   window_s=extra.pop("window_s", 10 * step_s), window_steps=extra.pop("window_steps", 10),
                   rss_peak_bytes=300_000_000, param_elements=1000, param_bytes=4000, **extra)


def _run(*ranks: RankRun, nproc: int | None = None, **extra: Any) -> SizeRun:
    return SizeRun(nproc=nproc or len(ranks), ranks=ranks, warmup=2, steps=10, deadline_s=extra.pop("deadline_s", 60.0),
                   stall_s=extra.pop("stall_s", 10.0), duration_s=extra.pop("duration_s", 20.0), **extra)


def test_a_size_that_ran_its_steps_passes_with_its_figures() -> None:
    run = _run(_done(0, step_s=0.1), _done(1, step_s=0.12, window_s=1.2))
    fig = size_figures(run)
    assert fig is not None and fig.complete
    assert fig.steps_per_s == pytest.approx(10 / 1.2)  # the slowest rank paces the job
    assert fig.step_median_s == pytest.approx(0.12)
    assert fig.steps_reached == (12, 12) and fig.memory_kind == "RSS"
    verdict = judge_size(run, fig)
    assert verdict.status is Status.PASS
    assert "10 steps measured" in verdict.summary and "300 MB" in verdict.summary
    assert {m.name for m in verdict.metrics} >= {"first_step", "step_median", "step_p90", "steps_per_s", "peak_memory"}


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    assert percentile([5.0], 0.9) == 5.0


def test_a_crash_names_the_first_failing_rank_and_its_error_not_the_peer_that_lost_it() -> None:
    crashed = _done(1, steps=3, ended="raised", window_s=None, window_steps=0, error_type="builtins.RuntimeError",
                    error_message="injected failure in the training loop at step 3", error_time=100.0,
                    traceback="Traceback...\nRuntimeError: injected failure in the training loop at step 3")
    peer = _done(0, steps=3, ended="raised", window_s=None, window_steps=0, error_type="builtins.RuntimeError",
                 error_message="[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:2345",
                 error_time=99.0)
    verdict = name_failure(_run(peer, crashed))
    assert verdict is not None and verdict.status is Status.FAIL and verdict.code == "REHEARSAL_CRASHED"
    assert verdict.summary.startswith("2 ranks: rank 1 crashed (RuntimeError: injected failure")
    assert "after step 3" in verdict.summary and "rank 0 stopped after it" in verdict.summary
    assert "injected failure" in verdict.evidence["rank 1 traceback (tail)"]
    assert verdict.details["first_failing_rank"] == 1


def test_an_out_of_memory_error_is_called_an_oom() -> None:
    rank = _done(0, steps=2, ended="raised", window_s=None, window_steps=0, error_type="torch.OutOfMemoryError",
                 error_message="CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79 GiB")
    verdict = name_failure(_run(rank))
    assert verdict is not None and verdict.code == "REHEARSAL_OOM"
    assert "ran out of memory" in verdict.summary and "after step 2" in verdict.summary
    assert "batch" in (verdict.remediation or "")


def test_a_rank_killed_by_sigkill_points_at_the_oom_killer() -> None:
    killed = RankRun(rank=1, ended="killed", steps=4, exit_code=-signal.SIGKILL, launcher_state="crashed")
    stopped = RankRun(rank=0, ended="killed", steps=4, exit_code=-signal.SIGTERM, launcher_state="stopped")
    verdict = name_failure(_run(stopped, killed, root_cause=1))
    assert verdict is not None and verdict.code == "REHEARSAL_OOM"
    assert "rank 1 killed by signal 9 (SIGKILL), probably the OOM killer: see `dmesg" in verdict.summary


def test_a_hang_names_the_rank_the_others_wait_for_and_the_step() -> None:
    sleeper = _done(0, steps=2, ended="stalled", window_s=None, window_steps=0, stack=SLEEPING, idle_s=10.2)
    waiter = _done(1, steps=2, ended="stalled", window_s=None, window_steps=0, stack=IN_BACKWARD, idle_s=10.1)
    verdict = name_failure(_run(waiter, sleeper))
    assert verdict is not None and verdict.code == "REHEARSAL_HUNG"
    assert verdict.summary.startswith("2 ranks hung after step 2: rank 0 stopped in train.py:73 (time.sleep(3600))")
    assert "rank 1 waits in backward at train.py:63" in verdict.summary
    assert verdict.details["ranks_behind"] == [0]
    assert "time.sleep" in verdict.evidence["rank 0 stack while idle"]


def test_a_peer_that_lost_the_hung_rank_does_not_turn_the_hang_into_a_crash() -> None:
    """CI saw this race: rank 0 stalled at step 2, the watchdog ended it, and rank 1's gloo pair
    raised "Connection closed by peer" before the launcher collected it."""
    sleeper = _done(0, steps=2, ended="stalled", window_s=None, window_steps=0, stack=SLEEPING, idle_s=8.3)
    lost = _done(1, steps=2, ended="raised", window_s=None, window_steps=0, error_type="builtins.RuntimeError",
                 error_message="[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:12682",
                 error_time=101.0)
    verdict = name_failure(_run(sleeper, lost, stall_s=8.0))
    assert verdict is not None and verdict.code == "REHEARSAL_HUNG", verdict and verdict.summary
    assert verdict.details["ranks_behind"] == [0]
    assert "rank 0 stopped in train.py:73" in verdict.summary and "rank 1 lost its peer" in verdict.summary


def test_the_waiter_that_calls_the_stall_first_still_names_the_sleeper() -> None:
    """The other order of that race (seen here under load): rank 1, waiting in backward, reached the
    stall limit first; torchrun then ended the sleeping rank 0, whose last record read 7.4 s idle."""
    waiter = _done(1, steps=2, ended="stalled", window_s=None, window_steps=0, stack=IN_BACKWARD, idle_s=8.0,
                   still_s=6.0)
    sleeper = _done(0, steps=2, ended="killed", window_s=None, window_steps=0, stack=SLEEPING, idle_s=7.4,
                    still_s=5.4, exit_code=-signal.SIGTERM, launcher_state="crashed")
    verdict = name_failure(_run(waiter, sleeper, stall_s=8.0, deadline_s=150.0))
    assert verdict is not None and verdict.code == "REHEARSAL_HUNG", verdict and verdict.summary
    assert verdict.summary.startswith("2 ranks hung after step 2: rank 0 stopped in train.py:73"), verdict.summary
    assert verdict.details["ranks_behind"] == [0]
    ahead = _done(0, steps=3, ended="killed", window_s=None, window_steps=0, stack=SLEEPING, idle_s=1.0,
                  exit_code=-signal.SIGTERM, launcher_state="crashed")
    verdict = name_failure(_run(waiter, ahead, stall_s=8.0, deadline_s=150.0))
    assert verdict is not None and verdict.details["ranks_behind"] == [1]  # a rank further on is not the one


def test_a_rank_that_left_early_while_its_peer_waits_is_named() -> None:
    left = _done(0, steps=4, ended="returned", window_s=None, window_steps=0)
    waiting = _done(1, steps=4, ended="stalled", window_s=None, window_steps=0, stack=IN_BACKWARD, idle_s=11.0)
    verdict = name_failure(_run(left, waiting))
    assert verdict is not None and verdict.code == "REHEARSAL_HUNG"
    assert "rank 0 left the script after step 4" in verdict.summary


def test_no_step_before_the_deadline_says_where_the_ranks_were() -> None:
    rank = RankRun(rank=0, ended="deadline", steps=0, stack=SLEEPING, idle_s=58.0)
    verdict = name_failure(_run(rank, duration_s=63.0))  # the deadline ended it: the 60 s are what it ran
    assert verdict is not None and verdict.code == "REHEARSAL_NO_STEP"
    assert "no optimizer step in 60 s" in verdict.summary and "train.py:73" in verdict.summary


def test_a_stall_in_the_first_collective_points_to_the_node_checks() -> None:
    ranks = [RankRun(rank=r, ended="deadline", steps=0, stack=IN_DDP_INIT, pg_up_s=6.0, idle_s=50.0, still_s=44.0)
             for r in (0, 1)]
    verdict = name_failure(_run(*ranks))
    assert verdict is not None and verdict.code == "REHEARSAL_FIRST_COLLECTIVE_HUNG"
    assert "process group came up 6 s after the launch" in verdict.summary
    assert "preflight -k" in (verdict.remediation or "")


def test_one_look_inside_ddp_forward_of_a_loop_that_never_steps_is_not_a_hung_link() -> None:
    # the CI failure this came from: ddp_seed.py --no-step on 1 rank, the deadline's look landed in
    # DDP.forward (torch/nn/parallel/), a frame younger than a tick
    in_forward = (*RUNPY, Frame("/work/train.py", 61, "main", "loss = F.mse_loss(ddp(x), y)"),
                  Frame(f"{SITE}/torch/nn/parallel/distributed.py", 1680, "forward", "inputs, kwargs = self._pre_forward"))
    rank = RankRun(rank=0, ended="deadline", steps=0, stack=in_forward, pg_up_s=3.0, idle_s=38.0, still_s=0.002)
    verdict = name_failure(_run(rank, deadline_s=40.0, stall_s=8.0, duration_s=41.0))
    assert verdict is not None and verdict.code == "REHEARSAL_NO_STEP"
    assert "no optimizer step in 40 s" in verdict.summary and "was still running at train.py:61 (loss = F.mse_loss(ddp(x), y)), not stuck" in verdict.summary
    stuck = RankRun(rank=0, ended="deadline", steps=0, stack=in_forward, pg_up_s=3.0, idle_s=38.0, still_s=30.0)
    assert getattr(name_failure(_run(stuck, deadline_s=40.0, stall_s=8.0)), "code", None) == "REHEARSAL_FIRST_COLLECTIVE_HUNG"


def test_a_rank_busy_in_its_own_code_before_the_first_step_is_named_not_the_link() -> None:
    waiting = RankRun(rank=0, ended="deadline", steps=0, stack=IN_DDP_INIT, pg_up_s=6.0, idle_s=50.0, still_s=44.0)
    sleeping = RankRun(rank=1, ended="deadline", steps=0, stack=SLEEPING, pg_up_s=6.0, idle_s=50.0)
    verdict = name_failure(_run(waiting, sleeping))
    assert verdict is not None and verdict.code == "REHEARSAL_NO_STEP"
    assert "rank 0 waits in a collective" in verdict.summary and "rank 1 stopped in train.py:73" in verdict.summary


def test_a_jit_build_at_the_deadline_is_not_taken_for_a_collective() -> None:
    assert waiting_place(IN_JIT_BUILD) == "build"
    verdict = name_failure(_run(RankRun(rank=0, ended="deadline", steps=0, stack=IN_JIT_BUILD, idle_s=118.0)))
    assert verdict is not None and verdict.code == "REHEARSAL_NO_STEP"
    assert "JIT-compiling" in verdict.summary and "TORCH_EXTENSIONS_DIR" in (verdict.remediation or "")


def test_a_script_that_ends_without_a_step() -> None:
    verdict = name_failure(_run(RankRun(rank=0, ended="returned", steps=0, ended_s=3.5,
                                        log_tail="[preflight rehearsal rank 0] pid 1 running train.py\n"
                                                 "Unable to locate sufficient 2 gpus to train\n")))
    assert verdict is not None and verdict.code == "REHEARSAL_NO_STEP"
    assert verdict.summary == ('1 rank: the script ended by itself 3.5 s after the launch without a single optimizer '
                               'step; its last output: "Unable to locate sufficient 2 gpus to train"')
    assert "--timeout" not in (verdict.remediation or "")


def test_a_script_that_ends_early_is_measured_and_warned() -> None:
    run = _run(_done(0, steps=6, ended="returned", window_s=None, window_steps=0))
    fig = size_figures(run)
    assert fig is not None and not fig.complete and fig.measured_steps == 3
    assert fig.steps_per_s == pytest.approx(10.0)
    verdict = judge_size(run, fig)
    assert verdict.status is Status.WARN and verdict.code == "REHEARSAL_ENDED_EARLY"
    assert "ended after 6 of 12 steps" in verdict.summary


def test_the_deadline_in_the_middle_of_steady_steps_is_slow_not_hung() -> None:
    run = _run(_done(0, steps=7, ended="deadline", window_s=None, window_steps=0, idle_s=0.05))
    verdict = name_failure(run)
    assert verdict is not None and verdict.code == "REHEARSAL_DEADLINE" and verdict.status is Status.WARN


def _fig(nproc: int, steps_per_s: float, spread: float | None = 0.02, idle: tuple[int, ...] = ()) -> SizeFigures:
    return SizeFigures(nproc=nproc, first_step_s=5.0, step_median_s=1 / steps_per_s, step_p90_s=1 / steps_per_s,
                       steps_per_s=steps_per_s, measured_steps=50, complete=True, peak_memory_bytes=(1,) * nproc,
                       memory_kind="GPU", steps_reached=(55,) * nproc,
                       spread=Spread(steps_per_s, spread, 6) if spread is not None else None, idle_ranks=idle)


def test_the_communication_model_follows_the_strategy() -> None:
    ddp = CommModel(params=1_000_000_000, bytes_per_param=2, strategy="ddp", busbw_gbps=100.0,
                    busbw_source="measured", params_source="given")
    assert ddp.seconds(1) == 0.0
    assert ddp.seconds(8) == pytest.approx(2e9 * 2 * 7 / 8 / 100e9)
    fsdp = CommModel(params=1_000_000_000, bytes_per_param=2, strategy="fsdp", busbw_gbps=100.0,
                     busbw_source="measured", params_source="given")
    assert fsdp.seconds(8) == pytest.approx(1.5 * ddp.seconds(8))


def test_scaling_near_linear_passes_with_cost_per_thousand_steps() -> None:
    rows = scaling_rows([_fig(1, 3.2), _fig(2, 3.1), _fig(8, 2.85)], None, price_per_hour=98.0)
    assert [round(r.scaling, 2) for r in rows] == [1.0, 1.94, 7.12]
    assert rows[2].cost_per_1k_steps == pytest.approx(98.0 * (1 / 2.85) * 1000 / 3600)
    verdict = judge_scaling(rows, None)
    assert verdict.status is Status.PASS and "8 ranks 7.12x (89% of linear, +/-3%)" in verdict.summary


def test_scaling_well_short_of_linear_is_degraded_and_says_whether_the_link_explains_it() -> None:
    comm = CommModel(params=1_000_000_000, bytes_per_param=4, strategy="ddp", busbw_gbps=20.0,
                     busbw_source="measured here", params_source="given")
    rows = scaling_rows([_fig(1, 2.0), _fig(8, 1.0)], comm, None)
    verdict = judge_scaling(rows, comm)
    assert verdict.status is Status.WARN and verdict.code == "REHEARSAL_SCALING_LOW"
    assert "8 ranks give 4.00x the throughput of 1, 50% of linear" in verdict.summary
    assert "explains most of the loss" in verdict.summary  # 0.35 s predicted of the 0.5 s lost
    small = CommModel(params=1000, bytes_per_param=4, strategy="ddp", busbw_gbps=20.0,
                      busbw_source="measured here", params_source="given")
    verdict = judge_scaling(scaling_rows([_fig(1, 2.0), _fig(8, 1.0)], small, None), small)
    assert "under 1% of the 0.500 s lost" in verdict.summary and "data loading" in (verdict.remediation or "")


def test_scaling_needs_two_measured_sizes() -> None:
    verdict = judge_scaling(scaling_rows([_fig(1, 2.0)], None, None), None, not_measured=[2])
    assert verdict.status is Status.SKIP and "2 ranks gave no steady figure" in verdict.summary


def test_the_chart_and_the_table_carry_every_size() -> None:
    rows = scaling_rows([_fig(1, 3.2), _fig(2, 3.1), _fig(8, 2.85)], None, None)
    chart = scaling_chart(rows)
    assert chart.kind == "chart" and [t["label"] for t in chart.data["xticks"]] == ["1", "2", "8"]
    assert len(chart.data["series"]) == 2
    section = {"script": "train.py", "args": ["--lr", "1"], "warmup": 5, "steps": 50, "device": "gpu",
               "assumption": "steps/s x ranks", "communication": None, "communication_note": None,
               "price_per_hour_usd": None,
               "sizes": [{"ranks": 1, "status": "PASS", "summary": "", "first_step_s": 41.2, "step_median_s": 0.31,
                          "steps_per_s": 3.2, "throughput": 3.2, "scaling": 1.0, "efficiency": 1.0,
                          "peak_memory_bytes": [61e9], "memory_kind": "GPU"},
                         {"ranks": 8, "status": "FAIL", "code": "REHEARSAL_HUNG", "summary": "8 ranks hung"}]}
    lines = terminal_lines(section)
    assert lines[0].startswith("Rehearsal of train.py --lr 1: 5 warm-up + 50 measured steps")
    assert "peak GPU mem" in lines[1] and "41.2 s" in lines[2] and "61.0 GB" in lines[2]
    assert lines[-1] == "8 ranks FAIL REHEARSAL_HUNG: 8 ranks hung"
    view = table_view(section)
    assert view.data["highlight"] == [1] and view.data["columns"][0] == "ranks"


def test_a_rehearsal_section_validates_against_the_shipped_schema(tmp_path: Path) -> None:
    """A section built by the session (every field type, failed and passed sizes) in a report
    built by the report model: valid for jsonschema and for preflight's own validator."""
    from preflight.rehearse.plan import RehearsalPlan
    from preflight.rehearse.session import RehearsalSession
    from preflight.report.model import RunRecord, build_report
    from preflight.report.validate import first_problem
    from tests.conftest import validate_report

    plan = RehearsalPlan(script=tmp_path / "train.py", script_text="train.py", args=("--lr", "1"), cwd=tmp_path,
                         sizes=(1, 2, 8), price_per_hour=98.0)
    session = RehearsalSession(plan, tmp_path)
    session.figures = {1: _fig(1, 3.2), 2: _fig(2, 3.1), 8: None}
    session.verdicts = {1: judge_scaling([], None), 2: judge_scaling([], None)}
    session.comm = CommModel(params=7_000_000_000, bytes_per_param=2, strategy="zero3", busbw_gbps=180.0,
                             busbw_source="measured", params_source="given with --model-params")
    session.rows = scaling_rows([_fig(1, 3.2), _fig(2, 3.1)], session.comm, 98.0)
    report = build_report(RunRecord(), node={"hostname": "h", "os": "linux", "kernel": "6", "cpu": "x", "cpu_count": 2,
                                             "memory_bytes": 1, "python": "3.11",
                                             "torch": {"python": "/venv/bin/python", "version": "2.13.0", "cuda": None,
                                                       "build": "CPU", "device_count": 0},
                                             "job": {"gpus": [], "ranks": 2, "on_gpu": False,
                                                     "source": "2 CPU ranks on gloo (a CPU rehearsal, --cpu)"},
                                             "gpus": {"backend": "nvml", "driver_version": None, "error": "NVML_ERROR_LIBRARY_NOT_FOUND",
                                                      "job_sees": "no GPU", "gpus": []}},
                          environment={}, options={}, exit_code=0, sections={"rehearsal": session.section(),
                                                                             "checks": "never replaces a core key"}
                          ).to_json()
    assert isinstance(report["checks"], list) and report["rehearsal"]["sizes"][2]["status"] == "NOT RUN"
    validate_report(report)
    assert first_problem(report) is None


# -- issue 25 item 7, issue 26 item 4: causes and figures only from what was observed ---------------------


IN_CUDA = (*RUNPY, Frame("/work/train.py", 89, "main", 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))'),
           Frame(f"{SITE}/torch/cuda/__init__.py", 567, "set_device", "torch._C._cuda_setDevice(device)"))


def _ran(rank: int, steps: int, **extra: Any) -> RankRun:
    return _done(rank, steps=steps, window_s=None, window_steps=0, **extra)


def test_a_scripts_own_os_exit_is_named_with_where_it_was_called() -> None:
    exited = _ran(0, 5, ended="os_exit", exit_code=3, error_type="os._exit", error_message="os._exit(3)",
                  error_frames=(*RUNPY, Frame("/work/train.py", 40, "main", "os._exit(3)")))
    verdict = name_failure(_run(exited))
    assert verdict is not None and verdict.code == "REHEARSAL_CRASHED"
    assert verdict.summary == "1 rank: rank 0 called os._exit(3) at train.py:40 (os._exit(3)) after step 5"
    clean = _ran(0, 5, ended="os_exit", exit_code=0, error_frames=(Frame("/work/train.py", 40, "main", "os._exit(0)"),))
    early = judge_size(_run(clean), size_figures(_run(clean)))
    assert early.code == "REHEARSAL_ENDED_EARLY" and "called os._exit(0) at train.py:40" in early.summary


def test_a_rank_frozen_in_native_code_is_the_one_named_not_its_stale_stack() -> None:
    waiter = _ran(0, 3, ended="stalled", stack=IN_BACKWARD, idle_s=8.0, still_s=7.0)
    frozen = _ran(1, 3, ended="killed", stack=(*RUNPY, Frame("<frozen importlib._bootstrap_external>", 729, "x")),
                  exit_code=-signal.SIGTERM, launcher_state="crashed", frozen_s=14.0,
                  frozen_state="state S waiting in hrtimer_nanosleep")
    verdict = name_failure(_run(waiter, frozen, stall_s=8.0))
    assert verdict is not None and verdict.code == "REHEARSAL_HUNG" and verdict.details["ranks_behind"] == [1]
    assert verdict.summary.startswith("2 ranks hung after step 3: rank 1's Python watchdog was silent for 14 s while "
                                      "the process lived (state S waiting in hrtimer_nanosleep): native code held the "
                                      "GIL")
    assert "importlib" not in verdict.summary and "py-spy" in (verdict.remediation or "")


def test_a_script_that_needs_cuda_rehearsed_without_a_gpu_says_so_and_where() -> None:
    crashed = RankRun(rank=0, ended="raised", steps=0, error_type="builtins.AttributeError",
                      error_message="module 'torch._C' has no attribute '_cuda_setDevice'", error_frames=IN_CUDA)
    verdict = name_failure(_run(crashed))
    assert verdict is not None and verdict.code == "REHEARSAL_NEEDS_GPU"
    assert verdict.summary.startswith('1 rank: this script calls torch.cuda.set_device at train.py:89 (torch.cuda.'
                                      'set_device(int(os.environ["LOCAL_RANK"]))), and torch sees no GPU here: '
                                      'rehearse it on a GPU node')
    nccl = RankRun(rank=0, ended="raised", steps=0, error_type="builtins.RuntimeError",
                   error_message="Distributed package doesn't have NCCL built in",
                   error_frames=(*RUNPY, Frame("/work/train.py", 30, "main", 'dist.init_process_group("nccl")'),
                                 Frame(f"{SITE}/torch/distributed/distributed_c10d.py", 1700, "init_process_group")))
    assert "calls torch.distributed.init_process_group with the NCCL backend at train.py:30" in \
        getattr(name_failure(_run(nccl)), "summary", "")
    on_gpu = name_failure(_run(crashed, on_gpu=True))
    assert on_gpu is not None and on_gpu.code == "REHEARSAL_CRASHED"  # on a GPU node it is the script's own error


def test_steps_no_hook_can_count_are_said_so_with_how_to_mark_them() -> None:
    manual = RankRun(rank=0, ended="uncountable", steps=0, backward_passes=56, backward_span_s=2.5)
    verdict = name_failure(_run(manual))
    assert verdict is not None and verdict.status is Status.ERROR and verdict.code == "REHEARSAL_STEPS_UNCOUNTED"
    assert verdict.summary == ("1 rank: steps cannot be counted: the script ran 56 backward passes in 2.5 s and it "
                               "uses no torch.optim optimizer (it updates its parameters itself); mark its steps to "
                               "rehearse it")
    assert "--step-function" in (verdict.remediation or "") and "preflight_rehearsal" in (verdict.remediation or "")


def test_a_rank_that_never_stepped_is_named_and_its_size_left_out_of_the_scaling() -> None:
    idle = RankRun(rank=1, ended="returned", steps=0, ended_s=0.4)
    run = _run(_done(0), idle)
    fig = size_figures(run)
    assert fig is not None and fig.idle_ranks == (1,)
    verdict = judge_size(run, fig)
    assert verdict.status is Status.WARN and verdict.code == "REHEARSAL_RANK_IDLE"
    assert verdict.summary.startswith("2 ranks: rank 1 returned 0.4 s after the launch without an optimizer step, "
                                      "while rank 0 ran 12 steps")
    rows = scaling_rows([_fig(1, 3.0), _fig(2, 3.3, idle=(1,))], None, None)
    assert [r.nproc for r in rows] == [1]  # no "2.20x (110 %)" from a rank that did nothing
    skipped = judge_scaling(rows, None, left_out=["2 ranks (rank 1 never stepped)"])
    assert skipped.status is Status.SKIP and "left out: 2 ranks (rank 1 never stepped)" in skipped.summary


def test_a_torchrun_the_oom_killer_ended_is_named_not_a_peer_failure() -> None:
    ranks = [RankRun(rank=r, ended="killed", steps=6, launcher_state="stopped") for r in (0, 1)]
    verdict = name_failure(_run(*ranks, launcher_signal=signal.SIGKILL))
    assert verdict is not None and verdict.code == "REHEARSAL_OOM"
    assert verdict.summary == ("2 ranks: torchrun was killed by signal 9 (SIGKILL), probably the OOM killer: see "
                               "`dmesg | grep -i oom`, after step 6; every rank ended with it")


def test_a_launch_that_started_no_rank_quotes_torchrun() -> None:
    missing = RankRun(rank=0, ended="missing", steps=0, launcher_state="stopped")
    tail = "/venv/bin/python: Error while finding module specification for 'torch.distributed.run' " \
           "(ModuleNotFoundError: No module named 'torch')"
    verdict = name_failure(_run(missing, launcher_tail=tail, duration_s=0.4))
    assert verdict is not None and verdict.code == "REHEARSAL_CRASHED"
    assert verdict.summary == f"1 rank: torchrun started no rank in 0.4 s: {tail}"


def test_scaling_is_judged_only_beyond_its_noise() -> None:
    noisy = judge_scaling(scaling_rows([_fig(1, 2.0, 0.2), _fig(2, 1.0, 0.25)], None, None), None)
    assert noisy.status is Status.SKIP and noisy.summary.startswith("not measurable on this machine: at 2 ranks")
    straddle = judge_scaling(scaling_rows([_fig(1, 2.0, 0.05), _fig(2, 1.56, 0.05)], None, None), None)
    assert straddle.status is Status.SKIP and "straddles the 80% line" in straddle.summary
    cpu = judge_scaling(scaling_rows([_fig(1, 2.0), _fig(2, 1.9)], None, None), None,
                        unmeasurable="2 CPU ranks (gloo) on 2 cores share them")
    assert cpu.status is Status.SKIP and cpu.summary.startswith("not measurable on this machine: 2 CPU ranks")


def test_more_than_linear_is_named_and_never_a_pass() -> None:
    super_rows = scaling_rows([_fig(1, 1.0), _fig(2, 1.98)], None, None)  # 3.96x on 2 ranks: a global batch
    verdict = judge_scaling(super_rows, None)
    assert verdict.status is Status.WARN and verdict.code == "REHEARSAL_SCALING_SUPERLINEAR"
    assert "198% of linear" in verdict.summary and "cache effects" in verdict.summary
    within = judge_scaling(scaling_rows([_fig(1, 1.0, 0.04), _fig(2, 1.02, 0.04)], None, None), None)
    assert within.status is Status.PASS and "above 100 % only within the noise" in within.summary


def test_cpu_ranks_that_share_the_cores_cannot_show_scaling(tmp_path: Path) -> None:
    from preflight.rehearse.plan import RehearsalPlan
    from preflight.rehearse.session import cpu_unmeasurable

    def plan(cores: int, on_gpu: bool = False) -> RehearsalPlan:
        return RehearsalPlan(script=tmp_path / "t.py", script_text="t.py", args=(), cwd=tmp_path, sizes=(1, 2),
                             cpu_cores=cores, on_gpu=on_gpu)

    assert "2 CPU ranks (gloo) on 2 cores" in (cpu_unmeasurable(plan(2)) or "")
    assert cpu_unmeasurable(plan(16)) is None and cpu_unmeasurable(plan(2, on_gpu=True)) is None


def test_the_link_is_predicted_only_for_what_the_script_does(tmp_path: Path) -> None:
    from preflight.rehearse.plan import RehearsalPlan
    from preflight.rehearse.session import RehearsalSession

    plan = RehearsalPlan(script=tmp_path / "t.py", script_text="t.py", args=(), cwd=tmp_path, sizes=(1, 2),
                         busbw_gbps=10.0, busbw_source="given")
    session = RehearsalSession(plan, tmp_path)
    session.runs = {2: _run(_done(0), _done(1))}  # no DDP module, no DTensor, no DeepSpeed
    comm, note = session._comm_model([_fig(1, 3.0), _fig(2, 2.9)])
    assert comm is None and note is not None and "no gradient exchange is predicted" in note
    session.runs = {2: _run(_done(0, ddp_modules=1), _done(1, ddp_modules=1))}
    comm, _ = session._comm_model([_fig(1, 3.0), _fig(2, 2.9)])
    assert comm is not None and comm.strategy == "ddp"


def test_what_the_rehearsal_had_to_do_is_reported() -> None:
    from preflight.judge.rehearse_failure import run_notes
    from preflight.launch.reaper import Stopped

    daemon = Stopped(pid=42, command="/venv/bin/python -u /x/preflight/rehearse/bootstrap.py train.py",
                     found_by="the run's tag", role="other", needed_kill=False)
    sleeper = Stopped(pid=43, command="sleep 601", found_by="the launch's cgroup", role="other", needed_kill=True)
    torchrun = Stopped(pid=41, command="python -m torch.distributed.run", found_by="torchrun's process tree",
                       role="torchrun", needed_kill=False)
    run = _run(_done(0), stopped=(daemon, sleeper, torchrun), files_removed=True, log_bytes=(2_000_000_000,),
               run_dir="/r/logs/rehearse-1ranks")
    notes = run_notes(run)
    assert notes[0] == ("stopped 2 processes the script left running (a fork of a rank, sleep 601; 1 ignored SIGTERM "
                        "and were killed): in a real job they would outlive it")
    assert "removed the rehearsal's files (rehearse-1ranks)" in notes[1]
    assert "rank 0 printed 2,000 MB" in notes[2]
    verdict = judge_size(run, size_figures(run))
    assert verdict.status is Status.PASS and "stopped 2 processes" in verdict.summary
    assert "pid 43 (sleep 601; found by the launch's cgroup; ignored SIGTERM)" in \
        verdict.evidence["processes stopped when the launch ended"]


def test_a_script_that_ends_by_itself_after_the_planned_steps_did_not_end_early() -> None:
    """Seen here: ddp_seed.py ends itself after 8000 steps; on a slow, noisy run the growing window had
    asked for more, and the same script flipped between READY and DEGRADED."""
    run = _run(_done(0, steps=8000, ended="returned", window_s=None, window_steps=0))
    assert ended_early(run) is None and judge_size(run, size_figures(run)).status is Status.PASS
