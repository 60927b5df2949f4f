"""The three all-reduce checks' verdicts from the sweeps their fixtures fetched: which run a
figure stands on, and what the report shows beside it.

The fixtures (``preflight/fixtures/nccl.py``) decide which launches a check needs and skip a
check that does not apply; what to make of the runs is decided here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from preflight.judge.busbw_chart import busbw_chart
from preflight.judge.busbw_reference import Expectation
from preflight.judge.nccl import judge_busbw, judge_p2p_worth_keeping
from preflight.judge.nccl_env import judge_nccl_env
from preflight.judge.sweep_evidence import sizes_table, transport_evidence
from preflight.outcome import Verdict
from preflight.probe.sweep import SweepRun

P2P_OFF = "NCCL_P2P_DISABLE=1"


@dataclass(frozen=True, slots=True)
class BandwidthRuns:
    """The as-is sweep and, when it did not complete on GPUs (full profile), the one with P2P off."""

    as_is: SweepRun
    p2p_off: SweepRun | None = None


@dataclass(frozen=True, slots=True)
class P2pRuns:
    """A sweep with GPU peer-to-peer allowed and one with it disabled; ``workaround_set``: the job's
    own environment disables it (``p2p_off`` is the as-is run)."""

    p2p_on: SweepRun
    p2p_off: SweepRun
    workaround_set: bool


@dataclass(frozen=True, slots=True)
class NcclEnvRuns:
    """The inherited environment and, when its costly NCCL_* variables were measured, the as-is sweep
    and the one without them."""

    env: Mapping[str, str]
    as_is: SweepRun | None = None
    without: SweepRun | None = None


def wants_p2p_off_fallback(as_is: SweepRun, on_gpu: bool, quick: bool) -> bool:
    """Is a launch with ``NCCL_P2P_DISABLE=1`` worth its time for the bandwidth figure? On GPUs, in the
    full profile, when the as-is run did not complete (broken P2P hangs or fails the whole sweep)."""
    return on_gpu and not as_is.ok and not quick


def judge_allreduce_bandwidth(runs: BandwidthRuns, expected: Expectation | None) -> Verdict:
    """The busbw verdict on the as-is run, or on the P2P-off run when only that one completed (saying so)."""
    run, verdict = runs.as_is, judge_busbw(runs.as_is, expected)
    if runs.p2p_off is not None and runs.p2p_off.ok:
        verdict = judge_busbw(runs.p2p_off, expected)
        verdict = dataclasses.replace(verdict, summary=f"{verdict.summary} (measured with NCCL_P2P_DISABLE=1: "
                                                      f"the as-is run {runs.as_is.status.value}, see the P2P check)")
        run = runs.p2p_off
    return verdict.with_extra(views=[busbw_chart([run], expected), sizes_table([run])],
                              evidence=transport_evidence(run))


def judge_p2p_comparison(runs: P2pRuns, expected: Expectation | None) -> Verdict:
    """Does P2P work and is it worth keeping, with both runs' charts, sizes and NCCL transports."""
    pair = [runs.p2p_on, runs.p2p_off]
    verdict = judge_p2p_worth_keeping(runs.p2p_on, runs.p2p_off, expected, workaround_set=runs.workaround_set)
    return verdict.with_extra(views=[busbw_chart(pair, expected), sizes_table(pair)],
                              evidence={**transport_evidence(runs.p2p_on), **transport_evidence(runs.p2p_off)})


def judge_nccl_env_runs(runs: NcclEnvRuns) -> Verdict:
    """The environment's verdict, measured against the run without its costly variables when there is one."""
    if runs.as_is is None or runs.without is None:
        return judge_nccl_env(runs.env)
    return judge_nccl_env(runs.env, runs.as_is, runs.without).with_extra(
        views=[busbw_chart([runs.as_is, runs.without], None)])
