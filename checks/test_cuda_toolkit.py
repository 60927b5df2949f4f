"""CUDA build, driver, GPU architectures, toolkit and DeepSpeed readiness."""

from __future__ import annotations

import pytest

from preflight.judge.cuda_runtime import judge_driver_for_torch, judge_job_gpu_arch, judge_torch_build
from preflight.judge.toolkit import (
    judge_build_tools,
    judge_cuda_home_vs_path,
    judge_deepspeed_accelerator,
    judge_deepspeed_cuda,
    judge_jit_build,
    judge_toolkit,
)
from preflight.node.cuda import CudaFacts
from preflight.probe.deepspeed_ops import OpBuild
from preflight.probe.nvml_snapshot import GpuInfo
from preflight.probe.toolkit import ToolkitFacts
from preflight.recording import Recorder


def test_torch_cuda_build(record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts) -> None:
    """Is torch a CUDA build where there are NVIDIA GPUs?"""
    record(judge_torch_build(toolkit_facts.torch, cuda_node.gpu_count, cuda_node.driver))


@pytest.mark.gpu
def test_driver_supports_torch_cuda(record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts) -> None:
    """Does the NVIDIA driver support the CUDA version torch was built with?"""
    record(judge_driver_for_torch(toolkit_facts.torch, cuda_node.driver, cuda_node.gpu_count))


@pytest.mark.gpu
def test_gpu_arch_in_torch(record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts, gpu: GpuInfo) -> None:
    """Does torch carry kernels for the GPU's compute capability?"""
    record(judge_job_gpu_arch(toolkit_facts.torch, gpu, cuda_node))


def test_cuda_toolkit_for_jit_builds(
    record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts, frameworks: tuple[str, ...]
) -> None:
    """Is there a CUDA toolkit a JIT build can use?

    JIT builds: DeepSpeed's ops, C++/CUDA extensions."""
    record(judge_toolkit(toolkit_facts, frameworks, cuda_node.gpu_count))


def test_cuda_home_matches_path(record: Recorder, toolkit_facts: ToolkitFacts) -> None:
    """Are CUDA_HOME and the first nvcc on PATH the same toolkit?"""
    record(judge_cuda_home_vs_path(toolkit_facts))


def test_deepspeed_accepts_toolkit(
    record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts, frameworks: tuple[str, ...]
) -> None:
    """Does DeepSpeed's op builder accept the toolkit for torch's CUDA?

    On the path DeepSpeed takes: a JIT build or pre-built ops."""
    record(judge_deepspeed_cuda(toolkit_facts, frameworks, cuda_node.gpu_count))


def test_deepspeed_accelerator(
    record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts, frameworks: tuple[str, ...]
) -> None:
    """Does DeepSpeed pick the accelerator the node has?

    DS_ACCELERATOR must not override it."""
    record(judge_deepspeed_accelerator(toolkit_facts, cuda_node.gpu_count, frameworks))


def test_jit_build_tools(
    record: Recorder, toolkit_facts: ToolkitFacts, cuda_node: CudaFacts, frameworks: tuple[str, ...]
) -> None:
    """Are ninja and a C++ compiler there for JIT-built ops?"""
    record(judge_build_tools(toolkit_facts, frameworks, cuda_node.gpu_count))


@pytest.mark.slow
def test_deepspeed_jit_build(record: Recorder, toolkit_facts: ToolkitFacts, jit_build: OpBuild) -> None:
    """Does DeepSpeed JIT-build its fused Adam with this node's compilers?

    From scratch; nvcc on its CUDA accelerator."""
    record(judge_jit_build(toolkit_facts, jit_build))
