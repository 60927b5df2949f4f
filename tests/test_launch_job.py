"""The rehearsal launch is planned from what NVML (or ``--cpu``) says, so it starts while the job's torch
is still being imported in the torch probe (issue 15: the launch waited 3-4 s for that probe here);
when torch then counts other GPUs than NVML showed, the planned launch is replaced by the job's own.

The torch probe is answered at the command layer (tests/fakes/fake_torch.py: the real child's answer,
edited to a torch 2.4.1+cu124 that sees N GPUs), held back until the test lets it answer; NVML is the
fake C library under the real binding (tests/fakes/nvml.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest

from preflight.judge.strategies import FSDP2_CPU_MIN_TORCH
from preflight.node import Node, cpu_job
from preflight.node.transports import Transports
from preflight.report.ownership import LOGS
from preflight.workers.fsdp import CPU_MIN_TORCH, cpu_ranks_unsupported
from tests.fakes.replayed_torch import STORE_ENV
from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.fake_torch import cuda_answer, torch_runner
from tests.fakes.nvml import fake_transport


def held_answer(answer: Mapping[str, Any]) -> tuple[Callable[[], Mapping[str, Any]], threading.Event]:
    """A torch probe answer given only once the returned event is set (a torch import still running)."""
    release = threading.Event()

    def give() -> Mapping[str, Any]:
        assert release.wait(60), "the test never let the torch probe answer"
        return answer

    return give, release


def node_with(profile: str, torch_gpus: int, *, cpu: bool = False, nproc: int | None = None,
              environ: Mapping[str, str] | None = None) -> tuple[Node, threading.Event]:
    give, release = held_answer(cuda_answer(torch_gpus))
    transports = Transports(nvml=fake_transport(profile), run=torch_runner(give), environ=dict(environ or {}))
    return Node(transports, nproc=nproc, cpu=cpu), release


def test_on_gpus_the_launch_job_comes_from_nvml_before_torch_answers() -> None:
    node, release = node_with("8x-h100-sxm", 8)
    try:
        job = node.launch_job
        assert not node.torch_ready, "the launch job must not wait for the torch probe"
        assert (job.ranks, job.on_gpu, job.cuda_devices, job.gpu_indices) == (8, True, 8, tuple(range(8)))
    finally:
        release.set()
    assert node.job.launches_like(job)  # torch agrees: the launch that started is the job's


def test_visible_devices_and_nproc_shape_the_launch_job_as_they_shape_the_job() -> None:
    node, release = node_with("8x-h100-sxm", 3, nproc=2, environ={"CUDA_VISIBLE_DEVICES": "5,1,2"})
    try:
        job = node.launch_job
        assert not node.torch_ready
        assert (job.ranks, job.gpu_indices, job.cuda_devices) == (2, (5, 1), 3)
    finally:
        release.set()
    assert node.job.launches_like(job)


def test_a_cpu_rehearsal_never_waits_for_torch() -> None:
    node, release = node_with("8x-h100-sxm", 8, cpu=True)
    try:
        assert node.launch_job == cpu_job(None) and not node.torch_ready
    finally:
        release.set()


def test_torch_counting_other_gpus_than_nvml_is_a_different_launch() -> None:
    node, release = node_with("8x-h100-sxm", 4)  # e.g. a driver/runtime that lost GPUs: torch sees 4
    try:
        planned = node.launch_job
    finally:
        release.set()
    assert planned.ranks == 8 and node.job.ranks == 4
    assert not node.job.launches_like(planned)  # the rehearsal fixture replaces the launch (replan_if_job_changed)


def test_without_nvml_gpus_the_launch_job_is_torchs() -> None:
    transports = Transports(nvml=fake_transport("1x-a10g", init_error="LIBRARY_NOT_FOUND"),
                            run=torch_runner(cuda_answer(0)), environ={})
    node = Node(transports, nproc=None)
    job = node.launch_job  # NVML promises nothing: decided by torch, waited for
    assert node.torch_ready and not job.on_gpu


@pytest.mark.parametrize(("version", "unsupported"), [("2.4.1+cu121", True), ("2.6.0", True), ("2.7.0", False),
                                                      ("2.13.0+cpu", False), ("3.0.0a0", False), ("odd", False)])
def test_the_fsdp_phase_knows_the_cpu_rank_limit_the_judge_skips_on(version: str, unsupported: bool) -> None:
    assert CPU_MIN_TORCH == FSDP2_CPU_MIN_TORCH  # workers import no judge: the two must agree
    assert cpu_ranks_unsupported(version) is unsupported


@pytest.mark.e2e
def test_a_launch_planned_for_gpus_torch_cannot_use_is_stopped_and_the_checks_say_why(tmp_path: Path) -> None:
    """2 GPUs in NVML, a CPU build of torch: the launch planned from NVML starts, then the rehearsal sees
    the job's torch and stops it; the distributed checks skip as they did when the launch waited. (Two GPUs,
    not eight: the same start and stop, without six more ranks importing torch on this 2-core machine.)"""
    # The real torch probe, never a replayed answer (tests/fakes/replayed_torch.py): the launch starts because
    # the child importing torch answers seconds later, and an answer at once would keep it from starting.
    replay = ("PYTEST_PLUGINS", STORE_ENV)
    env = {**{k: v for k, v in os.environ.items() if k not in replay}, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(tmp_path), "-k", "ddp_step", "--",
                           "-p", "tests.fakes.nvml_plugin", "--fake-nvml=2x-l4", "--fake-torch-cpu"],
                          capture_output=True, text=True, env=env, timeout=300)
    report = json.loads((tmp_path / "preflight.json").read_text())
    validate_report(report)
    ddp = next(c for c in report["checks"] if c["name"] == "test_ddp_step")
    assert ddp["status"] == "SKIP" and "no NVIDIA GPU for the job" in ddp["summary"], (ddp, done.stdout[-2000:])
    assert report["node"]["job"]["on_gpu"] is False
    assert (tmp_path / LOGS / "rehearsal" / "torchrun.log").exists(), "the NVML-planned launch had started"
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not left, left


def test_the_torch_probe_finds_fsdp2_without_importing_it() -> None:
    """The probe reads where ``fully_shard`` is exported from the package source (importing
    ``torch.distributed.fsdp`` costs 1.3 s beside the launch); the answer is the import's."""
    import importlib

    done = subprocess.run([sys.executable, "-I", str(REPO_ROOT / "preflight" / "probe" / "torch_child.py")],
                          capture_output=True, text=True, timeout=120, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    found = answer["fsdp2_api"]
    assert found is not None and hasattr(importlib.import_module(found), "fully_shard")
