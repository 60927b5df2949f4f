"""Catalogue entries: the GPUs, NVML, the devices the job sees, and torch against the driver."""

from __future__ import annotations

from preflight.codes.entry import Code, Kind

AREA = "GPUs, NVML and the job's torch"

CODES = (
    Code("NO_NVIDIA_GPU",
         "No NVIDIA GPU anywhere: none on the PCI bus (sysfs vendor 0x10de), none in NVML, none seen by the "
         "job's torch.",
         "`torchrun --nproc-per-node=gpu` counts 0 GPUs and the job cannot start; a container started without the "
         "NVIDIA runtime looks exactly like this.",
         "Run on a GPU instance, or start the container with its GPUs (`docker run --gpus all`, the NVIDIA "
         "container runtime, the Kubernetes `nvidia.com/gpu` resource). To rehearse the distributed path on CPUs "
         "(gloo), run `preflight --cpu`.", kind=Kind.BLOCKER),
    Code("NO_GPU",
         "NVML starts (the driver is loaded) but lists no GPU.",
         "The job has no device to run on; a GPU that fell off the bus or was not passed into the container leaves "
         "a driver with nothing behind it.",
         "Run `nvidia-smi -L` and `sudo dmesg | grep -i xid`; in a container pass the GPUs through (`--gpus all`); "
         "a GPU that fell off the bus needs a reset or a reboot.", kind=Kind.BLOCKER),
    Code("NVML_LIBRARY_NOT_FOUND",
         "libnvidia-ml.so.1 cannot be loaded: no NVIDIA driver here, or a container started without the NVIDIA "
         "runtime.",
         "Without the driver's library no CUDA program starts; on a machine that should have GPUs this is a broken "
         "install or a missing runtime.",
         "Install the NVIDIA driver, or start the container with GPUs (`--gpus all`, nvidia-container-toolkit).",
         kind=Kind.BLOCKER),
    Code("NVML_BINDINGS_MISSING",
         "The Python package nvidia-ml-py (module pynvml) is not installed where preflight runs.",
         "preflight reads the GPUs' health through NVML; without the binding it cannot judge any GPU (the job "
         "itself does not need it).",
         "`pip install nvidia-ml-py` in preflight's environment (never the deprecated `pynvml` distribution).",
         kind=Kind.BLOCKER),
    Code("NVML_DRIVER_NOT_LOADED",
         "NVML's library is there but the NVIDIA kernel module is not loaded.",
         "No process can open a GPU until the module loads: every CUDA call in the job fails.",
         "`sudo modprobe nvidia` and read `sudo dmesg | grep -i -e nvrm -e nvidia`; Secure Boot rejecting an "
         "unsigned module is a common cause.", kind=Kind.BLOCKER),
    Code("NVML_DRIVER_LIBRARY_MISMATCH",
         "The driver's user-space library and the loaded kernel module are different versions (the driver was "
         "upgraded without a reboot).",
         "CUDA initialisation fails with 'driver/library version mismatch': the job cannot use any GPU.",
         "Reboot, or stop every GPU process and reload the modules (`sudo rmmod nvidia_uvm nvidia_drm "
         "nvidia_modeset nvidia && sudo modprobe nvidia`).", kind=Kind.BLOCKER),
    Code("NVML_NO_PERMISSION",
         "NVML may not open the GPU device files (/dev/nvidia*).",
         "A job run by the same user cannot open the GPUs either.",
         "Run as a user allowed to open /dev/nvidia* (often the `video` group), or give the container the GPU "
         "devices.", kind=Kind.BLOCKER),
    Code("NVML_INIT_FAILED",
         "nvmlInit failed with an NVML error preflight has no specific explanation for.",
         "If NVML cannot start, CUDA usually cannot either: the driver installation is suspect.",
         "Run `nvidia-smi`; if it fails too, reinstall or repair the driver; the evidence holds NVML's own error.",
         kind=Kind.BLOCKER),
    Code("NVML_TIMEOUT",
         "The NVML probe (a child process) did not answer within --nvml-timeout and was killed.",
         "A GPU stuck in reset or a wedged driver hangs every process that touches it, the job's first CUDA call "
         "included.",
         "Run `nvidia-smi` (it will hang too) and read `sudo dmesg | grep -i -e xid -e nvrm`; a wedged driver needs "
         "a reboot.", kind=Kind.HARDWARE),
    Code("NVML_PROBE_FAILED",
         "The NVML probe process failed for a reason other than NVML itself (it crashed or answered nonsense).",
         "preflight could not read the GPUs' state, so nothing about their health is known.",
         "Run `nvidia-smi -q`; if it answers, report the preflight failure with the evidence shown.",
         kind=Kind.BLOCKER),
    Code("NVML_QUERY_FAILED",
         "NVML started but a query failed: counting the GPUs (FAIL) or reading one field of one GPU (ERROR, the "
         "check cannot decide).",
         "A GPU whose state cannot be read is not known to be healthy; failing queries often precede an Xid error.",
         "Run `nvidia-smi -q -i <index>` and read `sudo dmesg | grep -i xid`; the evidence names the failed query.",
         kind=Kind.BLOCKER),
    Code("GPU_LOST",
         "NVML reports the GPU is lost: it fell off the bus (usually Xid 79).",
         "Any rank on that GPU crashes, and NCCL collectives on every other rank hang until the timeout.",
         "Read `sudo dmesg | grep -i xid`; reset with `sudo nvidia-smi -r -i <index>` or reboot; a GPU that drops "
         "again needs service.", kind=Kind.HARDWARE),
    Code("GPU_COMPUTE_PROHIBITED",
         "The GPU's compute mode is Prohibited: no process may create a CUDA context on it.",
         "The job's rank on that GPU fails at its first CUDA call, and its peers hang in the first collective.",
         "`sudo nvidia-smi -i <index> -c DEFAULT` (or ask the provider: a scheduler may set it on purpose).",
         kind=Kind.BLOCKER),
    Code("GPU_EXCLUSIVE_BUSY",
         "The GPU's compute mode is Exclusive_Process and another process already holds a context on it.",
         "Only one process may use the GPU: the job's rank cannot create its context (CUDA error 46, \"all "
         "CUDA-capable devices are busy or unavailable\", NVIDIA/DIGITS#2005).",
         "Stop the other process (`nvidia-smi --query-compute-apps=pid --format=csv -i <index>`), or set the default "
         "mode: `sudo nvidia-smi -i <index> -c DEFAULT`.", kind=Kind.BLOCKER),
    Code("GPU_IN_USE",
         "Other processes hold memory on a GPU the job will use (WARN; FAIL at 10% of its memory or more).",
         "The job gets less memory than planned (out-of-memory at the first large batch) and shares the GPU's "
         "compute, so the step time suffers on every rank.",
         "Stop them: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv -i <index>`, then `kill <pid>`; "
         "inside a container these are host pids.", kind=Kind.BLOCKER),
    Code("GPU_MEMORY_IN_USE_UNSEEN",
         "Memory is in use on the GPU (over 5% and 1 GiB) but no process is visible from here.",
         "Another container or host process holds it (NVML cannot see across pid namespaces): the job gets less "
         "memory and shares compute.",
         "Run `nvidia-smi` on the host and stop the holder, or use another GPU.", kind=Kind.BLOCKER),
    Code("GPU_ECC_UNCORRECTABLE",
         "The GPU has uncorrectable ECC errors since the driver loaded.",
         "Uncorrectable errors corrupt data or crash the process (Xid 48/63/64); a long job on this GPU will "
         "likely die or silently diverge.",
         "Do not run on that GPU: reset it (`sudo nvidia-smi -r -i <index>`) or reboot and inspect "
         "`nvidia-smi -q -d ECC,ROW_REMAPPER`; errors that come back mean RMA.", kind=Kind.HARDWARE),
    Code("GPU_ECC_HISTORY",
         "Uncorrectable ECC errors over the GPU's life, none since the driver loaded.",
         "Memory that failed before may fail again; alone it does not stop the job.",
         "Check `nvidia-smi -q -d ECC,ROW_REMAPPER -i <index>` shows no pending remap; report a growing count to the "
         "provider.", kind=Kind.HARDWARE),
    Code("GPU_ROW_REMAP_FAILED",
         "A row remap failed: the GPU has no spare memory rows left (Ampere and later).",
         "Bad memory can no longer be repaired: uncorrectable errors will reach the job.",
         "The GPU needs replacement (RMA): move the job to another node and report it.", kind=Kind.RMA),
    Code("GPU_ROW_REMAP_PENDING",
         "A row remap is pending; it takes effect only after a GPU reset.",
         "Until the reset the faulty row is still in use and can corrupt the job's data.",
         "Stop the GPU's processes and reset it (`sudo nvidia-smi -r -i <index>`), or reboot.", kind=Kind.HARDWARE),
    Code("GPU_RETIRED_PAGES_PENDING",
         "A memory page retirement is pending (GPUs before Ampere); it takes effect after a reset.",
         "The bad page stays in use until then and can corrupt data or crash a rank.",
         "Reset the GPU (`sudo nvidia-smi -r -i <index>`) or reboot.", kind=Kind.HARDWARE),
    Code("GPU_MIG_IN_MULTI_GPU_JOB",
         "MIG (Multi-Instance GPU) is on on a GPU of a job of more than one rank (a MIG slice among full GPUs, or "
         "several slices).",
         "A CUDA process enumerates one MIG device and MIG devices have no peer-to-peer access (MIG user guide, "
         "pytorch/pytorch#92315): the `--nproc-per-node=gpu` ranks on that GPU fail (invalid device ordinal) or "
         "NCCL stalls; the memory fit is the slice's, not the GPU's.",
         "If the job needs whole GPUs: `sudo nvidia-smi -i <index> -mig 0`, then reset the GPU or reboot; or keep "
         "the job off it (CUDA_VISIBLE_DEVICES listing full GPUs), or run one rank per slice "
         "(CUDA_VISIBLE_DEVICES=MIG-<uuid>).", kind=Kind.BLOCKER),
    Code("GPU_MIG_PENDING",
         "MIG is set to turn on at the next GPU reset.",
         "A reset during or before the job (a recovery, a reboot) turns the GPU into slices.",
         "`sudo nvidia-smi -i <index> -mig 0` to cancel it.", kind=Kind.BLOCKER),
    Code("GPU_PERSISTENCE_OFF",
         "Persistence mode is off: the driver tears the GPU's state down when no process holds it.",
         "Every process start re-initialises the GPU (seconds per GPU), and tools see the GPU come and go; it "
         "costs time, not correctness.",
         "`sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`).", kind=Kind.COST),
    Code("GPU_THROTTLED_AT_IDLE",
         "The GPU's clocks are held down by a thermal or power reason before any load.",
         "A GPU slowed at idle is slower still under load, and in DDP/FSDP every step waits for the slowest GPU.",
         "Check `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i <index>` (a lowered power limit shows there); "
         "hardware slowdown means airflow or power trouble on the host.", kind=Kind.HARDWARE),
    Code("GPU_PCIE_LINK_DEGRADED",
         "Under load the GPU's PCIe link runs below its maximum generation or width.",
         "Host-to-device copies (data loading, offload, PCIe all-reduce without NVLink) run at a fraction of their "
         "speed.",
         "Reseat the GPU or riser and check the slot's PCIe settings in the BIOS; compare `nvidia-smi -q -d PCI` "
         "while a copy runs.", kind=Kind.HARDWARE),
    Code("MIXED_GPUS",
         "The job's GPUs are not all one model with one memory size.",
         "Every step waits for the slowest GPU and the memory plan is limited by the smallest.",
         "Select GPUs of one model (CUDA_VISIBLE_DEVICES with the UUIDs from `nvidia-smi -L`).", kind=Kind.COST),
    Code("GPU_COUNT_MISMATCH",
         "The job will see fewer (or other) GPUs than --expect-gpus says, or none.",
         "`--nproc-per-node=gpu` starts one rank per visible GPU: the job runs on fewer GPUs than paid for, or its "
         "world size differs from the plan.",
         "Compare `nvidia-smi -L` with the instance type (a GPU missing from NVML fell off the bus); otherwise fix "
         "or unset CUDA_VISIBLE_DEVICES, or pass the right --expect-gpus.", kind=Kind.BLOCKER),
    Code("TORCH_CPU_BUILD",
         "The job's torch is a CPU-only (or ROCm) build on a node with NVIDIA GPUs.",
         "It cannot use the GPUs: torch.cuda.device_count() is 0 and a `--nproc-per-node=gpu` job does not start.",
         "Install a CUDA build of torch the driver supports (`pip install torch --index-url "
         "https://download.pytorch.org/whl/cuXYZ`).", kind=Kind.BLOCKER),
    Code("TORCH_NOT_IMPORTABLE",
         "The job's interpreter cannot import torch.",
         "The training job cannot start at all.",
         "Install torch in the job's environment (or point --python at the job's interpreter).", kind=Kind.BLOCKER),
    Code("JOB_PYTHON_UNUSABLE",
         "The job's interpreter gave no answer a Python interpreter gives: it crashed, hung past its deadline or "
         "printed something else than the probe's answer.",
         "The job is started with this interpreter (torchrun, its ranks), so it cannot start either.",
         "Run the interpreter by hand (`PYTHON -c 'import torch'`) to see what it does, and point --python at the "
         "interpreter the job really runs (by default preflight asks its own).", kind=Kind.BLOCKER),
    Code("TORCH_DEVICE_COUNT_FAILED",
         "The job's torch (a CUDA build) could not count the GPUs: CUDA initialisation failed.",
         "Every rank fails at its first CUDA call.",
         "Run `python -c 'import torch; print(torch.cuda.device_count())'` to see the error; a driver older than "
         "torch's CUDA build is the usual cause.", kind=Kind.BLOCKER),
    Code("DEVICE_COUNT_DISAGREES",
         "torch counts a different number of GPUs than NVML with CUDA_VISIBLE_DEVICES predicts.",
         "`torchrun --nproc-per-node=gpu` starts torch's count of ranks, so the job's world size is not what the "
         "node offers.",
         "Compare `nvidia-smi -L` with torch's count in the job's environment; check CUDA_VISIBLE_DEVICES is "
         "exported the same way and that no GPU fails CUDA init (fabric manager down on NVSwitch gives error 802).",
         kind=Kind.BLOCKER),
    Code("CUDA_VISIBLE_DEVICES_EMPTY",
         "CUDA_VISIBLE_DEVICES is set but selects no GPU (empty, or only invalid entries).",
         "CUDA hides every GPU: the job sees none and cannot start on GPUs.",
         "Unset it or list the GPUs; an empty value usually comes from a scheduler variable that was not set.",
         kind=Kind.BLOCKER),
    Code("CUDA_VISIBLE_DEVICES_MALFORMED",
         "CUDA_VISIBLE_DEVICES has entries CUDA reads differently from how they are written (CUDA stops at the "
         "first invalid entry).",
         "The job runs on fewer or other GPUs than intended; the summary says which ones CUDA will use.",
         "Write a plain comma-separated list of indices or GPU UUIDs (`nvidia-smi -L`), or unset it.",
         kind=Kind.BLOCKER),
    Code("CUDA_DEVICE_ORDER_INVALID",
         "CUDA_DEVICE_ORDER has a value CUDA does not know.",
         "CUDA falls back to fastest-first numbering, which may not match nvidia-smi's indices.",
         "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`.", kind=Kind.BLOCKER),
    Code("CUDA_DEVICE_ORDER_TRAP",
         "CUDA_VISIBLE_DEVICES selects GPUs by index while CUDA numbers GPUs fastest first, not by PCI bus as "
         "nvidia-smi does.",
         "On a node with mixed GPUs the indices name other GPUs than the ones nvidia-smi shows, so the job runs "
         "on the wrong GPUs.",
         "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or select GPUs by UUID (CUDA_VISIBLE_DEVICES=GPU-...).",
         kind=Kind.BLOCKER),
    Code("DRIVER_TOO_OLD_FOR_TORCH",
         "The NVIDIA driver is older than the CUDA version the job's torch was built for needs.",
         "CUDA initialisation fails ('driver version is insufficient'): the job cannot use the GPUs.",
         "Upgrade the driver to the minimum named, or install a torch build for a CUDA the driver supports.",
         kind=Kind.BLOCKER),
    Code("TORCH_ARCH_UNSUPPORTED",
         "The job's torch carries no kernels for this GPU's compute capability and no PTX that can be compiled "
         "for it.",
         "The first kernel launch fails with 'no kernel image is available for execution on the device'.",
         "Install a torch build whose arch list includes the GPU (a newer CUDA wheel for a new GPU).",
         kind=Kind.BLOCKER),
    Code("TORCH_ARCH_PTX_DRIVER_TOO_OLD",
         "torch has no cubin for this GPU, only PTX, and the driver is too old to JIT-compile that PTX.",
         "Kernel launches fail: the job cannot run on the GPU.",
         "Upgrade the driver to support torch's CUDA, or install a torch build carrying kernels for the GPU.",
         kind=Kind.BLOCKER),
    Code("TORCH_ARCH_PTX_JIT",
         "torch has no cubin for this GPU; the driver will JIT-compile torch's PTX at startup.",
         "The first launch spends minutes compiling every kernel on every rank (cached afterwards in "
         "~/.nv/ComputeCache).",
         "Install a torch build carrying kernels for the GPU, or raise CUDA_CACHE_MAXSIZE so the cache holds.",
         kind=Kind.COST),
)
