"""Catalogue entries: the host (shared memory, limits, disk, CPUs), the session and the memory fit."""

from __future__ import annotations

from preflight.codes.entry import Code, Kind

AREA = "Host, session and memory fit"

_SHM_FIX = ("In Docker run with `--ipc=host` or `--shm-size=8g`; in Kubernetes mount an `emptyDir` with "
            "`medium: Memory` at /dev/shm; on a host, remount it larger (`sudo mount -o remount,size=16G /dev/shm`).")

CODES = (
    Code("SHM_UNAVAILABLE",
         "/dev/shm is missing or its size cannot be read.",
         "NCCL's shared-memory transport and DataLoader worker processes pass data through /dev/shm; without it "
         "they fail ('unhandled system error', bus errors).",
         _SHM_FIX, kind=Kind.BLOCKER),
    Code("SHM_TOO_SMALL",
         "/dev/shm has less free space than this job needs.",
         "The job fails once NCCL or the DataLoader workers fill it (a bus error, 'No space left on device').",
         _SHM_FIX, kind=Kind.BLOCKER),
    Code("SHM_SMALL",
         "/dev/shm is smaller than 512 MiB (Docker's default is 64 MiB).",
         "NCCL and DataLoader workers need more in practice: 'unhandled system error' or a bus error mid-run.",
         _SHM_FIX, kind=Kind.BLOCKER),
    Code("SHM_FULL",
         "/dev/shm has less than 512 MiB free, probably segments left by earlier runs.",
         "The job's NCCL and DataLoader segments may not fit.",
         "`ls -la /dev/shm` and remove stale nccl-*/torch_* files whose processes are gone.", kind=Kind.COST),
    Code("MEMLOCK_LOW",
         "The locked-memory limit (ulimit -l) is finite and RDMA devices are present.",
         "NCCL's network transport registers buffers with the RDMA device and fails ('ibv_reg_mr failed') once "
         "the limit is reached.",
         "`ulimit -l unlimited` in the job's shell, `* - memlock unlimited` in /etc/security/limits.conf, or "
         "`--ulimit memlock=-1` for a container.", kind=Kind.COST),
    Code("CHECKPOINT_DIR_NOT_WRITABLE",
         "The checkpoint directory (--checkpoint-dir) cannot be written.",
         "The job trains until its first save and then crashes, losing everything since the start.",
         "Point the job's output at a writable disk, or fix the permissions or mount (`ls -ld`, `mount`).",
         kind=Kind.BLOCKER),
    Code("CHECKPOINT_DISK_TOO_SMALL",
         "The checkpoint disk has less free space than one checkpoint with optimizer state (from --model-params).",
         "The first save fails: hours of training lost at the first checkpoint.",
         "Mount a larger disk, save weights only, or save to object storage.", kind=Kind.BLOCKER),
    Code("CHECKPOINT_DISK_TIGHT",
         "The checkpoint disk holds one checkpoint but not two.",
         "A new checkpoint is written before the previous one is deleted, so the second save fails.",
         "Free space or use a larger disk.", kind=Kind.COST),
    Code("DISK_LOW",
         "Under 10 GiB free where checkpoints go (the model size is not known).",
         "Checkpoints, logs and caches may not fit; a failed save ends the job.",
         "Free space or mount a larger disk; pass --model-params to size one checkpoint.", kind=Kind.COST),
    Code("HOST_RESOURCES_PER_RANK_LOW",
         "Fewer than 2 CPU cores or less than 8 GiB RAM per rank (cgroup limits counted).",
         "Data loading and the Python side of each rank starve: the GPUs wait on the CPU.",
         "Use a VM with more vCPUs and RAM per GPU, lower DataLoader num_workers, or run fewer ranks.", kind=Kind.COST),
    Code("SESSION_NOT_DETACHED",
         "preflight runs in a bare SSH session: no tmux, screen, nohup or scheduler.",
         "A job started the same way dies with the SSH connection (SIGHUP), however long it has run.",
         "Start the job inside `tmux new -s train` or screen, or as `nohup torchrun ... > train.log 2>&1 &`; "
         "checkpoint often.", kind=Kind.COST),
    Code("LEFTOVER_TRAINING_PROCESSES",
         "Other training processes (torchrun, deepspeed, accelerate, train scripts, nccl-tests) are running.",
         "They hold GPU memory, CPUs and the rendezvous port: the job runs out of memory, slows down or cannot "
         "start its rendezvous.",
         "If stale, `kill <pid>` (then `kill -9` after a minute) and check `nvidia-smi` for memory they still hold.",
         kind=Kind.BLOCKER),
    Code("PREFLIGHT_RUN_IN_PROGRESS",
         "Another preflight run is in progress on this node.",
         "The two runs compete for GPUs and CPUs, so both runs' figures are disturbed.",
         "Let it finish (it stops by itself within its --timeout) and run again; never run two at once.",
         kind=Kind.BLOCKER),
    Code("RENDEZVOUS_PORT_IN_USE",
         "Something listens on port 29500, the default MASTER_PORT of torchrun, DeepSpeed and accelerate.",
         "A launch on the default port fails with 'address already in use'.",
         "Find the owner (`ss -ltnp 'sport = :29500'`) and stop it if stale, or launch with "
         "`torchrun --standalone` or `--master-port <free port>`.", kind=Kind.BLOCKER),
    Code("ENV_HYGIENE",
         "Variables are set that slow or break a job: CUDA_LAUNCH_BLOCKING, NCCL_DEBUG=INFO/TRACE, "
         "NCCL_P2P_DISABLE, NCCL_P2P_LEVEL=LOC, NCCL_SHM_DISABLE, blocking-wait, no memory caching, "
         "TORCH_DISTRIBUTED_DEBUG=DETAIL, or OMP_NUM_THREADS unset with several cores per rank.",
         "Each one costs speed in every step (a debugging setting left on is often several times slower).",
         "Unset the variables named (and delete them where they come from); export OMP_NUM_THREADS to the cores "
         "per rank.", kind=Kind.COST),
    Code("MEMORY_FIT_NEEDS_SHARDING",
         "The model (--model-params) does not fit per GPU with plain DDP, but a sharded strategy fits.",
         "Plain DDP keeps a full copy of weights, gradients and optimizer state on every GPU: it runs out of "
         "memory at the first step.",
         "Train with the strategy named (FSDP, ZeRO-1/2/3) or more sharding.", kind=Kind.BLOCKER),
    Code("MEMORY_FIT_NONE",
         "The model does not fit on these GPUs with any strategy, even full sharding.",
         "Every strategy runs out of GPU memory at the first step.",
         "Use more or larger GPUs, offload optimizer state to CPU/NVMe, pick a smaller model or a leaner "
         "precision (--bytes-per-param), or free memory other processes hold.", kind=Kind.BLOCKER),
)
