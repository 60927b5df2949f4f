"""Host resources a job needs: /dev/shm, locked memory, checkpoint disk, CPU cores and RAM per rank.

Thresholds, each with its source:

* ``/dev/shm``: WARN below 512 MiB, DeepSpeed ``ds_report``'s threshold (``env_report.py``);
  Docker's default is 64 MiB, and NCCL fails with "unhandled system error" / bus errors when its
  SHM segments do not fit (NVIDIA/nccl#290, pytorch/torchtitan#853). FAIL below what the job is
  known to need, when a caller measured it.
* ``ulimit -l``: only RDMA (InfiniBand, RoCE, EFA) registers memory against this limit; CUDA's
  pinned memory does not. WARN when finite and an RDMA device is present (NVIDIA's container
  guidance is ``--ulimit memlock=-1``).
* Checkpoint disk: a checkpoint with optimizer state takes ``weights + master + optimizer`` bytes
  per parameter (14 of the default 18: gradients are not saved). FAIL below one checkpoint, WARN
  below two (the next one is written before the previous one is deleted).
* CPU and RAM per rank: WARN below 2 cores or 8 GiB per rank (the main process plus DataLoader
  workers, and each rank's copy of the batch pipeline).
"""

from __future__ import annotations

from preflight.outcome import Metric, Verdict, error, fail, passed, warn
from preflight.parse.quantity import format_bytes
from preflight.probe.host import ContainerFacts, CpuMemoryFacts, DiskFacts, MemlockFacts, ShmFacts

MiB = 2**20
GiB = 2**30
SHM_WARN_BYTES = 512 * MiB
DISK_LOW_BYTES = 10 * GiB
MIN_CORES_PER_RANK = 2
MIN_RAM_PER_RANK_BYTES = 8 * GiB


def judge_shm(shm: ShmFacts, container: ContainerFacts, required_bytes: int | None = None) -> Verdict:
    """/dev/shm: FAIL missing or below the job's need, WARN below 512 MiB or nearly full."""
    metrics = tuple(
        Metric(name, value, "B")
        for name, value in (("shm_total_bytes", shm.total_bytes), ("shm_free_bytes", shm.free_bytes))
        if value is not None
    )
    fix = _shm_fix(container)
    if shm.total_bytes is None or shm.free_bytes is None:
        return fail("SHM_UNAVAILABLE", f"{shm.path} cannot be used: {shm.problem}",
                    f"NCCL's shared-memory transport and DataLoader workers need {shm.path}. {fix}")
    sizes = f"{shm.path} is {_mib(shm.total_bytes)} with {_mib(shm.free_bytes)} free"
    if required_bytes is not None and shm.free_bytes < required_bytes:
        return fail("SHM_TOO_SMALL", f"{sizes}; this job needs {_mib(required_bytes)}",
                    f"Give the job more shared memory. {fix}", metrics=metrics)
    if shm.total_bytes < SHM_WARN_BYTES:
        return warn("SHM_SMALL", f"{sizes}, below the 512 MiB NCCL and DataLoader workers need in practice",
                    f"NCCL can fail with 'unhandled system error' or a bus error. {fix}", metrics=metrics)
    if shm.free_bytes < SHM_WARN_BYTES:
        return warn("SHM_FULL", f"{sizes}: less than 512 MiB left, probably segments left by earlier runs",
                    f"List them with `ls -la {shm.path}` and remove stale nccl-*/torch_* files whose "
                    "processes are gone.", metrics=metrics)
    return passed(sizes + (f" (inside {container.kind})" if container.in_container else ""), metrics=metrics)


def judge_memlock(memlock: MemlockFacts, container: ContainerFacts) -> Verdict:
    """ulimit -l: WARN when finite and an RDMA device needs to register memory."""
    if memlock.problem:
        return error(f"cannot read the locked-memory limit: {memlock.problem}")
    if memlock.soft_bytes is None:
        return passed("locked-memory limit (ulimit -l) is unlimited")
    limit = _kib(memlock.soft_bytes)
    metrics = (Metric("memlock_soft_bytes", memlock.soft_bytes, "B"),)
    if not memlock.rdma_devices:
        return passed(f"locked-memory limit is {limit}; no RDMA device here, so NCCL registers no memory "
                      "against it (it matters for InfiniBand, RoCE and EFA)", metrics=metrics)
    devices = ", ".join(memlock.rdma_devices)
    if container.in_container:
        fix = ("Restart the container with `--ulimit memlock=-1` "
               "(Kubernetes: raise LimitMEMLOCK for containerd on the node).")
    elif memlock.hard_bytes is None:
        fix = "Run `ulimit -l unlimited` in the shell that starts the job (the hard limit allows it)."
    else:
        fix = ("Add `* - memlock unlimited` to /etc/security/limits.conf (or LimitMEMLOCK=infinity for a "
               "systemd service) and log in again.")
    return warn("MEMLOCK_LOW", f"locked-memory limit is {limit} with RDMA devices {devices}: NCCL's network "
                "transport fails to register buffers ('ibv_reg_mr failed') once it is reached", fix, metrics=metrics)


def checkpoint_bytes(params: int, bytes_per_param: float) -> int:
    """Size of one checkpoint with optimizer state."""
    return int(params * bytes_per_param)


def judge_checkpoint_disk(disk: DiskFacts, needed_bytes: int | None = None) -> Verdict:
    """Checkpoint directory: writable, and room for two checkpoints when the model size is known."""
    where = disk.path if disk.exists else f"{disk.path} (does not exist yet; checked {disk.checked_path})"
    if disk.writable is False:
        return fail("CHECKPOINT_DIR_NOT_WRITABLE", f"checkpoints cannot be written to {where}: {disk.problem}",
                    "Point --checkpoint-dir (and the job's output directory) at a writable disk, or fix its "
                    "permissions/mount (`ls -ld`, `mount | grep` the path).")
    if disk.free_bytes is None:
        return error(f"cannot read free space of {where}: {disk.problem}")
    free = format_bytes(disk.free_bytes)
    metrics = (Metric("checkpoint_disk_free_bytes", disk.free_bytes, "B"),)
    if needed_bytes is not None:
        need = format_bytes(needed_bytes)
        if disk.free_bytes < needed_bytes:
            return fail("CHECKPOINT_DISK_TOO_SMALL", f"{free} free in {where}; one checkpoint with optimizer "
                        f"state needs {need}", "Mount a larger disk for checkpoints, save weights only, or save to "
                        "object storage.", metrics=metrics)
        if disk.free_bytes < 2 * needed_bytes:
            return warn("CHECKPOINT_DISK_TIGHT", f"{free} free in {where}: room for one {need} checkpoint but not "
                        "two", "Free space or use a larger disk: a new checkpoint is written before the previous one "
                        "is deleted, so the second save fails.", metrics=metrics)
        return passed(f"{free} free in {where}, room for {disk.free_bytes // needed_bytes} checkpoints of {need}",
                      metrics=metrics)
    if disk.free_bytes < DISK_LOW_BYTES:
        return warn("DISK_LOW", f"only {free} free in {where}",
                    "Free space or mount a larger disk; pass --model-params to size one checkpoint.", metrics=metrics)
    return passed(f"{free} free in {where}, writable (pass --model-params to compare with a checkpoint)",
                  metrics=metrics)


def judge_cpu_memory(facts: CpuMemoryFacts, ranks: int) -> Verdict:
    """CPU cores and RAM per rank for data loading: reported, WARN when very low."""
    ranks = max(1, ranks)
    cpus, ram = facts.effective_cpus, facts.effective_memory_bytes
    if cpus is None or ram is None:
        return error("cannot read the CPU count or /proc/meminfo")
    per_rank_cpus, per_rank_ram = cpus / ranks, ram // ranks
    limited = [] if facts.cgroup_memory_limit_bytes is None else [f"cgroup memory limit {_gib(ram)}"]
    if facts.cgroup_cpu_limit is not None:
        limited.append(f"cgroup CPU quota {facts.cgroup_cpu_limit:g}")
    summary = (f"{cpus} CPU cores and {_gib(ram)} RAM for {ranks} rank{'s' if ranks > 1 else ''}: "
               f"{per_rank_cpus:g} core{'' if per_rank_cpus == 1 else 's'} and {_gib(per_rank_ram)} per rank"
               + (f" ({', '.join(limited)})" if limited else ""))
    metrics = (Metric("cpu_cores_per_rank", round(per_rank_cpus, 2), "cores"),
               Metric("ram_bytes_per_rank", per_rank_ram, "B"))
    low = []
    if per_rank_cpus < MIN_CORES_PER_RANK:
        low.append(f"fewer than {MIN_CORES_PER_RANK} cores")
    if per_rank_ram < MIN_RAM_PER_RANK_BYTES:
        low.append(f"less than {_gib(MIN_RAM_PER_RANK_BYTES)} RAM")
    if low:
        return warn("HOST_RESOURCES_PER_RANK_LOW", f"{summary}: {' and '.join(low)} per rank",
                    "Data loading will starve the GPUs: use a VM with more vCPUs/RAM per GPU, lower DataLoader "
                    "num_workers, or run fewer ranks.", metrics=metrics)
    return passed(summary, metrics=metrics)


def _shm_fix(container: ContainerFacts) -> str:
    """How to enlarge /dev/shm here."""
    if container.kind == "kubernetes":
        return "Mount an emptyDir with `medium: Memory` (and a sizeLimit) at /dev/shm in the pod spec."
    if container.in_container:
        return "Restart the container with `--ipc=host` or `--shm-size=16g`."
    return "Enlarge it: `sudo mount -o remount,size=16G /dev/shm` (persist it in /etc/fstab)."


def _mib(value: int) -> str:
    """Bytes as MiB (or GiB when large)."""
    return _gib(value) if value >= GiB else f"{value / MiB:,.0f} MiB"


def _gib(value: int | float) -> str:
    """Bytes as GiB with one decimal."""
    return f"{value / GiB:,.1f} GiB"


def _kib(value: int) -> str:
    """``ulimit -l`` figures are KiB: 8192 KiB (8.0 MiB)."""
    return f"{value // 1024:,} KiB ({value / MiB:,.1f} MiB)"
