"""Can torch's CUDA build run on this node's driver and GPUs?

Three questions, each a pure function of facts: is torch a CUDA build where there are GPUs, is
the driver new enough for torch's CUDA (NVIDIA's per-release minimum driver, and minor version
compatibility within a major from CUDA 11 on, see :mod:`preflight.judge.cuda_tables`), and does
torch carry kernels (or PTX the driver can JIT) for each GPU's compute capability.
"""

from __future__ import annotations

from preflight.judge.cuda_tables import (
    DRIVER_MIN_FOR_CUDA,
    MVC_DRIVER_MIN,
    cu_tag,
    parse_arch,
    ptx_runs_on,
    sass_runs_on,
    version_tuple,
    wheel_for_capability,
    wheel_for_driver,
)
from preflight.node.cuda import CudaFacts, DriverFacts, GpuCapability, cuda_from_nvml
from preflight.probe.job_torch import JobTorch
from preflight.outcome import Verdict, fail, passed, skip, warn
from preflight.probe.nvml_snapshot import GpuInfo

TORCH_INDEX = "https://download.pytorch.org/whl"
__all__ = ["DriverFacts", "GpuCapability", "cuda_from_nvml", "judge_driver_for_torch", "judge_gpu_arch",
           "judge_job_gpu_arch", "judge_torch_build"]


def _release(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"


def _base_version(torch: JobTorch) -> str:
    return (torch.version or "").split("+")[0]


def _reinstall(torch: JobTorch, release: tuple[int, int] | None, why: str) -> str:
    if release is None:
        return f"Install a torch build that {why}; see https://pytorch.org/get-started/locally/."
    return (
        f"pip install --force-reinstall torch=={_base_version(torch)} "
        f"--index-url {TORCH_INDEX}/{cu_tag(release)}   # a build for CUDA {_release(release)}, {why}"
    )


def judge_torch_build(torch: JobTorch, gpu_count: int | None, driver: DriverFacts | None = None) -> Verdict:
    """A CPU-only (or ROCm) torch on a node with NVIDIA GPUs cannot use them: FAIL."""
    if not torch.installed and not torch.answered:
        return fail("JOB_PYTHON_UNUSABLE", str(torch.problem),
                    f"Run `{torch.python or 'python'} -c 'import torch'` by hand to see what it does, and point "
                    "--python at the interpreter the job really runs.")
    if not torch.installed:
        return fail(
            "TORCH_NOT_IMPORTABLE",
            f"torch cannot be imported: {torch.problem}",
            f"pip install torch --index-url {TORCH_INDEX}/<cuXYZ matching the driver>",
        )
    if gpu_count is None:
        return skip(f"GPU count unknown (NVML unavailable); {torch.describe()}")
    if gpu_count == 0:
        why = f" ({driver.problem})" if driver and driver.problem else ""
        return skip(f"no NVIDIA GPU visible{why}: {torch.describe()} is only checked against GPUs")
    if torch.is_cuda_build:
        return passed(f"{torch.describe()} on a node with {gpu_count} NVIDIA GPU(s)")
    wheel = wheel_for_driver(driver.cuda) if driver and driver.cuda else None
    driver_text = f" and {driver.describe()}" if driver else ""
    return fail(
        "TORCH_CPU_BUILD",
        f"{torch.describe()} cannot use the {gpu_count} NVIDIA GPU(s) here{driver_text}",
        _reinstall(torch, wheel, "the driver here supports"),
    )


def judge_driver_for_torch(torch: JobTorch, driver: DriverFacts, gpu_count: int | None) -> Verdict:
    """torch's CUDA needs the driver's CUDA to be at least as new, or a driver that qualifies for
    minor version compatibility within the same major (CUDA 11 on)."""
    if gpu_count == 0:
        why = f" ({driver.problem})" if driver.problem else ""
        return skip(f"no NVIDIA GPU visible{why}: no driver to check {torch.describe()} against")
    need = torch.cuda_release
    if need is None:
        return skip(f"{torch.describe()}: no CUDA runtime to match against the driver")
    if driver.version is None and driver.cuda is None:
        return skip(f"driver version unknown ({driver.problem or 'NVML gave none'}); torch needs CUDA {torch.cuda}")
    evidence = {"driver": driver.describe(), "torch": torch.describe()}
    if driver.cuda is not None and driver.cuda >= need:
        return passed(f"{driver.describe()} supports torch's CUDA {torch.cuda}", evidence=evidence)
    driver_version = _safe_version(driver.version)
    native = DRIVER_MIN_FOR_CUDA.get(need)
    if driver.cuda is None and driver_version and native and driver_version >= version_tuple(native):
        return passed(f"{driver.describe()} is >= {native}, the minimum for CUDA {torch.cuda}", evidence=evidence)
    mvc = MVC_DRIVER_MIN.get(need[0]) if need[0] >= 11 else None
    same_family = driver.cuda is None or driver.cuda[0] == need[0]
    # A driver reporting CUDA 12.x/13.x is at least R525/R580, so an unknown version still fits.
    family_fits = driver_version >= version_tuple(mvc) if (mvc and driver_version) else need[0] >= 12
    if mvc and same_family and family_fits:
        return passed(
            f"{driver.describe()} runs torch's CUDA {torch.cuda} through minor version compatibility "
            f"(CUDA {need[0]}.x needs >= {mvc})",
            evidence=evidence,
        )
    minimum = mvc or native
    if minimum is None:
        return skip(f"no published minimum driver known for CUDA {torch.cuda}; {driver.describe()}")
    full = f"; its full feature set needs >= {native}" if native and native != minimum else ""
    wheel = wheel_for_driver(driver.cuda) if driver.cuda else None
    return fail(
        "DRIVER_TOO_OLD_FOR_TORCH",
        f"{driver.describe()} is too old for {torch.describe()}: needs driver >= {minimum}",
        f"Upgrade the NVIDIA driver to >= {minimum} for CUDA {torch.cuda}{full} (driver branch "
        f"{minimum.split('.')[0]} or newer); or: " + _reinstall(torch, wheel, "which this driver supports"),
        evidence=evidence,
    )


def _safe_version(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return version_tuple(text)
    except ValueError:
        return None


def judge_gpu_arch(torch: JobTorch, gpu: GpuCapability, driver: DriverFacts | None = None) -> Verdict:
    """torch must carry a cubin for the GPU's capability, or PTX the driver can JIT for it."""
    label = f"GPU{gpu.index} {gpu.name} ({gpu.sm}, compute capability {_release(gpu.capability)})"
    if not torch.is_cuda_build:
        return skip(f"{torch.describe()}: no CUDA kernels to match {label}")
    if not torch.arch_list:
        return skip(f"{torch.describe()} reports an empty CUDA arch list; cannot match {label}")
    arch_text = " ".join(torch.arch_list)
    evidence = {"torch arch list": arch_text}
    parsed = [(entry, parse_arch(entry)) for entry in torch.arch_list]
    for entry, arch in parsed:
        if arch and arch[0] == "sm" and sass_runs_on(arch[1], arch[2], gpu.capability):
            return passed(f"{label} runs torch {torch.version}'s {entry} kernels", evidence=evidence)
    ptx = [
        entry
        for entry, arch in parsed
        if arch and arch[0] == "compute" and ptx_runs_on(arch[1], arch[2], gpu.capability)
    ]
    wheel = wheel_for_capability(gpu.capability)
    if ptx:
        need = torch.cuda_release
        if driver and driver.cuda and need and driver.cuda < need:
            return fail(
                "TORCH_ARCH_PTX_DRIVER_TOO_OLD",
                f"{label} has no cubin in torch {torch.version}; its {ptx[-1]} PTX (CUDA {torch.cuda}) "
                f"cannot be JIT-compiled by {driver.describe()}",
                f"Upgrade the NVIDIA driver to support CUDA {torch.cuda}, or: "
                + _reinstall(torch, wheel, f"which carries {gpu.sm} kernels"),
                evidence=evidence,
            )
        return warn(
            "TORCH_ARCH_PTX_JIT",
            f"{label} has no cubin in torch {torch.version} ({arch_text}); "
            f"the driver will JIT {ptx[-1]} PTX at startup",
            "First launch compiles every kernel (minutes; cached in ~/.nv/ComputeCache, raise "
            "CUDA_CACHE_MAXSIZE); to avoid it: " + _reinstall(torch, wheel, f"which carries {gpu.sm} kernels"),
            evidence=evidence,
        )
    return fail(
        "TORCH_ARCH_UNSUPPORTED",
        f"{label} is not in torch {torch.version}'s arch list ({arch_text}) and no PTX can be JIT-compiled for it",
        _reinstall(torch, wheel, f"which carries {gpu.sm} kernels"),
        evidence=evidence,
    )


def judge_job_gpu_arch(torch: JobTorch, gpu: GpuInfo, cuda: CudaFacts) -> Verdict:
    """:func:`judge_gpu_arch` for one of the job's GPUs, or SKIP saying why its capability is not known
    (a lost GPU is one finding, the NVML check's)."""
    capability = cuda.capability(gpu.index)
    if capability is not None:
        return judge_gpu_arch(torch, capability, cuda.driver)
    if gpu.gpu_lost:
        return skip(f"GPU {gpu.index} is lost: its compute capability cannot be read (see test_gpu_responds)")
    return skip(f"GPU{gpu.index}: NVML reports no compute capability ({gpu.compute_capability})")
