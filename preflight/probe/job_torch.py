"""The job's torch as its interpreter answered: a fact of its own, so the probes that read it (the toolkit's)
need not import the node model that asks for it (:mod:`preflight.node.torch`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class JobTorch:
    """The job's torch: version, build, what it counts, and what the rehearsal's workers need of it."""

    python: str
    python_version: str | None = None
    version: str | None = None  # None: torch cannot be imported (``problem`` says why)
    cuda: str | None = None
    hip: str | None = None
    arch_list: tuple[str, ...] = ()
    nccl: tuple[int, ...] | None = None
    nccl_suffix: str = ""
    device_count: int | None = None
    device_count_error: str | None = None
    distributed: bool = False
    fsdp2_api: str | None = None
    bf16_excludes_emulation: bool = False  # ``is_bf16_supported(including_emulation=False)`` exists
    numpy_problem: str | None = None
    wheels: Mapping[str, str] = field(default_factory=dict)
    deepspeed_version: str | None = None  # the job's DeepSpeed (package metadata), None when absent
    deepspeed_roots: tuple[str, ...] = ()  # folders holding its files (its build rule, pre-built ops)
    problem: str | None = None
    answered: bool = True  # False: the interpreter itself gave no usable answer (crashed, hung, printed junk)

    @property
    def installed(self) -> bool:
        """True when torch imports in the job's interpreter."""
        return self.version is not None

    @property
    def is_cuda_build(self) -> bool:
        """True when torch carries CUDA kernels."""
        return self.cuda is not None

    @property
    def gpus(self) -> int:
        """GPUs a ``--nproc-per-node=gpu`` launch would start ranks for (0 on a CPU build)."""
        return (self.device_count or 0) if self.is_cuda_build else 0

    @property
    def cuda_release(self) -> tuple[int, int] | None:
        """``(12, 4)`` from ``torch.version.cuda == "12.4"``; None on CPU/ROCm builds."""
        if self.cuda is None:
            return None
        parts = self.cuda.split(".")
        try:
            return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
        except ValueError:
            return None

    @property
    def nccl_wheels(self) -> dict[str, str]:
        """The ``nvidia-nccl*`` wheels installed beside torch (the NCCL a pip torch loads)."""
        return {name: version for name, version in self.wheels.items() if name.startswith("nvidia-nccl")}

    def describe(self) -> str:
        """``torch 2.4.1+cu124 (CUDA 12.4)`` or ``torch 2.13.0+cpu (CPU build)``."""
        if not self.installed:
            return "torch not importable"
        if self.cuda:
            return f"torch {self.version} (CUDA {self.cuda})"
        if self.hip:
            return f"torch {self.version} (ROCm/HIP {self.hip} build)"
        return f"torch {self.version} (CPU build, torch.version.cuda is None)"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report."""
        return {"python": self.python, "python_version": self.python_version, "version": self.version,
                "cuda": self.cuda, "hip": self.hip, "build": "CUDA" if self.cuda else "ROCm" if self.hip else "CPU",
                "arch_list": list(self.arch_list),
                "nccl": ".".join(map(str, self.nccl)) + self.nccl_suffix if self.nccl else None,
                "device_count": self.device_count, "device_count_error": self.device_count_error,
                "distributed": self.distributed, "fsdp2_api": self.fsdp2_api, "numpy_problem": self.numpy_problem,
                "wheels": dict(self.wheels), "problem": self.problem}
