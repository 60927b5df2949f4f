"""GPU inventory and visible devices: what the job will really see, and each GPU's health."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest

from preflight.fixtures.gpus import GpuState, own_pids
from preflight.judge.devices import judge_device_agreement, judge_device_order, judge_gpu_count, judge_visible_devices
from preflight.judge.gpus import (
    judge_ecc,
    judge_gpu_busy,
    judge_gpu_models,
    judge_gpu_responds,
    judge_memory_repairs,
    judge_mig,
    judge_nvml,
    judge_pcie_link,
    judge_persistence,
    judge_throttling,
    no_gpu_reason,
)
from preflight.outcome import View, Verdict, skip
from preflight.parse.visible_devices import VisibleDevices
from preflight.probe.gpus import GpuInfo, Inventory
from preflight.probe.torch_devices import TorchDevices
from preflight.recording import Recorder
from preflight.settings import Settings

NO_GPU = "no NVIDIA GPU visible: NVML lists no GPU"


def _judge_node(state: GpuState, judge: Callable[[VisibleDevices], Verdict]) -> Verdict:
    """``judge`` on the resolved devices; SKIP for the node-level checks when NVML lists no GPU (test_nvml
    reports why). ``state.visible`` is None exactly when NVML lists no GPU."""
    reason = no_gpu_reason(state.inventory)
    if reason is not None or state.visible is None:
        return skip(reason or NO_GPU)
    return judge(state.visible)


def _judge_gpu(judge: Callable[[GpuInfo], Verdict], gpu: GpuInfo | None, gpu_skip: Verdict | None) -> Verdict:
    """``judge(gpu)``, or the ``nogpu`` case's SKIP (``gpu_skip`` is set exactly when ``gpu`` is None)."""
    if gpu is not None and gpu_skip is None:
        return judge(gpu)
    return gpu_skip or skip(NO_GPU)


def test_nvml(record: Recorder, settings: Settings, gpu_inventory: Inventory, gpu_table_view: View) -> None:
    """NVML starts and lists the GPUs"""
    verdict = judge_nvml(gpu_inventory, settings.expect_gpus)
    record(verdict.with_extra(views=[gpu_table_view]) if gpu_inventory.gpus else verdict)


def test_gpu_count(
    record: Recorder, settings: Settings, gpu_environment: GpuState, torch_devices: TorchDevices
) -> None:
    """The job sees the expected number of GPUs"""
    state = gpu_environment
    nvml_count, expected = len(state.inventory.gpus), settings.expect_gpus
    record(_judge_node(state, lambda visible: judge_gpu_count(visible, nvml_count, expected, torch_devices)))


def test_devices_agree(record: Recorder, gpu_environment: GpuState, torch_devices: TorchDevices) -> None:
    """torch, NVML and CUDA_VISIBLE_DEVICES agree on the GPUs"""
    nvml_count = len(gpu_environment.inventory.gpus)
    record(_judge_node(gpu_environment, lambda visible: judge_device_agreement(visible, nvml_count, torch_devices)))


def test_cuda_visible_devices(record: Recorder, gpu_environment: GpuState) -> None:
    """CUDA_VISIBLE_DEVICES reads the way it was written"""
    record(_judge_node(gpu_environment, judge_visible_devices))


def test_cuda_device_order(record: Recorder, gpu_environment: GpuState) -> None:
    """CUDA device indices mean the GPUs nvidia-smi shows"""
    state = gpu_environment
    record(_judge_node(state, lambda visible: judge_device_order(visible, state.order_raw, state.identities)))


def test_gpu_models(record: Recorder, gpu_environment: GpuState) -> None:
    """The job's GPUs are all one model"""
    record(_judge_node(gpu_environment, lambda _: judge_gpu_models(gpu_environment.job_gpus())))


@pytest.mark.gpu
def test_gpu_responds(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """The GPU answers NVML"""
    record(_judge_gpu(judge_gpu_responds, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_not_busy(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """No other process holds the GPU's memory"""
    record(_judge_gpu(partial(judge_gpu_busy, own_pids=own_pids()), gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_ecc(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """No uncorrectable ECC errors"""
    record(_judge_gpu(judge_ecc, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_memory_repairs(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """No pending or failed row remaps or page retirements"""
    record(_judge_gpu(judge_memory_repairs, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_mig(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """MIG is off on the job's GPUs"""
    record(_judge_gpu(judge_mig, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_persistence(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """Persistence mode is on"""
    record(_judge_gpu(judge_persistence, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_throttling(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """No thermal or power slowdown at idle"""
    record(_judge_gpu(judge_throttling, gpu, gpu_skip))


@pytest.mark.gpu
def test_gpu_pcie_link(record: Recorder, gpu: GpuInfo | None, gpu_skip: Verdict | None) -> None:
    """PCIe link at full speed under load"""
    record(_judge_gpu(judge_pcie_link, gpu, gpu_skip))
