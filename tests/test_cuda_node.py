"""Driver and GPU facts for the toolkit judges, read from the NVML snapshot (real binding over the fake)."""

from __future__ import annotations

import pytest

from preflight.probe.cuda_node import cuda_node_from_inventory
from tests.fakes.nvml import walk_fake


def test_h100_machine() -> None:
    node = cuda_node_from_inventory(walk_fake("8x-h100-sxm"))
    assert node.driver.version == "550.54.15" and node.driver.cuda == (12, 4)
    assert node.gpu_count == 8 and {gpu.capability for gpu in node.gpus or ()} == {(9, 0)}


def test_job_gpus_only() -> None:
    inventory = walk_fake("2x-mixed-a6000-h100")
    node = cuda_node_from_inventory(inventory, inventory.gpus[1:])
    assert node.gpus is not None and [(g.index, g.capability) for g in node.gpus] == [(1, (9, 0))]


@pytest.mark.parametrize(("error", "gpus"), [("LIBRARY_NOT_FOUND", ()), ("DRIVER_NOT_LOADED", None)])
def test_nvml_failures(error: str, gpus: tuple[()] | None) -> None:
    node = cuda_node_from_inventory(walk_fake("1x-a10g", init_error=error))
    assert node.gpus == gpus
    assert node.driver.version is None and node.driver.problem == node.note and f"NVML_{error}" in node.note


def test_gpu_without_capability_is_named() -> None:
    snapshot = walk_fake("1x-a10g", not_supported={"nvmlDeviceGetCudaComputeCapability"})
    node = cuda_node_from_inventory(snapshot)
    assert node.gpus == () and "GPU0: compute capability" in node.note
