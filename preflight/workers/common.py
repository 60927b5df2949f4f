"""What every torchrun rank shares: its context, progress marks, result files and process group.

Nothing here imports torch at module level, and nothing outside the standard library: the ranks run
in the job's own interpreter (which may not have preflight's dependencies), so ``preflight.workers``
may import only the standard library and, inside functions, torch.

Files one rank writes in the launch's run directory:

- ``rank<N>.log``: its stdout and stderr (NCCL_DEBUG output included), for the whole launch;
- ``rank<N>.pid``: its pid and start time, so the launcher can stop it if torchrun dies first;
- ``rank<N>.progress``: the phase it is in, what it is doing there, and since when;
- ``rank<N>.<phase>.json``: the phase's result; ``rank<N>.<phase>.error.json``: why it raised.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from preflight.workers.rank_log import redirect_output as redirect_output  # the one private-log writer

RUN_DIR_ENV = "PREFLIGHT_RUN_DIR"
BACKEND_ENV = "PREFLIGHT_BACKEND"
PG_TIMEOUT_ENV = "PREFLIGHT_PG_TIMEOUT_S"
DEFAULT_PG_TIMEOUT_S = 60.0
JOINING = "joining the process group"
STARTUP = ""  # the pseudo-phase before the first one: torch import and joining the process group
LEAVING = "(leaving)"  # the pseudo-phase after the last one: leaving the process group


def result_name(rank: int, phase: str) -> str:
    """``rank1.ddp.json``: the file a finished phase leaves."""
    return f"rank{rank}.{phase}.json"


def error_name(rank: int, phase: str) -> str:
    """``rank1.ddp.error.json``: the file a phase that raised leaves."""
    return f"rank{rank}.{phase}.error.json"


def progress_name(rank: int) -> str:
    """``rank1.progress``: where the rank is now."""
    return f"rank{rank}.progress"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write through a temporary file and a rename, so a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


@dataclass(slots=True)
class Progress:
    """Announces what a rank does; after a hang the launcher reports each rank's last phase and label."""

    run_dir: Path
    rank: int
    phase: str = ""
    phase_started: float = 0.0
    seq: int = 0
    completed: list[str] = field(default_factory=list)

    def enter(self, phase: str, label: str) -> None:
        """Start ``phase`` (its clock starts now)."""
        self.phase, self.phase_started = phase, time.time()
        self.mark(label)

    def mark(self, label: str, *, waiting: bool = False) -> None:
        """Say what the rank is about to do inside the current phase."""
        self.seq += 1
        write_json_atomic(self.run_dir / progress_name(self.rank), {
            "phase": self.phase, "label": label, "seq": self.seq, "time": time.time(),
            "phase_started": self.phase_started, "completed": self.completed, "waiting": waiting})

    def done(self, phase: str) -> None:
        """``phase`` ended on this rank (result or error written)."""
        self.completed.append(phase)


@dataclass(slots=True)
class WorkerContext:
    """The rank's identity, its device and the arguments of the phase it runs."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: Any  # torch.device; typed loosely so this module imports without torch
    args: list[str]
    run_dir: Path
    pg_timeout_s: float
    progress_marks: Progress | None = None
    notes: list[str] = field(default_factory=list)

    def progress(self, label: str) -> None:
        """Say what this rank is about to do; after a hang, the launcher reports each rank's last label."""
        if self.progress_marks is not None:
            self.progress_marks.mark(label)

    @property
    def on_gpu(self) -> bool:
        """True when this rank drives a CUDA device."""
        return self.backend == "nccl"

    def device_identity(self) -> dict[str, Any]:
        """Which physical device this rank used (uuid and bus id on GPUs, 'cpu' otherwise)."""
        if not self.on_gpu:
            return {"kind": "cpu", "id": "cpu", "pid": os.getpid()}
        import torch

        props = torch.cuda.get_device_properties(self.device)
        uuid = normalized_uuid(str(getattr(props, "uuid", "")) or None)
        bus = _pci_bus_id(props)
        return {"kind": "cuda", "id": uuid or bus or str(self.device), "name": props.name, "uuid": uuid,
                "pci_bus_id": bus}


def normalized_uuid(text: str | None) -> str | None:
    """``GPU-1a2b...`` as NVML and nvidia-smi print it. torch prints ``props.uuid`` without the ``GPU-``
    prefix (torch/csrc/cuda/Module.cpp formats the 16 raw bytes), so ranks are joined on this form."""
    if not text:
        return None
    bare = text.strip().lower().removeprefix("gpu-")
    return f"GPU-{bare}" if bare else None


def _pci_bus_id(props: Any) -> str | None:
    """``00000000:1B:00.0`` (NVML's spelling, 8-digit domain) from device properties, when torch has it."""
    try:
        return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0".upper()
    except AttributeError:
        return None


def join_process_group(rank: int, run_dir: Path) -> WorkerContext:
    """Join the process group with an explicit timeout and pick this rank's device: NCCL on its own GPU
    (``set_device(LOCAL_RANK)`` first, eager init with ``device_id``) when CUDA is there, else gloo."""
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout_s = float(os.environ.get(PG_TIMEOUT_ENV, DEFAULT_PG_TIMEOUT_S))
    wanted = os.environ.get(BACKEND_ENV, "auto")
    use_gpu = wanted == "nccl" or (wanted == "auto" and torch.cuda.is_available())
    if use_gpu:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), device_id=device)
    else:
        device = torch.device("cpu")
        backend = "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return WorkerContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend, device=device,
                         args=[], run_dir=run_dir, pg_timeout_s=timeout_s)


def leave_process_group() -> None:
    """Destroy the process group if one was joined."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
