"""What torch says about GPUs, read without initialising CUDA in this process.

``torch.cuda.device_count()`` is what ``torchrun --nproc-per-node=gpu`` starts. Before CUDA is
initialised torch answers it through NVML plus its own reading of ``CUDA_VISIBLE_DEVICES``, so
it does not "poison" later forks. For ``MIG-`` lists torch falls back to the CUDA runtime, which
would initialise CUDA here, so that case is asked in a child process under a deadline.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from preflight.probe.command import run_command

_CHILD = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())"


@dataclass(frozen=True, slots=True)
class TorchDevices:
    """torch's version, the CUDA it was built for (None: CPU build) and its GPU count."""

    version: str | None  # None when torch cannot be imported
    cuda_build: str | None
    device_count: int | None
    error: str | None = None  # why the count is unknown

    def as_dict(self) -> dict[str, object]:
        """Plain JSON for the report."""
        return {
            "version": self.version,
            "cuda_build": self.cuda_build,
            "device_count": self.device_count,
            "error": self.error,
        }


def read_torch_devices(environ: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> TorchDevices:
    """Ask torch; in a child process when ``CUDA_VISIBLE_DEVICES`` lists MIG devices."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_VISIBLE_DEVICES", "").startswith("MIG-"):
        return _ask_child(env, timeout_s)
    try:
        import torch
    except ImportError as exc:
        return TorchDevices(None, None, None, f"torch cannot be imported: {exc}")
    try:
        count = int(torch.cuda.device_count())
    except Exception as exc:  # torch raises RuntimeError subclasses from its C++ side
        return TorchDevices(torch.__version__, torch.version.cuda, None, f"torch.cuda.device_count() failed: {exc}")
    return TorchDevices(str(torch.__version__), torch.version.cuda, count)


def _ask_child(env: Mapping[str, str], timeout_s: float) -> TorchDevices:
    result = run_command([sys.executable, "-c", _CHILD], timeout_s=timeout_s, env=dict(env))
    if not result.ok:
        return TorchDevices(None, None, None, result.describe_failure())
    parts = result.stdout.split()
    if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
        return TorchDevices(None, None, None, f"unexpected answer from torch: {result.stdout.strip()!r}")
    version, cuda, count = parts
    return TorchDevices(version, None if cuda == "None" else cuda, int(count))
