"""All-reduce bandwidth under torchrun, with GPU peer-to-peer as it is and with NCCL_P2P_DISABLE=1."""

from __future__ import annotations

import dataclasses
import os

import pytest

from preflight.fixtures.nccl import AS_IS, AllreduceSweeps, sizes_table, transport_evidence, without_label
from preflight.judge.busbw_chart import busbw_chart
from preflight.judge.busbw_reference import Expectation
from preflight.judge.nccl import judge_busbw, judge_p2p
from preflight.judge.nccl_env import costly_nccl_variables, judge_nccl_env
from preflight.outcome import skip
from preflight.recording import Recorder

P2P_OFF = "NCCL_P2P_DISABLE=1"
QUICK_SKIP = "needs a launch of its own (NCCL reads the variable when a communicator is created), which the quick " \
             "profile does not spend; run --profile full"


@pytest.mark.distributed
@pytest.mark.rehearsal("allreduce")
def test_allreduce_bandwidth(record: Recorder, allreduce_sweeps: AllreduceSweeps,
                             busbw_expectation: Expectation | None, nproc: int) -> None:
    """Does all-reduce bus bandwidth reach what this node should?"""
    if allreduce_sweeps.on_gpu and nproc < 2:
        record(skip("one GPU: there is no all-reduce between GPUs to measure"))
        return
    run = allreduce_sweeps.run(AS_IS)
    verdict = judge_busbw(run, busbw_expectation)
    if allreduce_sweeps.on_gpu and not run.ok and not allreduce_sweeps.quick:
        fallback = allreduce_sweeps.run(P2P_OFF, {"NCCL_P2P_DISABLE": "1"})
        if fallback.ok:
            verdict = judge_busbw(fallback, busbw_expectation)
            verdict = dataclasses.replace(verdict, summary=f"{verdict.summary} (measured with NCCL_P2P_DISABLE=1: "
                                                          f"the as-is run {run.status.value}, see the P2P check)")
            run = fallback
    record(verdict.with_extra(views=[busbw_chart([run], busbw_expectation), sizes_table([run])],
                              evidence=transport_evidence(run)))


@pytest.mark.distributed
@pytest.mark.gpu
@pytest.mark.rehearsal("allreduce")
def test_nccl_p2p(record: Recorder, allreduce_sweeps: AllreduceSweeps, busbw_expectation: Expectation | None,
                  nproc: int) -> None:
    """Does GPU peer-to-peer work, and is it worth keeping?

    All-reduce with and without NCCL_P2P_DISABLE."""
    if not allreduce_sweeps.on_gpu:
        record(skip("no NVIDIA GPU visible: the P2P comparison needs NCCL (the gloo sweep ran in the bandwidth check)"))
        return
    if nproc < 2:
        record(skip("one GPU: no peer-to-peer traffic to compare"))
        return
    if allreduce_sweeps.quick:
        record(skip(f"the P2P comparison {QUICK_SKIP}"))
        return
    as_is = allreduce_sweeps.run(AS_IS)
    if as_is.p2p_disabled:
        p2p_on, p2p_off = allreduce_sweeps.run(without_label(("NCCL_P2P_DISABLE",)), unset=("NCCL_P2P_DISABLE",)), as_is
    else:
        p2p_on, p2p_off = as_is, allreduce_sweeps.run(P2P_OFF, {"NCCL_P2P_DISABLE": "1"})
    verdict = judge_p2p(p2p_on, p2p_off, busbw_expectation, workaround_set=as_is.p2p_disabled)
    record(verdict.with_extra(views=[busbw_chart([p2p_on, p2p_off], busbw_expectation), sizes_table([p2p_on, p2p_off])],
                              evidence={**transport_evidence(p2p_on), **transport_evidence(p2p_off)}))


@pytest.mark.distributed
@pytest.mark.rehearsal("allreduce")
def test_nccl_environment(record: Recorder, allreduce_sweeps: AllreduceSweeps, nproc: int) -> None:
    """Is the job free of inherited NCCL_* variables that cost all-reduce speed?"""
    env = dict(os.environ)
    costly = costly_nccl_variables(env)
    if not costly:
        record(judge_nccl_env(env))
        return
    names = ", ".join(v.assignment for v in costly)
    if not allreduce_sweeps.on_gpu or nproc < 2:
        record(skip(f"{names} is set, but its cost needs NCCL on 2+ GPUs to measure (gloo ignores NCCL_* variables)"))
        return
    if allreduce_sweeps.quick:
        record(judge_nccl_env(env))
        return
    unset = tuple(v.name for v in costly)
    as_is = allreduce_sweeps.run(AS_IS)
    without = allreduce_sweeps.run(without_label(unset), unset=unset)
    record(judge_nccl_env(env, as_is, without).with_extra(views=[busbw_chart([as_is, without], None)]))
