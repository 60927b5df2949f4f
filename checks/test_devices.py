"""GPU inventory and visible devices: what the job will really see, and each GPU's health."""

from __future__ import annotations

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
from preflight.outcome import Verdict, skip
from preflight.probe.nvml_snapshot import GpuInfo, NvmlSnapshot
from preflight.probe.torch_devices import TorchDevices
from preflight.settings import Settings


def _node_skip(state: GpuState) -> Verdict | None:
    """SKIP for the node-level checks when NVML lists no GPU (test_nvml reports why)."""
    reason = no_gpu_reason(state.snapshot)
    return None if reason is None else skip(reason)


def test_nvml(record, settings: Settings, gpu_inventory: NvmlSnapshot, gpu_table_view) -> None:
    """NVML starts and lists the GPUs"""
    verdict = judge_nvml(gpu_inventory, settings.expect_gpus)
    record(verdict.with_extra(views=[gpu_table_view]) if gpu_inventory.gpus else verdict)


def test_gpu_count(record, settings: Settings, gpu_environment: GpuState, torch_devices: TorchDevices) -> None:
    """The job sees the expected number of GPUs"""
    state = gpu_environment
    record(
        _node_skip(state)
        or judge_gpu_count(state.visible, len(state.snapshot.gpus), settings.expect_gpus, torch_devices)
    )


def test_devices_agree(record, gpu_environment: GpuState, torch_devices: TorchDevices) -> None:
    """torch, NVML and CUDA_VISIBLE_DEVICES agree on the GPUs"""
    state = gpu_environment
    record(_node_skip(state) or judge_device_agreement(state.visible, len(state.snapshot.gpus), torch_devices))


def test_cuda_visible_devices(record, gpu_environment: GpuState) -> None:
    """CUDA_VISIBLE_DEVICES reads the way it was written"""
    record(_node_skip(gpu_environment) or judge_visible_devices(gpu_environment.visible))


def test_cuda_device_order(record, gpu_environment: GpuState) -> None:
    """CUDA device indices mean the GPUs nvidia-smi shows"""
    state = gpu_environment
    record(_node_skip(state) or judge_device_order(state.visible, state.order_raw, state.identities))


def test_gpu_models(record, gpu_environment: GpuState) -> None:
    """The job's GPUs are all one model"""
    record(_node_skip(gpu_environment) or judge_gpu_models(gpu_environment.job_gpus()))


@pytest.mark.gpu
def test_gpu_responds(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """The GPU answers NVML"""
    record(gpu_skip or judge_gpu_responds(gpu))


@pytest.mark.gpu
def test_gpu_not_busy(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """No other process holds the GPU's memory"""
    record(gpu_skip or judge_gpu_busy(gpu, own_pids=own_pids()))


@pytest.mark.gpu
def test_gpu_ecc(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """No uncorrectable ECC errors"""
    record(gpu_skip or judge_ecc(gpu))


@pytest.mark.gpu
def test_gpu_memory_repairs(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """No pending or failed row remaps or page retirements"""
    record(gpu_skip or judge_memory_repairs(gpu))


@pytest.mark.gpu
def test_gpu_mig(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """MIG is off on the job's GPUs"""
    record(gpu_skip or judge_mig(gpu))


@pytest.mark.gpu
def test_gpu_persistence(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """Persistence mode is on"""
    record(gpu_skip or judge_persistence(gpu))


@pytest.mark.gpu
def test_gpu_throttling(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """No thermal or power slowdown at idle"""
    record(gpu_skip or judge_throttling(gpu))


@pytest.mark.gpu
def test_gpu_pcie_link(record, gpu: GpuInfo, gpu_skip: Verdict | None) -> None:
    """PCIe link at full speed under load"""
    record(gpu_skip or judge_pcie_link(gpu))
