"""The rehearsal as a pytest session of preflight's plugin: one check per size, then a scaling check.

The session object is handed to ``pytest.main(plugins=[...])`` by ``preflight rehearse``. It
parametrizes the size check with the plan's rank counts, runs each size once (in ascending order;
after a failed size the larger ones are not run unless ``--keep-going``: "run on 2 first, ask for
the node only when that works"), measures the link once for the prediction, and keeps the
report's ``rehearsal`` section up to date after every check, so an interrupted run still reports
what it measured. The plugin's collector writes the JSON, HTML and JUnit reports as for any run.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from preflight.judge.rehearse import (
    SCALING_ASSUMPTION,
    CommModel,
    ScalingRow,
    judge_scaling,
    judge_size,
    scaling_rows,
)
from preflight.judge.rehearse_chart import scaling_chart
from preflight.launch.torchrun import LaunchStatus, launch_script
from preflight.outcome import Status, Verdict, skip
from preflight.rehearse import bootstrap
from preflight.rehearse.facts import SizeFigures, SizeRun, size_figures, size_run_from_launch
from preflight.rehearse.plan import RehearsalPlan
from preflight.rehearse.table import table_view, terminal_lines
from preflight.rehearse.watch import BeatWatch, capacity_for
from preflight.report.facts import add_section, gathered_sections
from preflight.report.ownership import LOGS, remove_if_owned
from preflight.report.redact import redact_obj
from preflight.report.terminal import LIVE_STATUS_KEY, SUMMARY_LINES_KEY
from preflight.workers.rank_log import private_dirs
from preflight.stash import COLLECTOR_KEY

SESSION_KEY = pytest.StashKey["RehearsalSession"]()
BOOTSTRAP = Path(bootstrap.__file__).resolve()
RANK_DEADLINE_MARGIN_S = 2.0  # each rank leaves on its own this long before the launcher kills it
DDP_BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb: the message size its all-reduces use
DEFAULT_GRAD_BYTES = 4.0  # fp32 gradients when only --model-params is known
SECTION = "rehearsal"


def rehearsal_env(plan: RehearsalPlan, launched: float) -> dict[str, str | None]:
    """What the bootstrap reads, plus ``PREFLIGHT_REHEARSAL=1`` for the script."""
    return {
        bootstrap.REHEARSAL_ENV: "1",
        bootstrap.WARMUP_ENV: str(plan.warmup),
        bootstrap.STEPS_ENV: str(plan.steps),
        bootstrap.STALL_ENV: str(plan.stall_s),
        bootstrap.DEADLINE_ENV: str(launched + max(1.0, plan.timeout_s - RANK_DEADLINE_MARGIN_S)),
        bootstrap.LAUNCHED_ENV: str(launched),
        bootstrap.PARENT_ENV: str(os.getpid()),
        bootstrap.CAPACITY_ENV: str(capacity_for(plan.warmup, plan.steps)),
        bootstrap.STEP_FUNCTION_ENV: plan.step_function,
    }


def size_label(nproc: int) -> str:
    """``rehearse 2 ranks``: the launch's name on the live line."""
    return f"rehearse {nproc} rank{'s' if nproc != 1 else ''}"


def launch_size(plan: RehearsalPlan, nproc: int, run_dir: Path,
                on_watch: Callable[[BeatWatch], None] | None = None) -> SizeRun:
    """One torchrun launch of the script on ``nproc`` ranks, as the job's own would be, in the job's
    interpreter. ``on_watch(watch)`` learns the launch's beat watch (the live line reads it)."""
    remove_if_owned(run_dir)  # inside preflight's own folder: never a user's
    private_dirs(run_dir)
    launched = time.monotonic()
    watch = BeatWatch(label=size_label(nproc), warmup=plan.warmup, steps=plan.steps, stall_s=plan.stall_s,
                      launched=launched, deadline_s=plan.timeout_s, capacity=capacity_for(plan.warmup, plan.steps),
                      measure_for_s=plan.measure_for_s)
    if on_watch is not None:
        on_watch(watch)
    result = launch_script(BOOTSTRAP, nproc=nproc, deadline_s=plan.timeout_s, args=[str(plan.script), *plan.args],
                           env=rehearsal_env(plan, launched), run_dir=run_dir, python=plan.python, watch=watch)
    return size_run_from_launch(result, warmup=plan.warmup, steps=plan.steps, stall_s=plan.stall_s,
                                on_gpu=plan.on_gpu, cpu_cores=plan.cpu_cores, watch=watch)


def cpu_unmeasurable(plan: RehearsalPlan) -> str | None:
    """Why CPU ranks cannot show scaling here: more ranks than cores to spare (preflight and torchrun
    need one), so the larger size measures the sharing of cores, not the job."""
    if plan.on_gpu or not plan.cpu_cores:
        return None
    top = max(plan.sizes)
    if top + 1 <= plan.cpu_cores:
        return None
    return (f"{top} CPU ranks (gloo) on {plan.cpu_cores} core{'s' if plan.cpu_cores != 1 else ''} share them with "
            "each other and with preflight, so the larger size measures the sharing, not the job: rehearse on the "
            f"GPU node, or on a machine with more than {top} cores")


def nearest_size(sizes: list[Any], wanted: float) -> Any:
    """The sweep size closest to ``wanted`` bytes on a log scale."""
    return min(sizes, key=lambda s: abs(math.log2(s.bytes) - math.log2(max(wanted, 1.0))))


def measure_busbw(nproc: int, on_gpu: bool, run_dir: Path, message_bytes: float,
                  python: str) -> tuple[float | None, str]:
    """preflight's all-reduce sweep (quick plan) on ``nproc`` ranks; the busbw at the size nearest
    to the job's messages (DDP's bucket, or the whole gradient when smaller)."""
    from preflight.launch.allreduce_sweep import sweep_phase, sweep_plan, sweep_run_from_launch
    from preflight.launch.plan import LaunchPlan
    from preflight.launch.torchrun import launch

    plan = sweep_plan(on_gpu, quick=True)
    remove_if_owned(run_dir)  # inside preflight's own folder: never a user's
    result = launch(LaunchPlan("busbw", (sweep_phase(plan),), nproc), run_dir=run_dir,
                    deadline_s=plan.wanted_s + 60.0, python=python).phase("allreduce")
    run = sweep_run_from_launch("rehearsal", result, {}, on_gpu)
    if not run.sizes:
        return None, f"the all-reduce sweep on {nproc} ranks gave no figure ({result.describe() or 'no sizes'})"
    size = nearest_size(list(run.sizes), min(message_bytes, DDP_BUCKET_BYTES))
    return size.busbw_gbps, (f"measured here by preflight's all-reduce sweep on {nproc} {run.backend} ranks at "
                             f"{size.bytes / 2**20:g} MiB messages")


class RehearsalSession:
    """Runs the sizes, remembers what they gave, and publishes the report section."""

    def __init__(self, plan: RehearsalPlan, report_dir: Path) -> None:
        self.plan = plan
        self.report_dir = report_dir
        self.config: pytest.Config | None = None
        self.runs: dict[int, SizeRun] = {}
        self.verdicts: dict[int, Verdict] = {}
        self.figures: dict[int, SizeFigures | None] = {}
        self.rows: list[ScalingRow] = []
        self.comm: CommModel | None = None
        self.comm_note: str | None = None
        self.watch: tuple[BeatWatch, int] | None = None
        self._watch_lock = threading.Lock()

    # -- pytest hooks ----------------------------------------------------------------------

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[SESSION_KEY] = self
        config.stash[LIVE_STATUS_KEY] = self.status
        config.stash[SUMMARY_LINES_KEY] = self.table_lines
        self.config = config
        self.publish()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "ranks" in metafunc.fixturenames:
            metafunc.parametrize("ranks", self.plan.sizes, ids=[f"ranks{k}" for k in self.plan.sizes])

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The table before the collector's problems and verdict (pytest's reporter: ``-v``)."""
        lines = self.table_lines()
        if lines:
            terminalreporter.line("")
            for line in lines:
                terminalreporter.line(line)

    def table_lines(self) -> list[str]:
        """The table, from the written (redacted) report: what preflight's reporter prints before its verdict."""
        if self.config is None:
            return []
        collector = self.config.stash.get(COLLECTOR_KEY, None)
        written = collector.report if collector is not None else None
        section = ((written.sections.get(SECTION) if written is not None else None)
                   or redact_obj(gathered_sections(self.config).get(SECTION)))
        return terminal_lines(section) if section else []

    def status(self) -> LaunchStatus | None:
        """The running size's launch for the live line: its step and how long since the slowest rank's last one."""
        with self._watch_lock:
            current = self.watch
        if current is None:
            return None
        watch, nproc = current
        return watch.status(nproc, time.monotonic())

    def _on_watch(self, nproc: int) -> Callable[[BeatWatch], None]:
        def remember(watch: BeatWatch) -> None:
            with self._watch_lock:
                self.watch = (watch, nproc)

        return remember

    # -- the work the checks ask for -------------------------------------------------------

    def log_dir(self, nproc: int) -> Path:
        """Where a size's rank logs go."""
        return self.report_dir / LOGS / f"rehearse-{nproc}ranks"

    def blocked_by(self, nproc: int) -> int | None:
        """The smaller size that failed first, when larger ones are not run."""
        if self.plan.keep_going:
            return None
        failed = [k for k, v in self.verdicts.items() if k < nproc and v.status in (Status.FAIL, Status.ERROR)]
        return min(failed) if failed else None

    def judge_size(self, nproc: int) -> Verdict:
        """Run one size (once) and judge it."""
        if nproc in self.verdicts:
            return self.verdicts[nproc]
        blocker = self.blocked_by(nproc)
        if blocker is not None:
            verdict = skip(f"not run: the script failed on {blocker} rank{'s' if blocker > 1 else ''} first; fix that "
                           "before asking for more GPUs (or rehearse with --keep-going)")
            self.verdicts[nproc], self.figures[nproc] = verdict, None
            self.publish()
            return verdict
        try:
            run = launch_size(self.plan, nproc, self.log_dir(nproc), on_watch=self._on_watch(nproc))
        finally:
            with self._watch_lock:
                self.watch = None
        fig = size_figures(run)
        verdict = judge_size(run, fig)
        self.runs[nproc], self.figures[nproc], self.verdicts[nproc] = run, fig, verdict
        self.publish()
        return verdict

    def judge_scaling(self) -> Verdict:
        """Every size first, then the scaling against the baseline with the link's predicted share."""
        for nproc in self.plan.sizes:
            self.judge_size(nproc)
        figures = [f for f in self.figures.values() if f is not None]
        self.comm, self.comm_note = self._comm_model(figures)
        self.rows = scaling_rows(figures, self.comm, self.plan.price_per_hour)
        left_out = [f"{f.nproc} ranks (rank{'s' if len(f.idle_ranks) > 1 else ''} "
                    f"{', '.join(map(str, f.idle_ranks))} never stepped)" for f in figures if f.idle_ranks]
        idle = {f.nproc for f in figures if f.idle_ranks}
        not_measured = [k for k in self.plan.sizes if k not in {r.nproc for r in self.rows} and k not in idle]
        verdict = judge_scaling(self.rows, self.comm, not_measured, unmeasurable=cpu_unmeasurable(self.plan),
                                left_out=left_out)
        extra: dict[str, str] = {"assumption": SCALING_ASSUMPTION}
        if self.comm is not None:
            extra["communication model"] = self.comm.describe()
        elif self.comm_note:
            extra["communication"] = self.comm_note
        views = [table_view(self.section())]
        if len(self.rows) >= 2:
            views.append(scaling_chart(self.rows))
        self.publish()
        return verdict.with_extra(evidence=extra, views=views)

    # -- the link ---------------------------------------------------------------------------

    def _params(self) -> tuple[int, float, str] | None:
        """Parameter count, bytes per gradient element and where they came from."""
        if self.plan.model_params:
            return self.plan.model_params, self.plan.grad_bytes or DEFAULT_GRAD_BYTES, "given with --model-params"
        stepped = [run for run in sorted(self.runs.values(), key=lambda r: r.nproc)
                   if run.ranks and run.ranks[0].param_elements]
        if not stepped:
            return None
        run = stepped[0]
        rank0 = run.ranks[0]
        elements = int(rank0.param_elements or 0)
        per = (rank0.param_bytes or 4 * elements) / elements
        source = f"read from the optimizer on rank 0 of the {run.nproc}-rank run"
        if rank0.deepspeed and run.nproc > 1 and not rank0.sharded_params:
            elements *= run.nproc
            source += f" (a ZeRO partition, x{run.nproc})"
        return elements, self.plan.grad_bytes or per, source

    def _strategy(self) -> str | None:
        """What the script was seen to do: FSDP (DTensor parameters), DeepSpeed, DDP (a DDP module was
        built); None when it wraps its model in none of them (no gradient exchange to predict)."""
        if self.plan.strategy:
            return self.plan.strategy
        ranks = [r for run in self.runs.values() for r in run.ranks]
        if any(r.sharded_params or "FlatParameter" in r.param_types for r in ranks):  # FSDP2, or FSDP1's flat ones
            return "fsdp"
        if any(r.deepspeed for r in ranks):
            return "zero2"
        if any(r.ddp_modules for r in ranks):
            return "ddp"
        return None

    def _comm_model(self, figures: list[SizeFigures]) -> tuple[CommModel | None, str | None]:
        multi = [f.nproc for f in figures if f.nproc > 1 and f.steps_per_s]
        if not multi:
            return None, "no multi-rank size with a steady step: nothing to predict"
        strategy = self._strategy()
        if strategy is None:
            return None, ("the script wraps its model in no DDP, FSDP or DeepSpeed engine, so no gradient exchange "
                          "is predicted (give --strategy when it exchanges gradients another way)")
        params = self._params()
        if params is None:
            return None, "the parameter count is unknown (no optimizer step on rank 0): give --model-params"
        count, per, source = params
        if self.plan.busbw_gbps:
            busbw, busbw_source = self.plan.busbw_gbps, self.plan.busbw_source or "given"
        elif not self.plan.sweep:
            return None, "--no-sweep and no --from-report: no measured busbw to predict with"
        else:
            nproc = max(multi)
            measured, busbw_source = measure_busbw(nproc, self.plan.on_gpu, self.report_dir / LOGS /
                                                   "rehearse-allreduce", count * per, self.plan.python)
            if measured is None or measured <= 0:
                return None, busbw_source
            busbw = measured
        return CommModel(params=count, bytes_per_param=per, strategy=strategy, busbw_gbps=busbw,
                         busbw_source=busbw_source, params_source=source), None

    # -- the report section -----------------------------------------------------------------

    def section(self) -> dict[str, Any]:
        """Everything the table and a consumer of the JSON need, as plain data."""
        section: dict[str, Any] = _rounded(self._section())
        return section

    def _section(self) -> dict[str, Any]:
        rows = {row.nproc: row for row in self.rows}
        sizes = []
        for nproc in self.plan.sizes:
            verdict = self.verdicts.get(nproc)
            fig = self.figures.get(nproc)
            row = rows.get(nproc)
            entry: dict[str, Any] = {
                "ranks": nproc,
                "status": verdict.status.value if verdict else "NOT RUN",
                "code": verdict.code if verdict else None,
                "summary": verdict.summary if verdict else "not run",
                "log_dir": str(self.log_dir(nproc)) if nproc in self.runs else None,
            }
            if fig is not None:
                entry.update({
                    "first_step_s": fig.first_step_s, "process_group_up_s": fig.pg_up_s,
                    "step_median_s": fig.step_median_s,
                    "step_p90_s": fig.step_p90_s, "steps_per_s": fig.steps_per_s, "throughput": fig.throughput,
                    "steps_per_s_spread": fig.spread.relative if fig.spread is not None else None,
                    "idle_ranks": list(fig.idle_ranks),
                    "measured_steps": fig.measured_steps, "complete": fig.complete,
                    "steps_reached": list(fig.steps_reached), "peak_memory_bytes": list(fig.peak_memory_bytes),
                    "memory_kind": fig.memory_kind})
            run = self.runs.get(nproc)
            if run is not None:
                entry["stopped"] = [s.describe() for s in run.left_behind()]
            if row is not None and len(self.rows) >= 2:  # one size scales against nothing
                entry.update({"scaling": row.scaling, "efficiency": row.efficiency, "scaling_spread": row.spread,
                              "comm_per_step_s": row.comm_s,
                              "cost_per_1k_steps_usd": row.cost_per_1k_steps,
                              "comm_cost_per_1k_steps_usd": row.comm_cost_per_1k_steps})
            sizes.append(entry)
        comm = None
        if self.comm is not None:
            model = self.comm
            comm = {"strategy": model.strategy, "params": model.params, "params_source": model.params_source,
                    "bytes_per_param": model.bytes_per_param, "busbw_gbps": model.busbw_gbps,
                    "busbw_source": model.busbw_source, "description": model.describe()}
        return {**self.plan.as_dict(), "assumption": SCALING_ASSUMPTION,
                "baseline_ranks": self.rows[0].nproc if self.rows else None, "sizes": sizes,
                "communication": comm, "communication_note": self.comm_note,
                "price_per_hour_usd": self.plan.price_per_hour}

    def publish(self) -> None:
        """Put the current section into the report (the collector writes it with the rest)."""
        if self.config is not None:
            add_section(self.config, SECTION, self.section())


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits, so the JSON reads as figures, not float noise."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value
