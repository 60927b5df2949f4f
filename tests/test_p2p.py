"""The P2P copy worker (its copy-and-verify core on CPU, its launch) and the P2P judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from preflight.judge.p2p_copies import judge_p2p_copy_launch
from preflight.judge.p2p_copies import judge_p2p_copies as judge_copies
from preflight.launch.phase_results import P2pResult
from preflight.outcome import Status
from tests.launching import launch_phase
from preflight.parse.topo import TopoMatrix
from preflight.workers.p2p import measure_pair, pattern

CPU = torch.device("cpu")


def judge_p2p_copies(result: dict[str, Any], **kwargs: Any) -> Any:
    """The judge on the worker's dict, read as the launcher reads it."""
    return judge_copies(P2pResult.parse(result), **kwargs)


def test_pattern_is_deterministic_and_varied() -> None:
    first = pattern(1 << 16, seed=3, device=CPU)
    assert torch.equal(first, pattern(1 << 16, seed=3, device=CPU))
    assert not torch.equal(first, pattern(1 << 16, seed=4, device=CPU))
    assert first.unique().numel() == first.numel()


def test_measure_pair_verifies_and_times_a_good_copy() -> None:
    result = measure_pair(CPU, CPU, 1 << 16, iterations=3, seed=1)
    assert result["mismatches"] == 0 and result["first_bad_index"] is None
    assert result["bytes"] == 4 << 16 and result["gbps"] > 0


def test_measure_pair_catches_a_copy_that_drops_data() -> None:
    def lossy(destination: Any, source: Any) -> Any:
        destination.copy_(source)
        destination[4096:4100] = 0
        return destination

    result = measure_pair(CPU, CPU, 1 << 16, iterations=3, seed=1, copy=lossy)
    assert result["mismatches"] == 4 and result["first_bad_index"] == 4096 and result["gbps"] is None


def _pairs(count: int, gbps: float = 150.0, /, **overrides: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for a in range(count):
        for b in range(count):
            if a != b:
                entry = {"src": a, "dst": b, "can_access_peer": True, "mismatches": 0, "first_bad_index": None,
                         "bytes": 64 << 20, "gbps": gbps, "error": None}
                entry.update(overrides.get(f"{a}-{b}", {}))
                out.append(entry)
    return out


NV4 = TopoMatrix(gpus=("GPU0", "GPU1", "GPU2", "GPU3"),
                 links=tuple(tuple("X" if i == j else "NV18" for j in range(4)) for i in range(4)))


def test_all_pairs_good_pass_with_a_table() -> None:
    verdict = judge_p2p_copies({"pairs": _pairs(4)}, names={i: f"GPU{i}" for i in range(4)}, matrix=NV4)
    assert verdict.status is Status.PASS
    assert verdict.summary == "12 directed copies between 4 GPUs verified, peer access on all; 150.0-150.0 GB/s"
    (view,) = verdict.views
    assert view.data["rows"][0] == ["GPU0->GPU1", "NV18", "yes", "yes", 150.0]
    assert len(verdict.metrics) == 12


def test_corrupt_and_failed_copies_fail_naming_the_pair() -> None:
    corrupt = judge_p2p_copies({"pairs": _pairs(3, **{"1-2": {"mismatches": 7, "first_bad_index": 99, "gbps": None}})})
    assert corrupt.status is Status.FAIL and corrupt.code == "P2P_DATA_CORRUPT"
    assert "cuda1->cuda2 (7 of 16777216 values wrong, first at 99)" in corrupt.summary
    assert corrupt.views[0].data["highlight"] == [3]
    broken = judge_p2p_copies({"pairs": _pairs(2, **{"0-1": {"error": "RuntimeError: CUDA error", "gbps": None}})})
    assert broken.code == "P2P_COPY_FAILED" and "cuda0->cuda1 (RuntimeError: CUDA error)" in broken.summary


def test_no_peer_access_warns_but_fails_where_nvlink_is_shown() -> None:
    pcie = TopoMatrix(gpus=("GPU0", "GPU1"), links=(("X", "SYS"), ("SYS", "X")))
    no_peer = {"0-1": {"can_access_peer": False}, "1-0": {"can_access_peer": False}}
    verdict = judge_p2p_copies({"pairs": _pairs(2, **no_peer)}, names={0: "GPU0", 1: "GPU1"}, matrix=pcie)
    assert verdict.status is Status.WARN and verdict.code == "P2P_NOT_SUPPORTED"
    assert "no peer access on 2 of 2 directed pairs (GPU0->GPU1, GPU1->GPU0)" in verdict.summary
    nvlink = judge_p2p_copies({"pairs": _pairs(4, **no_peer)}, names={i: f"GPU{i}" for i in range(4)}, matrix=NV4)
    assert nvlink.status is Status.FAIL and nvlink.code == "P2P_NVLINK_NOT_USABLE"


def test_a_pair_far_below_its_peers_warns() -> None:
    verdict = judge_p2p_copies({"pairs": _pairs(4, **{"2-3": {"gbps": 40.0}})}, names={i: f"GPU{i}" for i in range(4)},
                        matrix=NV4)
    assert verdict.status is Status.WARN and verdict.code == "P2P_SLOW_PAIR"
    assert verdict.summary.startswith("GPU2->GPU3 40.0 GB/s below half the median")


def test_worker_skips_are_skips() -> None:
    assert judge_p2p_copies({"skipped": "1 CUDA device(s) visible: no pair to test"}).status is Status.SKIP
    assert judge_p2p_copies({"pairs": []}).status is Status.SKIP


@pytest.mark.e2e
def test_the_worker_launches_and_skips_without_gpus(tmp_path: Path) -> None:
    result = launch_phase("preflight.workers.p2p:run", nproc=1, run_dir=tmp_path, args=["--mib", "1"],
                          parse_output=P2pResult.parse)
    assert result.ok, result.describe()
    assert judge_p2p_copy_launch(result) is None
    outcome = judge_copies(result.outputs(P2pResult)[0])
    assert outcome.status is Status.SKIP and "no CUDA device" in outcome.summary


@pytest.mark.e2e
@pytest.mark.parametrize(("mode", "budget_s", "code", "words"), [
    ("hang", 5, "P2P_COPY_HUNG", "hung during 'copy cuda1->cuda2'"),
    ("crash", 90, "P2P_TEST_CRASHED", "an illegal memory access"),
])
def test_a_stuck_or_crashing_copy_names_the_pair(tmp_path: Path, mode: str, budget_s: float, code: str,
                                                 words: str) -> None:
    result = launch_phase("tests.workers.p2p_stuck:run", nproc=1, budget_s=budget_s, run_dir=tmp_path, args=[mode])
    verdict = judge_p2p_copy_launch(result)
    assert verdict is not None and verdict.status is Status.FAIL and verdict.code == code
    assert words in verdict.summary
