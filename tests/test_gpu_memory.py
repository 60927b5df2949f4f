"""GPU memory for the memory-fit check: nvidia-smi's CSV, CUDA_VISIBLE_DEVICES, the inventory adapter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult
from preflight.probe.gpu_memory import (
    QUERY,
    GpuMemory,
    GpuMemoryError,
    from_inventory,
    parse_query_gpu,
    probe_gpu_memory,
    visible,
)

MiB = 2**20
CSV = (Path(__file__).resolve().parent / "data" / "host" / "nvidia-smi-query-gpu-memory.csv").read_text()


def runner(stdout: str = "", returncode: int | None = 0, not_found: bool = False):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None) -> CommandResult:
        assert tuple(argv) == QUERY
        return CommandResult(tuple(argv), returncode, stdout, "", not_found=not_found)

    return run


def test_parse_query_gpu() -> None:
    rows = parse_query_gpu(CSV)
    assert [gpu for gpu, _ in rows] == [
        GpuMemory(0, "NVIDIA H100 80GB HBM3", 81559 * MiB, 1 * MiB),
        GpuMemory(1, "NVIDIA H100 80GB HBM3", 81559 * MiB, 71680 * MiB),
        GpuMemory(2, "NVIDIA A100-SXM4-80GB", 81920 * MiB, 0),
    ]
    assert rows[1][1] == "GPU-7a9d3b12-0c4e-4f1a-8b2d-3e5f7a9c1d23"


def test_parse_name_with_a_comma() -> None:
    (gpu, _), = parse_query_gpu("0, GPU-1, Weird, Name, 1000, 10\n")
    assert gpu.name == "Weird, Name" and gpu.total_bytes == 1000 * MiB


@pytest.mark.parametrize("text", ["0, GPU-1, H100, [N/A], 1\n", "0, GPU-1, H100\n", "x, GPU-1, H100, 1, 1\n"])
def test_parse_rejects_what_it_cannot_read(text: str) -> None:
    with pytest.raises(GpuMemoryError):
        parse_query_gpu(text)


@pytest.mark.parametrize(
    ("mask", "indices"),
    [(None, [0, 1, 2]), ("2,0", [2, 0]), ("GPU-7a9d3b12", [1]), ("0,7,1", [0]), ("", []), ("-1", [])],
)
def test_cuda_visible_devices(mask: str | None, indices: list[int]) -> None:
    env = {} if mask is None else {"CUDA_VISIBLE_DEVICES": mask}
    assert [gpu.index for gpu in visible(parse_query_gpu(CSV), env)] == indices


def test_probe_gpu_memory_ok() -> None:
    source = probe_gpu_memory(runner(CSV), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert source.reason is None and [g.index for g in source.gpus] == [0, 1]


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        (runner(not_found=True, returncode=None), "no NVIDIA GPU visible: nvidia-smi: not found on PATH"),
        (runner("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", returncode=9),
         "no NVIDIA GPU visible: nvidia-smi: exit code 9"),
        (runner("garbage\n"), "not understood"),
        (runner(CSV), "no NVIDIA GPU visible to the job"),
    ],
)
def test_probe_gpu_memory_problems(run, reason: str) -> None:  # type: ignore[no-untyped-def]
    source = probe_gpu_memory(run, env={"CUDA_VISIBLE_DEVICES": ""})
    assert source.gpus == () and reason in (source.reason or "")


@dataclass
class FakeGpu:
    index: int
    name: str
    memory_total: object
    memory_used: object


@dataclass
class FakeInventory:
    gpus: tuple[FakeGpu, ...]
    error: object = None


@dataclass
class FakeError:
    cause: str


def test_from_inventory() -> None:
    source = from_inventory(FakeInventory((FakeGpu(0, "H100", 80 * 2**30, 2**30), FakeGpu(1, "H100", 80 * 2**30, "n/a"))))
    assert source.source == "gpu inventory"
    assert source.gpus == (GpuMemory(0, "H100", 80 * 2**30, 2**30), GpuMemory(1, "H100", 80 * 2**30, 0))


def test_from_inventory_unknown_memory_and_no_gpu() -> None:
    assert "memory is unknown" in (from_inventory(FakeInventory((FakeGpu(0, "H100", "not supported", 0),))).reason or "")
    assert "driver not loaded" in (from_inventory(FakeInventory((), FakeError("driver not loaded"))).reason or "")
