"""Each GPU's total and used memory, for the memory-fit check.

The GPU inventory (NVML) is the first source when the run has one; this module adapts it and
falls back to ``nvidia-smi --query-gpu`` (no CUDA context is created, the call has a deadline).
Only the GPUs the job will see count: ``CUDA_VISIBLE_DEVICES`` is honoured by index or UUID.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from preflight.probe.command import CommandRunner, run_command

QUERY = ("nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used", "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 20.0
MiB = 2**20


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One GPU's memory as the sizing needs it, in bytes."""

    index: int
    name: str
    total_bytes: int
    used_bytes: int = 0


class GpuMemoryError(ValueError):
    """nvidia-smi output that cannot be read with certainty."""


@dataclass(frozen=True, slots=True)
class GpuMemorySource:
    """The GPUs for sizing and where they came from, or why there are none."""

    gpus: tuple[GpuMemory, ...]
    source: str
    reason: str | None = None


def parse_query_gpu(text: str) -> list[tuple[GpuMemory, str]]:
    """Rows of ``index, uuid, name, memory.total, memory.used`` (MiB) -> (GpuMemory, uuid)."""
    rows: list[tuple[GpuMemory, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 5:
            raise GpuMemoryError(f"expected 5 comma-separated fields, got {len(fields)}: {line.strip()!r}")
        index, uuid, total, used = fields[0], fields[1], fields[-2], fields[-1]
        name = ", ".join(fields[2:-2])
        if not (index.isdigit() and total.isdigit() and used.isdigit()):
            raise GpuMemoryError(f"index or memory is not a whole number: {line.strip()!r}")
        rows.append((GpuMemory(int(index), name, int(total) * MiB, int(used) * MiB), uuid))
    return rows


def visible(rows: Sequence[tuple[GpuMemory, str]], env: Mapping[str, str]) -> list[GpuMemory]:
    """The rows ``CUDA_VISIBLE_DEVICES`` lets the job see (all of them when it is unset)."""
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return [gpu for gpu, _ in rows]
    wanted = [item.strip() for item in mask.split(",") if item.strip()]
    chosen: list[GpuMemory] = []
    for item in wanted:
        match = next((gpu for gpu, uuid in rows if item == str(gpu.index) or (len(item) > 4 and uuid.startswith(item))),
                     None)
        if match is None:
            break  # CUDA stops at the first entry it cannot resolve
        chosen.append(match)
    return chosen


def probe_gpu_memory(runner: CommandRunner = run_command, env: Mapping[str, str] | None = None) -> GpuMemorySource:
    """GPU memory from ``nvidia-smi``; no GPUs and a reason when it is missing or fails."""
    env = os.environ if env is None else env
    result = runner(list(QUERY), SMI_TIMEOUT_S)
    if not result.ok:
        return GpuMemorySource((), "nvidia-smi", f"no NVIDIA GPU visible: {result.describe_failure()}")
    try:
        rows = parse_query_gpu(result.stdout)
    except GpuMemoryError as exc:
        return GpuMemorySource((), "nvidia-smi", f"nvidia-smi output not understood: {exc}")
    gpus = visible(rows, env)
    if not gpus:
        return GpuMemorySource((), "nvidia-smi",
                               "no NVIDIA GPU visible to the job (nvidia-smi or CUDA_VISIBLE_DEVICES)")
    return GpuMemorySource(tuple(gpus), "nvidia-smi")


def from_inventory(inventory: object) -> GpuMemorySource:
    """Adapt the GPU inventory (objects with ``index``, ``name``, ``memory_total``, ``memory_used``)."""
    gpus: list[GpuMemory] = []
    for gpu in getattr(inventory, "gpus", ()) or ():
        total, used = getattr(gpu, "memory_total", None), getattr(gpu, "memory_used", None)
        if not isinstance(total, int) or isinstance(total, bool):
            return GpuMemorySource((), "gpu inventory", f"GPU {getattr(gpu, 'index', '?')} memory is unknown ({total})")
        gpus.append(GpuMemory(int(getattr(gpu, "index", len(gpus))), str(getattr(gpu, "name", "")), total,
                              used if isinstance(used, int) and not isinstance(used, bool) else 0))
    if not gpus:
        error = getattr(inventory, "error", None)
        cause = getattr(error, "cause", None) or "the inventory lists no GPU"
        return GpuMemorySource((), "gpu inventory", f"no NVIDIA GPU visible: {cause}")
    return GpuMemorySource(tuple(gpus), "gpu inventory")
