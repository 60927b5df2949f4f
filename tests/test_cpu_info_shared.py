"""py-cpuinfo answers once per run (issue 15: DeepSpeed's CPU op builders ask ``get_cpu_info()`` twice per
op load, and py-cpuinfo runs a fresh Python child each time: 2.7 s of the 3.9 s ops phase in every rank
here). The real py-cpuinfo module (a DeepSpeed dependency) is patched as preflight patches it; its own
answer is replaced by a counter so the test sees how often it is asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.probe.op_build_child import share_cpu_info

cpuinfo = pytest.importorskip("cpuinfo")
ANSWER = {"arch": "X86_64", "flags": ["avx2", "fma"], "brand_raw": "a CPU"}  # the keys DeepSpeed reads


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def real() -> dict[str, Any]:
        calls.append(1)
        return dict(ANSWER)

    monkeypatch.setattr(cpuinfo, "get_cpu_info", real)
    return calls


def test_one_process_asks_once_and_leaves_the_answer(asked: list[int], tmp_path: Path) -> None:
    path = tmp_path / "cpu-info.json"
    share_cpu_info(str(path))
    share_cpu_info(str(path))  # a second patch in the same process is a no-op
    assert cpuinfo.get_cpu_info() == ANSWER and cpuinfo.get_cpu_info() == ANSWER
    assert len(asked) == 1 and json.loads(path.read_text()) == ANSWER


def test_a_rank_reads_the_answer_the_build_left(asked: list[int], tmp_path: Path) -> None:
    path = tmp_path / "cpu-info.json"
    path.write_text(json.dumps(ANSWER))
    share_cpu_info(str(path))
    assert cpuinfo.get_cpu_info() == ANSWER and not asked


def test_an_empty_or_broken_file_is_asked_again(asked: list[int], tmp_path: Path) -> None:
    path = tmp_path / "cpu-info.json"
    path.write_text("{not json")
    share_cpu_info(str(path))
    assert cpuinfo.get_cpu_info() == ANSWER and len(asked) == 1
    assert json.loads(path.read_text()) == ANSWER
