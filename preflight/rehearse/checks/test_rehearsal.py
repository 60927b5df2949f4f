"""The user's training script, rehearsed: one check per rank count, then what the extra ranks buy.

Run by ``preflight rehearse``, whose session object (``preflight.rehearse.session``) launches the
sizes and parametrizes ``ranks``; the checks only hand its verdicts to ``record``.
"""

from __future__ import annotations

import pytest

from preflight.recording import Recorder
from preflight.rehearse.session import SESSION_KEY, RehearsalSession


@pytest.fixture(scope="session")
def rehearsal(pytestconfig: pytest.Config) -> RehearsalSession:
    """The rehearsal of this session (its plan, its launches, the report section)."""
    return pytestconfig.stash[SESSION_KEY]


@pytest.mark.distributed
def test_rehearsal_size(record: Recorder, rehearsal: RehearsalSession, ranks: int) -> None:
    """The script trains on this many ranks"""
    record(rehearsal.judge_size(ranks))


@pytest.mark.distributed
def test_rehearsal_scaling(record: Recorder, rehearsal: RehearsalSession) -> None:
    """The extra ranks buy throughput (scaling against one rank, the link's share predicted)"""
    record(rehearsal.judge_scaling())
