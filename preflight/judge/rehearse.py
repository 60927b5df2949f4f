"""Judge a rehearsal: did each size run its steps (and how fast), and what do the extra ranks buy.

Scaling at K ranks is ``(steps/s at K x K) / (steps/s at B x B)`` with B the baseline: 1 rank when
it ran, else the smallest size measured. It is the throughput ratio when every rank's batch is the
same at every size (a fixed per-rank batch with DistributedSampler), which is how torchrun jobs
are written; a script that keeps the *global* batch fixed would need steps/s alone.

``EFFICIENCY_WARN_BELOW = 0.80``: data-parallel training with overlapped gradient all-reduce
reaches 90-95 % of linear on NVLink nodes and typically 75-90 % over PCIe; under 80 % a fifth of
every extra GPU hour buys nothing, which is worth knowing before a long run (DEGRADED, with how
much and where the time goes).

Communication per step is predicted, not measured: the bytes every rank moves divided by the
measured all-reduce bus bandwidth (nccl-tests' busbw, so the ring's 2(n-1)/n is in it). DDP and
ZeRO-1/2 move the gradients once as an all-reduce (ZeRO-1/2: reduce-scatter plus all-gather, the
same bytes); FSDP and ZeRO-3 all-gather the parameters in forward and again in backward and
reduce-scatter the gradients, 1.5x the all-reduce's bytes. All-gather and reduce-scatter busbw is
taken equal to all-reduce busbw (nccl-tests shows them close on rings). The figure is an upper
bound on what the link adds to a step: DDP and FSDP overlap most of it with backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.judge.rehearse_failure import ended_early, name_failure
from preflight.outcome import Metric, Verdict, passed, skip, warn
from preflight.rehearse.facts import SizeFigures, SizeRun

EFFICIENCY_WARN_BELOW = 0.80
LINK_EXPLAINS = 0.5  # the predicted communication covers at least half of the time lost per step
SHARDED = ("fsdp", "zero3")
SCALING_ASSUMPTION = ("per-rank batch assumed constant across sizes (a fixed per-rank batch with DistributedSampler): "
                      "throughput = steps/s x ranks")


def human_bytes(value: float | None) -> str:
    """Decimal units, as GPU memory is sold: ``61.0 GB``, ``512 MB``, ``8.7 kB``."""
    if value is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}" if value / scale < 100 else f"{value / scale:.0f} {unit}"
    return f"{value:.0f} B"


def human_seconds(value: float | None) -> str:
    """``41.2 s``, ``0.310 s``, ``12.5 ms``, ``-`` for no figure."""
    if value is None:
        return "-"
    if value >= 10:
        return f"{value:.1f} s"
    if value >= 0.1:
        return f"{value:.3f} s"
    if value >= 0.001:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1e6:.0f} us"


@dataclass(frozen=True, slots=True)
class CommModel:
    """What the link costs per step: bytes per step from the parameter count, time from busbw."""

    params: int
    bytes_per_param: float
    strategy: str
    busbw_gbps: float
    busbw_source: str
    params_source: str

    @property
    def grad_bytes(self) -> float:
        """Bytes of one full set of gradients on the wire."""
        return self.params * self.bytes_per_param

    def volume_factor(self, nproc: int) -> float:
        """Bytes each rank moves per step, as a multiple of the gradient bytes (busbw convention)."""
        if nproc < 2:
            return 0.0
        share = (nproc - 1) / nproc
        return 3 * share if self.strategy in SHARDED else 2 * share

    def seconds(self, nproc: int) -> float:
        """Predicted seconds of communication per step at ``nproc`` ranks (0 for one rank)."""
        return self.grad_bytes * self.volume_factor(nproc) / (self.busbw_gbps * 1e9)

    def describe(self) -> str:
        """``DDP gradient all-reduce of 1.6M parameters (6.3 MB at 4 B) at 1.2 GB/s busbw (...)``."""
        what = ("all-gather x2 + reduce-scatter" if self.strategy in SHARDED else "gradient all-reduce")
        return (f"{self.strategy.upper()} {what} of {self.params:,} parameters ({human_bytes(self.grad_bytes)} at "
                f"{self.bytes_per_param:g} B; parameters {self.params_source}) at {self.busbw_gbps:.3g} GB/s busbw "
                f"({self.busbw_source}), if not overlapped with compute")


@dataclass(frozen=True, slots=True)
class ScalingRow:
    """One size against the baseline."""

    nproc: int
    steps_per_s: float
    throughput: float
    scaling: float
    linear: float
    step_s: float
    comm_s: float | None
    cost_per_1k_steps: float | None
    comm_cost_per_1k_steps: float | None

    @property
    def efficiency(self) -> float:
        """Scaling as a share of linear (1.0 = every extra rank fully used)."""
        return self.scaling / self.linear if self.linear else 1.0


def scaling_rows(figures: Sequence[SizeFigures], comm: CommModel | None,
                 price_per_hour: float | None) -> list[ScalingRow]:
    """Every size with a steady figure, against the baseline (1 rank, else the smallest size)."""
    usable = sorted((f for f in figures if f.steps_per_s), key=lambda f: f.nproc)
    if not usable:
        return []
    base = usable[0]
    base_throughput = (base.steps_per_s or 0.0) * base.nproc
    rows = []
    for fig in usable:
        rate = fig.steps_per_s or 0.0
        step_s = 1.0 / rate
        comm_s = comm.seconds(fig.nproc) if comm is not None else None
        rows.append(ScalingRow(
            nproc=fig.nproc, steps_per_s=rate, throughput=rate * fig.nproc,
            scaling=rate * fig.nproc / base_throughput, linear=fig.nproc / base.nproc, step_s=step_s, comm_s=comm_s,
            cost_per_1k_steps=price_per_hour * step_s * 1000 / 3600 if price_per_hour else None,
            comm_cost_per_1k_steps=(price_per_hour * comm_s * 1000 / 3600
                                    if price_per_hour and comm_s is not None else None)))
    return rows


def size_metrics(fig: SizeFigures) -> tuple[Metric, ...]:
    """The figures of one size as report metrics, labelled with the rank count (and rank)."""
    labels = {"ranks": str(fig.nproc)}
    out = [Metric(name, round(value, 6), unit, labels) for name, value, unit in (
        ("first_step", fig.first_step_s, "s"), ("step_median", fig.step_median_s, "s"),
        ("step_p90", fig.step_p90_s, "s"), ("steps_per_s", fig.steps_per_s, "1/s"),
        ("throughput", fig.throughput, "batches/s")) if value is not None]
    out.append(Metric("measured_steps", fig.measured_steps, "", labels))
    for rank, peak in enumerate(fig.peak_memory_bytes):
        if peak is not None:
            out.append(Metric("peak_memory", int(peak), "B", {**labels, "rank": str(rank), "kind": fig.memory_kind}))
    return tuple(out)


def _figures_text(fig: SizeFigures) -> str:
    peak = max((p for p in fig.peak_memory_bytes if p is not None), default=None)
    kind = "GPU memory" if fig.memory_kind == "GPU" else "RSS"
    memory = f"; peak {kind} {human_bytes(peak)} per rank" if peak else ""
    rate = f"{fig.steps_per_s:.3g} steps/s" if fig.steps_per_s else "no steady rate"
    median = (f", median step {human_seconds(fig.step_median_s)} (p90 {human_seconds(fig.step_p90_s)})"
              if fig.step_median_s is not None else "")
    return f"first step {human_seconds(fig.first_step_s)} after launch{median}, {rate}{memory}"


def judge_size(run: SizeRun, fig: SizeFigures | None) -> Verdict:
    """PASS when every rank ran its steps; the named failure otherwise (with what was measured)."""
    metrics = size_metrics(fig) if fig is not None else ()
    failure = name_failure(run) or ended_early(run)
    if failure is not None:
        return failure.with_extra(metrics=metrics)
    assert fig is not None  # every rank stepped: name_failure covers zero steps
    return passed(f"{run.nproc} rank{'s' if run.nproc > 1 else ''}: {fig.measured_steps} steps measured after "
                  f"{run.warmup} warm-up; {_figures_text(fig)}", metrics=metrics)


def _lost_text(row: ScalingRow, base: ScalingRow, comm: CommModel | None) -> tuple[str, str]:
    """Where the time beyond the baseline's step goes, and the fix that follows."""
    lost = row.step_s - base.step_s
    if comm is None or row.comm_s is None:
        return (f"each step takes {human_seconds(row.step_s)} against {human_seconds(base.step_s)} on "
                f"{base.nproc} rank{'s' if base.nproc > 1 else ''}",
                "Measure the link (give --model-params and let the rehearsal run its all-reduce sweep, or "
                "--from-report with a preflight report) to see whether communication explains it.")
    share = row.comm_s / lost if lost > 0 else 1.0
    text = (f"each step takes {human_seconds(row.step_s)} against {human_seconds(base.step_s)}; the predicted "
            f"communication is {human_seconds(row.comm_s)} per step ({comm.describe()})")
    if share >= LINK_EXPLAINS:
        return (text + ", which explains most of the loss",
                "The link is the limit: fewer bytes per sample help (a larger per-rank batch or gradient "
                "accumulation, bf16 gradients, e.g. DDP's bf16_compress_hook), and a faster path between GPUs "
                "(NVLink, P2P enabled: see `preflight -k 'p2p or nccl'` and `preflight topology`).")
    share_text = "under 1%" if share < 0.01 else f"only {share:.0%}"
    return (text + f", {share_text} of the {human_seconds(lost)} lost",
            "The link explains little of it: look at per-rank work outside the model (data loading: DataLoader "
            "num_workers and pin_memory; CPU threads per rank: OMP_NUM_THREADS; a host sync every step, e.g. "
            "loss.item()), and at a rank slower than the others.")


def judge_scaling(rows: Sequence[ScalingRow], comm: CommModel | None, not_measured: Sequence[int] = ()) -> Verdict:
    """PASS when every size scales to at least 80 % of linear; WARN with how much short otherwise."""
    if len(rows) < 2:
        missing = f" ({', '.join(map(str, not_measured))} ranks gave no steady figure)" if not_measured else ""
        return skip(f"scaling needs two sizes with a steady step time; {len(rows)} measured{missing}")
    base = rows[0]
    metrics = []
    for row in rows[1:]:
        labels = {"ranks": str(row.nproc), "baseline_ranks": str(base.nproc)}
        metrics += [Metric("scaling", round(row.scaling, 4), "x", labels),
                    Metric("scaling_efficiency", round(row.efficiency, 4), "", labels)]
        if row.comm_s is not None:
            metrics.append(Metric("comm_per_step_predicted", round(row.comm_s, 6), "s", labels))
        if row.cost_per_1k_steps is not None:
            metrics.append(Metric("cost_per_1k_steps", round(row.cost_per_1k_steps, 4), "USD", labels))
    parts = [f"{r.nproc} ranks {r.scaling:.2f}x ({r.efficiency:.0%} of linear)" for r in rows[1:]]
    summary = f"throughput against {base.nproc} rank{'s' if base.nproc > 1 else ''}: " + ", ".join(parts)
    details = {"assumption": SCALING_ASSUMPTION, "baseline_ranks": base.nproc}
    short = [r for r in rows[1:] if r.efficiency < EFFICIENCY_WARN_BELOW]
    if not short:
        return passed(summary, metrics=tuple(metrics), details=details)
    worst = min(short, key=lambda r: r.efficiency)
    why, fix = _lost_text(worst, base, comm)
    slower = (f" ({worst.nproc} ranks together do less than {base.nproc} alone)" if worst.scaling < 1.0 else "")
    others = f" All sizes: {summary}" if len(rows) > 2 else ""
    text = (f"{worst.nproc} ranks give {worst.scaling:.2f}x the throughput of {base.nproc}, {worst.efficiency:.0%} "
            f"of linear{slower}: {why}.{others}")
    return warn("REHEARSAL_SCALING_LOW", text, fix, metrics=tuple(metrics), details=details)
