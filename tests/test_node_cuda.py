"""Driver and GPU facts for the toolkit judges, derived by the node model from the NVML snapshot (real
binding over the fake)."""

from __future__ import annotations

import pytest

from preflight.judge.cuda_runtime import judge_job_gpu_arch
from preflight.node.cuda import cuda_facts
from preflight.outcome import Status
from preflight.probe.job_torch import JobTorch
from tests.fakes.nvml import walk_fake


def test_h100_machine() -> None:
    snapshot = walk_fake("8x-h100-sxm")
    facts = cuda_facts(snapshot, snapshot.gpus)
    assert facts.driver.version == "550.54.15" and facts.driver.cuda == (12, 4)
    assert facts.gpu_count == 8 and {gpu.capability for gpu in facts.gpus or ()} == {(9, 0)}


def test_job_gpus_only() -> None:
    inventory = walk_fake("2x-mixed-a6000-h100")
    facts = cuda_facts(inventory, inventory.gpus[1:])
    assert facts.gpus is not None and [(g.index, g.capability) for g in facts.gpus] == [(1, (9, 0))]


@pytest.mark.parametrize(("error", "gpus"), [("LIBRARY_NOT_FOUND", ()), ("DRIVER_NOT_LOADED", None)])
def test_nvml_failures(error: str, gpus: tuple[()] | None) -> None:
    snapshot = walk_fake("1x-a10g", init_error=error)
    facts = cuda_facts(snapshot, snapshot.gpus)
    assert facts.gpus == gpus
    assert facts.driver.version is None and facts.driver.problem == facts.note and f"NVML_{error}" in facts.note


def test_gpu_without_capability_is_named() -> None:
    snapshot = walk_fake("1x-a10g", not_supported={"nvmlDeviceGetCudaComputeCapability"})
    facts = cuda_facts(snapshot, snapshot.gpus)
    assert facts.gpus == () and "GPU0: compute capability" in facts.note


def test_a_lost_gpus_arch_check_skips_naming_it() -> None:
    """One failure, one finding: the lost GPU is test_gpu_responds' FAIL."""
    snapshot = walk_fake("8x-h100-sxm", lost_at_handle={3})
    facts = cuda_facts(snapshot, snapshot.gpus)
    assert facts.gpu_count == 7 and "GPU 3 is lost" in facts.note
    torch = JobTorch(python="python", version="2.4.1+cu124", cuda="12.4", arch_list=("sm_90",))
    verdict = judge_job_gpu_arch(torch, snapshot.gpus[3], facts)
    assert verdict.status is Status.SKIP and verdict.summary.startswith("GPU 3 is lost")
    assert judge_job_gpu_arch(torch, snapshot.gpus[0], facts).status is Status.PASS
