"""The ``nvidia-smi topo -m`` parser over every shared capture and our own damaged ones.

Each capture has a JSON twin transcribed by hand from the capture: either the matrix it must give
or ``{"error": "<part of the message>"}`` for a capture that must be refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.parse.topo import TopologyParseError, TopoMatrix, nvlink_width, parse_topo_matrix
from tests.conftest import TEST_DATA, shared_fixtures_dir

EXPECTED = TEST_DATA / "topo" / "expected"
OWN = TEST_DATA / "topo" / "own"
MATRIX_KEYS = ("gpus", "links", "nics", "nic_devices", "gpu_nic_links", "cpu_affinity", "numa_affinity", "gpu_numa_id")


def _shared_names() -> list[str]:
    folder = shared_fixtures_dir() / "topo"
    names = sorted(p.stem for p in folder.glob("*.txt")) if folder.is_dir() else []
    return names or sorted(p.stem for p in EXPECTED.glob("*.json"))


def _check(text: str, expected: dict[str, Any]) -> None:
    if "error" in expected:
        with pytest.raises(TopologyParseError) as caught:
            parse_topo_matrix(text)
        message = str(caught.value)
        assert expected["error"] in message
        assert "\n" not in message
        return
    matrix = parse_topo_matrix(text)
    got = matrix.as_dict()
    for key in MATRIX_KEYS:
        assert got[key] == expected[key], key
    unread = expected.get("unread_affinity", [])
    assert [note.split(":")[0] for note in matrix.notes if note.startswith("GPU")] == unread
    pasted = [note for note in matrix.notes if not note.startswith("GPU")]
    assert pasted == ([] if "note" not in expected else [n for n in pasted if expected["note"] in n]), pasted
    assert ("note" in expected) == bool(pasted)


@pytest.mark.parametrize("name", _shared_names())
def test_shared_capture_reads_as_transcribed(shared_fixtures: Path, name: str) -> None:
    capture = shared_fixtures / "topo" / f"{name}.txt"
    twin = EXPECTED / f"{name}.json"
    assert twin.is_file(), f"no expected twin for {capture.name}: transcribe one into {twin}"
    _check(capture.read_text(), json.loads(twin.read_text()))


def test_every_twin_has_its_capture(shared_fixtures: Path) -> None:
    captures = {p.stem for p in (shared_fixtures / "topo").glob("*.txt")}
    assert {p.stem for p in EXPECTED.glob("*.json")} == captures


@pytest.mark.parametrize("name", sorted(p.stem for p in OWN.glob("*.txt")))
def test_own_capture(name: str) -> None:
    text = (OWN / f"{name}.txt").read_bytes().decode()
    _check(text, json.loads((OWN / f"{name}.json").read_text()))


def test_overflowed_affinity_keeps_the_matrix_and_says_why(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "8xH800-NV18-10NICs-affinity-column-overflow.txt").read_text()
    matrix = parse_topo_matrix(text)
    assert matrix.cpu_affinity is not None and matrix.cpu_affinity[0] is None
    assert "0-45,92-1370" in matrix.notes[0]
    assert all(code == "NV18" for _, _, code in matrix.pairs())


def test_damaged_capture_is_refused_naming_the_clipped_rows(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "8xH800-NV8-4NICs-terminal-truncated-columns-DAMAGED.txt").read_text()
    with pytest.raises(TopologyParseError, match="clipped"):
        parse_topo_matrix(text)


def test_tabs_and_spaces_give_the_same_matrix() -> None:
    rows = [["", "GPU0", "GPU1", "CPU Affinity"], ["GPU0", " X ", "PIX", "0-7"], ["GPU1", "PIX", " X ", "0-7"]]
    with_tabs = "\n".join("\t".join(r) for r in rows)
    with_spaces = "\n".join("".join(f"{c:<8}" for c in r) for r in rows)
    assert parse_topo_matrix(with_tabs) == parse_topo_matrix(with_spaces)


def test_each_cell_of_a_row_is_checked() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \tSYS\n"
    with pytest.raises(TopologyParseError, match="row GPU1 has 1 cells after the link columns, the header has 0"):
        parse_topo_matrix(text)


def test_matrix_refuses_inconsistent_construction() -> None:
    with pytest.raises(TopologyParseError, match="not symmetric"):
        TopoMatrix(gpus=("GPU0", "GPU1"), links=(("X", "NV4"), ("SYS", "X")))
    with pytest.raises(TopologyParseError, match="2x2"):
        TopoMatrix(gpus=("GPU0", "GPU1"), links=(("X",),))
    with pytest.raises(TopologyParseError, match="off-diagonal"):
        TopoMatrix(gpus=("GPU0", "GPU1"), links=(("X", "X"), ("X", "X")))


@pytest.mark.parametrize(("code", "width"), [("NV18", 18), ("NV1", 1), ("SYS", None), ("X", None), ("PIX", None)])
def test_nvlink_width(code: str, width: int | None) -> None:
    assert nvlink_width(code) == width
