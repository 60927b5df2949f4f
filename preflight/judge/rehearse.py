"""Judge a rehearsal: did each size run its steps (and how fast), and what do the extra ranks buy.

Scaling at K ranks is ``(steps/s at K x K) / (steps/s at B x B)`` with B the baseline: 1 rank when
it ran, else the smallest size measured. It is the throughput ratio when every rank's batch is the
same at every size (a fixed per-rank batch with DistributedSampler), which is how torchrun jobs
are written; a script that keeps the *global* batch fixed would need steps/s alone.

``EFFICIENCY_WARN_BELOW = 0.80``: data-parallel training with overlapped gradient all-reduce
reaches 90-95 % of linear on NVLink nodes and typically 75-90 % over PCIe; under 80 % a fifth of
every extra GPU hour buys nothing, which is worth knowing before a long run (DEGRADED, with how
much and where the time goes).

Each figure carries its noise: the 95 % interval of every size's step rate (from equal blocks of
its measured window) gives the scaling's interval. Scaling is judged only where the interval says
so: short of 80 % when all of it lies below, fine when all of it lies at or above, and "not
measurable" when the noise is larger than ``NOISE_LIMIT`` or straddles the line. More than linear
(all of the interval above 100 %) is never a pass: the same per-rank work on more ranks cannot
get faster per rank, so the per-rank work differs between sizes, caches hold more of it, or the
baseline was slowed.

Communication per step is predicted, not measured: the bytes every rank moves divided by the
measured all-reduce bus bandwidth (nccl-tests' busbw, so the ring's 2(n-1)/n is in it). DDP and
ZeRO-1/2 move the gradients once as an all-reduce (ZeRO-1/2: reduce-scatter plus all-gather, the
same bytes); FSDP and ZeRO-3 all-gather the parameters in forward and again in backward and
reduce-scatter the gradients, 1.5x the all-reduce's bytes. All-gather and reduce-scatter busbw is
taken equal to all-reduce busbw (nccl-tests shows them close on rings). The figure is an upper
bound on what the link adds to a step: DDP and FSDP overlap most of it with backward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from preflight.judge.rehearse_failure import ended_early, name_failure
from preflight.judge.rehearse_failure import run_notes
from preflight.outcome import Metric, Verdict, passed, skip, warn
from preflight.rehearse.facts import SizeFigures, SizeRun

EFFICIENCY_WARN_BELOW = 0.80
NOISE_LIMIT = 0.25  # relative 95 % half-width of a scaling figure beyond which it says nothing
SUPERLINEAR_ABOVE = 1.0
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
    rate_spread: float | None = None  # this size's step rate: relative 95 % half-width (None: unknown)
    spread: float | None = None  # the scaling's, this size's and the baseline's together

    @property
    def efficiency(self) -> float:
        """Scaling as a share of linear (1.0 = every extra rank fully used)."""
        return self.scaling / self.linear if self.linear else 1.0

    @property
    def efficiency_range(self) -> tuple[float, float] | None:
        """The efficiency's 95 % interval, when the noise is known."""
        if self.spread is None:
            return None
        return self.efficiency * (1 - self.spread), self.efficiency * (1 + self.spread)

    def text(self) -> str:
        """``2 ranks 1.94x (97% of linear, +/-3%)``."""
        noise = f", +/-{self.spread:.0%}" if self.spread is not None else ""
        return f"{self.nproc} ranks {self.scaling:.2f}x ({self.efficiency:.0%} of linear{noise})"


def scaling_rows(figures: Sequence[SizeFigures], comm: CommModel | None,
                 price_per_hour: float | None) -> list[ScalingRow]:
    """Every size with a steady figure on every rank, against the baseline (1 rank, else the smallest
    size). A size in which a rank never stepped is not a size of that many ranks: it is left out."""
    usable = sorted((f for f in figures if f.steps_per_s and not f.idle_ranks), key=lambda f: f.nproc)
    if not usable:
        return []
    base = usable[0]
    base_throughput = (base.steps_per_s or 0.0) * base.nproc
    base_spread = base.spread.relative if base.spread is not None else None
    rows = []
    for fig in usable:
        rate = fig.steps_per_s or 0.0
        step_s = 1.0 / rate
        comm_s = comm.seconds(fig.nproc) if comm is not None else None
        own = fig.spread.relative if fig.spread is not None else None
        spread = (math.hypot(own, base_spread) if own is not None and base_spread is not None and fig is not base
                  else own if fig is base else None)
        rows.append(ScalingRow(
            nproc=fig.nproc, steps_per_s=rate, throughput=rate * fig.nproc,
            scaling=rate * fig.nproc / base_throughput, linear=fig.nproc / base.nproc, step_s=step_s, comm_s=comm_s,
            cost_per_1k_steps=price_per_hour * step_s * 1000 / 3600 if price_per_hour else None,
            comm_cost_per_1k_steps=(price_per_hour * comm_s * 1000 / 3600
                                    if price_per_hour and comm_s is not None else None),
            rate_spread=own, spread=spread))
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
    noise = f" +/-{fig.spread.relative:.0%}" if fig.spread is not None else ""
    rate = f"{fig.steps_per_s:.3g} steps/s{noise}" if fig.steps_per_s else "no steady rate"
    median = (f", median step {human_seconds(fig.step_median_s)} (p90 {human_seconds(fig.step_p90_s)})"
              if fig.step_median_s is not None else "")
    return f"first step {human_seconds(fig.first_step_s)} after launch{median}, {rate}{memory}"


def judge_size(run: SizeRun, fig: SizeFigures | None) -> Verdict:
    """PASS when every rank ran its steps; the named failure otherwise (with what was measured)."""
    metrics = size_metrics(fig) if fig is not None else ()
    notes = run_notes(run)
    evidence = {"what the rehearsal had to do": "\n".join(notes)} if notes else {}
    if run.stopped:
        evidence["processes stopped when the launch ended"] = "\n".join(s.describe() for s in run.stopped)
    stopped = [s.describe() for s in run.stopped]
    details = {"stopped": stopped} if stopped else {}
    failure = name_failure(run) or ended_early(run)
    if failure is not None:
        return replace(failure.with_extra(metrics=metrics, evidence=evidence), details={**failure.details, **details})
    assert fig is not None  # every rank stepped: name_failure covers zero steps
    also = f" ({'; '.join(notes)})" if notes else ""
    return passed(f"{run.nproc} rank{'s' if run.nproc > 1 else ''}: {fig.measured_steps} steps measured after "
                  f"{run.warmup} warm-up; {_figures_text(fig)}{also}", metrics=metrics, evidence=evidence,
                  details=details)


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


SUPERLINEAR_FIX = ("Check that each rank's batch is the same at every size (a fixed per-rank batch, with "
                   "DistributedSampler sharding the data), then rehearse again; on a shared or throttled machine, "
                   "rehearse on the quiet node itself.")


def judge_scaling(rows: Sequence[ScalingRow], comm: CommModel | None, not_measured: Sequence[int] = (), *,
                  unmeasurable: str | None = None, left_out: Sequence[str] = ()) -> Verdict:
    """Scaling judged beyond its noise: WARN when all of a size's interval lies under 80 % of linear
    or above linear, PASS when all of it lies at or above 80 %, SKIP ("not measurable on this
    machine") when the noise hides the answer or ``unmeasurable`` says why it cannot be measured here."""
    excluded = f"; left out: {'; '.join(left_out)}" if left_out else ""
    if len(rows) < 2:
        missing = (f" ({', '.join(map(str, not_measured))} rank{'s' if not_measured[-1] != 1 else ''} gave no steady "
                   "figure)" if not_measured else "")
        return skip(f"scaling needs two sizes with a steady step time; {len(rows)} measured{missing}{excluded}")
    base = rows[0]
    metrics = []
    for row in rows[1:]:
        labels = {"ranks": str(row.nproc), "baseline_ranks": str(base.nproc)}
        metrics += [Metric("scaling", round(row.scaling, 4), "x", labels),
                    Metric("scaling_efficiency", round(row.efficiency, 4), "", labels)]
        if row.spread is not None:
            metrics.append(Metric("scaling_spread", round(row.spread, 4), "", labels))
        if row.comm_s is not None:
            metrics.append(Metric("comm_per_step_predicted", round(row.comm_s, 6), "s", labels))
        if row.cost_per_1k_steps is not None:
            metrics.append(Metric("cost_per_1k_steps", round(row.cost_per_1k_steps, 4), "USD", labels))
    summary = (f"throughput against {base.nproc} rank{'s' if base.nproc > 1 else ''}: "
               + ", ".join(r.text() for r in rows[1:]) + excluded)
    details = {"assumption": SCALING_ASSUMPTION, "baseline_ranks": base.nproc}
    if unmeasurable:
        return skip(f"not measurable on this machine: {unmeasurable} (measured: {summary})",
                    metrics=tuple(metrics), details=details)
    noisy = [r for r in rows[1:] if r.spread is None or r.spread > NOISE_LIMIT]
    if noisy:
        worst = noisy[0]
        why = ("too few measured steps to know its spread" if worst.spread is None else
               f"the step rates vary by +/-{worst.spread:.0%} between blocks of the same run, more than "
               f"+/-{NOISE_LIMIT:.0%}")
        return skip(f"not measurable on this machine: at {worst.nproc} ranks {why} ({summary})",
                    metrics=tuple(metrics), details=details)
    ranges = {r.nproc: r.efficiency_range or (r.efficiency, r.efficiency) for r in rows[1:]}
    above = [r for r in rows[1:] if ranges[r.nproc][0] > SUPERLINEAR_ABOVE]
    if above:
        worst = max(above, key=lambda r: r.efficiency)
        text = (f"{worst.nproc} ranks give {worst.scaling:.2f}x the throughput of {base.nproc}, {worst.efficiency:.0%} "
                f"of linear (+/-{worst.spread or 0:.0%}): more than linear, which the same per-rank work on more ranks "
                "cannot give. The per-rank work probably differs between the sizes (a global batch split across the "
                "ranks, a dataset sharded into shorter epochs), caches hold more of it (cache effects), or the "
                f"baseline was slowed by noise; the figure does not predict the job. All sizes: {summary}")
        return warn("REHEARSAL_SCALING_SUPERLINEAR", text, SUPERLINEAR_FIX, metrics=tuple(metrics), details=details)
    short = [r for r in rows[1:] if ranges[r.nproc][1] < EFFICIENCY_WARN_BELOW]
    if short:
        worst = min(short, key=lambda r: r.efficiency)
        why, fix = _lost_text(worst, base, comm)
        slower = (f" ({worst.nproc} ranks together do less than {base.nproc} alone)" if worst.scaling < 1.0 else "")
        others = f" All sizes: {summary}" if len(rows) > 2 else ""
        text = (f"{worst.nproc} ranks give {worst.scaling:.2f}x the throughput of {base.nproc}, "
                f"{worst.efficiency:.0%} of linear (+/-{worst.spread or 0:.0%}){slower}: {why}.{others}")
        return warn("REHEARSAL_SCALING_LOW", text, fix, metrics=tuple(metrics), details=details)
    straddle = [r for r in rows[1:] if ranges[r.nproc][0] < EFFICIENCY_WARN_BELOW]
    if straddle:
        worst = straddle[0]
        return skip(f"not measurable on this machine: at {worst.nproc} ranks {worst.efficiency:.0%} of linear "
                    f"+/-{worst.spread or 0:.0%} straddles the {EFFICIENCY_WARN_BELOW:.0%} line ({summary})",
                    metrics=tuple(metrics), details=details)
    linear = [r for r in rows[1:] if r.efficiency > 1.0]
    note = (f" ({', '.join(f'{r.nproc} ranks' for r in linear)} above 100 % only within the noise: linear)"
            if linear else "")
    return passed(summary + note, metrics=tuple(metrics), details=details)
