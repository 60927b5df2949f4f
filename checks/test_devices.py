"""GPU inventory and visible devices: what the job will really see, and each GPU's health."""

from __future__ import annotations

import pytest

from preflight.judge.gpu_health import (
    judge_compute_mode,
    judge_ecc,
    judge_gpu_busy,
    judge_gpu_models,
    judge_gpu_presence,
    judge_gpu_responds,
    judge_memory_repairs,
    judge_mig,
    judge_nvml,
    judge_pcie_link,
    judge_persistence,
    judge_throttling,
    own_pids,
)
from preflight.judge.visible_devices import (
    judge_device_agreement,
    judge_device_order,
    judge_gpu_count,
    judge_visible_devices,
)
from preflight.node import Node
from preflight.outcome import View
from preflight.parse.visible_devices import VisibleDevices
from preflight.probe.nvml_snapshot import GpuInfo
from preflight.recording import Recorder
from preflight.settings import Settings


def test_nvidia_gpu_present(record: Recorder, node: Node) -> None:
    """Is there an NVIDIA GPU for the job, or a CPU rehearsal?

    A `--nproc-per-node=gpu` job needs a GPU; `--cpu` asks for a rehearsal on gloo CPU ranks instead."""
    record(judge_gpu_presence(node.pci_gpus.count, len(node.nvml.gpus), node.torch.gpus, node.cpu_rehearsal))


def test_nvml(record: Recorder, settings: Settings, node: Node, gpu_table_view: View) -> None:
    """Does NVML start and list the GPUs?"""
    verdict = judge_nvml(node.nvml, settings.expect_gpus, node.pci_gpus.count, node.job_gpus)
    record(verdict.with_extra(views=[gpu_table_view]) if node.nvml.gpus else verdict)


def test_gpu_count(record: Recorder, settings: Settings, node: Node, visible: VisibleDevices) -> None:
    """Does the job see the expected number of GPUs?"""
    record(judge_gpu_count(visible, node.job_sees, len(node.nvml.gpus), settings.expect_gpus, len(node.lost_gpus)))


def test_devices_agree(record: Recorder, node: Node, visible: VisibleDevices) -> None:
    """Do torch, NVML and CUDA_VISIBLE_DEVICES agree on the GPUs?"""
    record(judge_device_agreement(visible, len(node.nvml.gpus), node.torch))


def test_cuda_visible_devices(record: Recorder, visible: VisibleDevices) -> None:
    """Does CUDA_VISIBLE_DEVICES read the way it was written?"""
    record(judge_visible_devices(visible))


def test_cuda_device_order(record: Recorder, node: Node, visible: VisibleDevices) -> None:
    """Do CUDA device indices mean the GPUs nvidia-smi shows?"""
    record(judge_device_order(visible, node.env.device_order, node.identities))


def test_gpu_models(record: Recorder, node: Node, visible: VisibleDevices) -> None:
    """Are the job's GPUs all one model?"""
    record(judge_gpu_models(node.job_gpus))


@pytest.mark.gpu
def test_gpu_responds(record: Recorder, gpu: GpuInfo) -> None:
    """Does the GPU answer NVML?"""
    record(judge_gpu_responds(gpu))


@pytest.mark.gpu
def test_gpu_not_busy(record: Recorder, gpu: GpuInfo) -> None:
    """Is the GPU's memory free of other processes?"""
    record(judge_gpu_busy(gpu, own_pids=own_pids()))


@pytest.mark.gpu
def test_gpu_ecc(record: Recorder, gpu: GpuInfo) -> None:
    """Is the GPU free of uncorrectable ECC errors?"""
    record(judge_ecc(gpu))


@pytest.mark.gpu
def test_gpu_memory_repairs(record: Recorder, gpu: GpuInfo) -> None:
    """Is the GPU free of pending or failed memory repairs?

    Row remaps (Ampere and later) or page retirements (earlier GPUs)."""
    record(judge_memory_repairs(gpu))


@pytest.mark.gpu
def test_gpu_mig(record: Recorder, gpu: GpuInfo, node: Node) -> None:
    """Does the GPU's MIG setting suit the job?"""
    record(judge_mig(gpu, node.job_devices, node.job.ranks))


@pytest.mark.gpu
def test_gpu_compute_mode(record: Recorder, gpu: GpuInfo) -> None:
    """Does the GPU's compute mode let the job's rank create its CUDA context?"""
    record(judge_compute_mode(gpu, own_pids=own_pids()))


@pytest.mark.gpu
def test_gpu_persistence(record: Recorder, gpu: GpuInfo) -> None:
    """Is persistence mode on?"""
    record(judge_persistence(gpu))


@pytest.mark.gpu
def test_gpu_throttling(record: Recorder, gpu: GpuInfo) -> None:
    """Does the GPU run without thermal or power slowdown at idle?"""
    record(judge_throttling(gpu))


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.rehearsal("allreduce")
def test_gpu_pcie_link(record: Recorder, gpu: GpuInfo, pcie_under_load: dict[int, tuple[int, int]]) -> None:
    """Does the PCIe link run at full speed under load?"""
    record(judge_pcie_link(gpu, pcie_under_load.get(gpu.index)))
