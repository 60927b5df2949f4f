"""What every torchrun rank does around a worker's own work.

A worker module defines ``run(ctx: WorkerContext) -> dict`` and ends with
``if __name__ == "__main__": worker_main(run)``. ``worker_main`` sends the rank's stdout and stderr
(NCCL_DEBUG output included) to ``rank<N>.log`` in the run directory, writes its pid, joins the
process group with an explicit timeout (NCCL on GPUs with ``set_device(LOCAL_RANK)``, gloo on CPU),
calls ``run`` and writes the returned dict to ``rank<N>.json``. An exception is written to
``rank<N>.error.json`` with its traceback and the rank exits 1, so the launcher can tell which rank
crashed first and why.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

RUN_DIR_ENV = "PREFLIGHT_RUN_DIR"
BACKEND_ENV = "PREFLIGHT_BACKEND"
PG_TIMEOUT_ENV = "PREFLIGHT_PG_TIMEOUT_S"
DEFAULT_PG_TIMEOUT_S = 60.0


@dataclass(slots=True)
class WorkerContext:
    """The rank's identity and the resources it was given."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: Any  # torch.device; typed loosely so this module imports without torch
    args: list[str]
    run_dir: Path
    pg_timeout_s: float
    notes: list[str] = field(default_factory=list)

    def progress(self, phase: str) -> None:
        """Say what this rank is about to do; after a hang, the launcher reports each rank's last phase."""
        mark_progress(self.run_dir, self.rank, phase)

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
        uuid = str(getattr(props, "uuid", "")) or None
        bus = _pci_bus_id(props)
        return {"kind": "cuda", "id": uuid or bus or str(self.device), "name": props.name, "uuid": uuid,
                "pci_bus_id": bus}


def _pci_bus_id(props: Any) -> str | None:
    """``0000:1b:00.0`` style bus id from device properties, when torch exposes it."""
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:
        return None


_progress_seq = 0


def mark_progress(run_dir: Path, rank: int, phase: str) -> None:
    """Write ``rank<N>.progress``: the phase, its sequence number and when it began."""
    global _progress_seq
    _progress_seq += 1
    _write_json_atomic(run_dir / f"rank{rank}.progress", {"phase": phase, "seq": _progress_seq, "time": time.time()})


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def _redirect_output(log_path: Path) -> None:
    """Point fds 1 and 2 at the rank's log so C-level output (NCCL) lands there too."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def worker_main(run: Callable[[WorkerContext], dict[str, Any]]) -> None:
    """Entry point of a rank: set up, call ``run``, write the result or the error, exit."""
    rank = int(os.environ.get("RANK", "0"))
    run_dir = Path(os.environ.get(RUN_DIR_ENV, "."))
    _redirect_output(run_dir / f"rank{rank}.log")
    (run_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    started = time.monotonic()
    print(f"[preflight rank {rank}] pid {os.getpid()} starting {sys.argv[0]}", flush=True)
    try:
        mark_progress(run_dir, rank, "joining the process group")
        ctx = _init(rank)
        ctx.progress("running")
        result = run(ctx)
        payload = {
            "rank": rank,
            "world_size": ctx.world_size,
            "local_rank": ctx.local_rank,
            "backend": ctx.backend,
            "device": ctx.device_identity(),
            "duration_s": time.monotonic() - started,
            "notes": ctx.notes,
            "result": result,
        }
        _write_json_atomic(run_dir / f"rank{rank}.json", payload)
        print(f"[preflight rank {rank}] finished in {payload['duration_s']:.2f} s", flush=True)
        _shutdown()
    except BaseException as exc:  # noqa: BLE001 - any failure of a rank must be recorded
        traceback.print_exc()
        _write_json_atomic(
            run_dir / f"rank{rank}.error.json",
            {"rank": rank, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
             "time": time.time()},
        )
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a wedged CUDA/NCCL atexit must not hold the rank


def _init(rank: int) -> WorkerContext:
    """Join the process group with an explicit timeout and pick this rank's device."""
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
    return WorkerContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        backend=backend,
        device=device,
        args=sys.argv[1:],
        run_dir=Path(os.environ.get(RUN_DIR_ENV, ".")),
        pg_timeout_s=timeout_s,
    )


def _shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
