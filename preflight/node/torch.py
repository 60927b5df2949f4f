"""What the job's torch is and sees, asked once in a child of the job's interpreter.

preflight never imports torch to answer this: the job may run another interpreter (``--python``),
and a child keeps CUDA out of the pytest process (torch initialises it for ``MIG-`` device lists).
The child is :mod:`preflight.probe.torch_child`, run as a script through the command transport,
under a deadline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from preflight.node.transports import Transports
from preflight.probe.job_python import script_argv

CHILD = Path(__file__).resolve().parent.parent / "probe" / "torch_child.py"
TIMEOUT_S = 90.0  # a cold import of a CUDA torch from a network filesystem takes tens of seconds


def torch_probe_argv(python: str) -> list[str]:
    """The child with the job's ``sys.path`` (``PYTHONPATH`` and the user site kept, the working directory
    and preflight's own folders off it: :mod:`preflight.probe.job_python`)."""
    return script_argv(python, CHILD)


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

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report."""
        return {"python": self.python, "python_version": self.python_version, "version": self.version,
                "cuda": self.cuda, "hip": self.hip, "build": "CUDA" if self.cuda else "ROCm" if self.hip else "CPU",
                "arch_list": list(self.arch_list),
                "nccl": ".".join(map(str, self.nccl)) + self.nccl_suffix if self.nccl else None,
                "device_count": self.device_count, "device_count_error": self.device_count_error,
                "distributed": self.distributed, "fsdp2_api": self.fsdp2_api, "numpy_problem": self.numpy_problem,
                "wheels": dict(self.wheels), "problem": self.problem}


def from_child_output(python: str, data: Mapping[str, Any]) -> JobTorch:
    """The facts from the child's JSON."""
    base = JobTorch(python=str(data.get("python") or python), python_version=data.get("python_version"),
                    wheels={str(k): str(v) for k, v in dict(data.get("wheels") or {}).items()},
                    **_deepspeed_fields(data.get("deepspeed")))
    if data.get("import_error") or not data.get("version"):
        return replace(base, problem=f"import torch failed: {data.get('import_error') or 'no version'}")
    nccl = data.get("nccl")
    return replace(
        base, version=str(data["version"]), cuda=data.get("cuda"), hip=data.get("hip"),
        arch_list=tuple(str(a) for a in data.get("arch_list") or ()),
        nccl=tuple(int(n) for n in nccl) if nccl else None, nccl_suffix=str(data.get("nccl_suffix") or ""),
        device_count=data.get("device_count"), device_count_error=data.get("device_count_error"),
        distributed=bool(data.get("distributed")), fsdp2_api=data.get("fsdp2_api"),
        bf16_excludes_emulation=bool(data.get("bf16_arg_including_emulation")),
        numpy_problem=data.get("numpy"))


def _deepspeed_fields(found: Any) -> dict[str, Any]:
    if not isinstance(found, Mapping) or not found.get("version"):
        return {}
    return {"deepspeed_version": str(found["version"]),
            "deepspeed_roots": tuple(str(r) for r in found.get("roots") or ())}


def read_job_torch(transports: Transports, timeout_s: float = TIMEOUT_S) -> JobTorch:
    """Ask the job's interpreter; a failure to answer is a fact (``problem``), never an exception."""
    result = transports.run(torch_probe_argv(transports.python), timeout_s=timeout_s, env=dict(transports.environ))
    if not result.ok:
        detail = result.describe_failure()
        tail = result.stderr.strip().splitlines()[-1:]
        if tail and tail[0] not in detail:
            detail = f"{detail}: {tail[0]}"
        return JobTorch(python=transports.python, problem=detail)
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return JobTorch(python=transports.python, problem=f"unexpected answer from the torch probe: "
                                                          f"{result.stdout.strip()[:200]!r}")
    if not isinstance(data, dict):
        return JobTorch(python=transports.python, problem="unexpected answer from the torch probe")
    return from_child_output(transports.python, data)
