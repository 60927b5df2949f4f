"""One picture of the node: built once per run from one bundle of transports, answers cached and typed.

Every check and the report take their facts from here, so no two places can disagree about the node.
The job's torch is asked in the background from the moment the node is built (it takes a torch
import); :attr:`Node.torch` waits for it. :attr:`Node.job` is the one answer to "which GPUs, how many
ranks": the visible GPUs in CUDA order, as ``torchrun --standalone --nproc-per-node=gpu`` would use them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from preflight.node.torch import JobTorch, read_job_torch
from preflight.node.transports import Transports
from preflight.parse.visible_devices import VisibleDevices

CPU_RANKS = 2  # a CPU rehearsal on gloo: two ranks are the least that exercise a collective


@dataclass(frozen=True, slots=True)
class Job:
    """What the job will run on: its GPUs (NVML indices, in CUDA order), its rank count, and why."""

    gpu_indices: tuple[int, ...]
    ranks: int
    on_gpu: bool
    source: str
    cuda_devices: int = 0  # devices torch sees (what every rank may address; P2P copies use them all)

    @property
    def gpu_count(self) -> int:
        """The job's GPUs (0 on a CPU rehearsal)."""
        return len(self.gpu_indices)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report."""
        return {"gpus": list(self.gpu_indices), "ranks": self.ranks, "on_gpu": self.on_gpu, "source": self.source,
                "cuda_devices": self.cuda_devices}


def decide_job(torch: JobTorch, visible: VisibleDevices | None, nproc: int | None) -> Job:
    """The job from what torch counts and what CUDA_VISIBLE_DEVICES leaves of NVML's GPUs.

    torch's count is what ``--nproc-per-node=gpu`` starts, so it decides the rank count; the visible
    GPUs (in CUDA order) say which they are. ``--nproc`` overrides the rank count and the job then
    uses the first that many GPUs, as ``--nproc-per-node=N`` does."""
    indices = tuple(v.gpu.nvml_index for v in visible.gpus) if visible is not None else ()
    gpus = torch.gpus
    if gpus:
        ranks = nproc or gpus
        source = f"{ranks} ranks ({'--nproc' if nproc else 'one per GPU torch sees'})"
        return Job(indices[:ranks], ranks, True, source, cuda_devices=gpus)
    ranks = nproc or CPU_RANKS
    why = torch.problem or torch.device_count_error or (
        "torch is a CPU build" if not torch.is_cuda_build else "torch sees no GPU")
    return Job((), ranks, False, f"{ranks} CPU ranks on gloo ({'--nproc' if nproc else why})")


class Node:
    """The node's facts, each gathered once, on first use (the job's torch from the start)."""

    def __init__(self, transports: Transports, *, nproc: int | None,
                 visible: Callable[[], VisibleDevices | None]) -> None:
        self.transports = transports
        self._nproc = nproc
        self._visible = visible
        self._torch: list[JobTorch] = []
        self._job: Job | None = None
        self._torch_thread = threading.Thread(target=lambda: self._torch.append(read_job_torch(transports)),
                                              name="preflight-torch-probe", daemon=True)
        self._torch_thread.start()

    @property
    def torch(self) -> JobTorch:
        """The job's torch (waits for the probe started with the node)."""
        self._torch_thread.join()
        return self._torch[0]

    @property
    def job(self) -> Job:
        """The job's GPUs and ranks."""
        if self._job is None:
            self._job = decide_job(self.torch, self._visible(), self._nproc)
        return self._job

    def as_dict(self, sections: Sequence[str] = ("torch", "job")) -> dict[str, Any]:
        """The report's node facts."""
        out: dict[str, Any] = {}
        if "torch" in sections:
            out["torch"] = self.torch.as_dict()
        if "job" in sections:
            out["job"] = self.job.as_dict()
        return out
