"""All-reduce bandwidth under torchrun, with GPU peer-to-peer as it is and with NCCL_P2P_DISABLE=1."""

from __future__ import annotations

import pytest

from preflight.judge.allreduce_verdicts import (
    BandwidthRuns,
    NcclEnvRuns,
    P2pRuns,
    judge_allreduce_bandwidth,
    judge_nccl_env_runs,
    judge_p2p_comparison,
)
from preflight.judge.busbw_reference import Expectation
from preflight.recording import Recorder


@pytest.mark.distributed
@pytest.mark.rehearsal("allreduce")
def test_allreduce_bandwidth(record: Recorder, allreduce_bandwidth_runs: BandwidthRuns,
                             busbw_expectation: Expectation | None) -> None:
    """Does all-reduce bus bandwidth reach what this node should?"""
    record(judge_allreduce_bandwidth(allreduce_bandwidth_runs, busbw_expectation))


@pytest.mark.distributed
@pytest.mark.gpu
@pytest.mark.rehearsal("allreduce")
def test_nccl_p2p(record: Recorder, p2p_comparison_runs: P2pRuns, busbw_expectation: Expectation | None) -> None:
    """Does GPU peer-to-peer work, and is it worth keeping?

    All-reduce with and without NCCL_P2P_DISABLE."""
    record(judge_p2p_comparison(p2p_comparison_runs, busbw_expectation))


@pytest.mark.distributed
@pytest.mark.rehearsal("allreduce")
def test_nccl_environment(record: Recorder, nccl_env_runs: NcclEnvRuns) -> None:
    """Is the job free of inherited NCCL_* variables that cost all-reduce speed?"""
    record(judge_nccl_env_runs(nccl_env_runs))
