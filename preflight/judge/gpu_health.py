"""Judges of the GPU inventory: NVML itself, each GPU's health, and the mix of models.

Per-GPU judges take one :class:`GpuInfo` so a check can be parametrized per GPU and name it in
every summary. A fact the GPU cannot report gives SKIP, a failed query gives ERROR; neither is
ever taken for "healthy". One failure, one finding: a GPU that fell off the bus is the FAIL of
:func:`judge_gpu_responds`; every other judge SKIPs it saying "GPU n is lost".
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from functools import partial

from preflight.node.devices import CudaDevice
from preflight.outcome import Status, Verdict, View, error, fail, passed, skip, warn
from preflight.probe.nvml import COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_MODE_NAMES, COMPUTE_PROHIBITED, Absent
from preflight.probe.nvml_snapshot import MIB, THROTTLE_REASON_BITS, GpuInfo, NvmlSnapshot, decode_clock_event_reasons

# NVML init failures that only mean "this is not a GPU machine" (SKIP unless GPUs are expected).
NOT_A_GPU_MACHINE = ("NVML_LIBRARY_NOT_FOUND", "NVML_BINDINGS_MISSING")

BUSY_FAIL_FRACTION = 0.10  # other processes holding >= 10% of a GPU's memory: the job will OOM or crawl
UNSEEN_FLOOR_FRACTION = 0.05  # used memory above 5% (at least 1 GiB) with no process listed
UNSEEN_FLOOR_BYTES = 1024 * MIB
DRIVER_RESERVE_BOUND = 0.02
"""What the driver keeps for itself on an idle GPU, at most: 516 of 81559 MiB on H100/H800, 450 of
46068 on RTX A6000 (``nvidia-smi -q`` "Reserved", shared/fixtures/smi_q), about 904 of 81920 on
A100 (rust-nvml/nvml-wrapper#57): 0.6-1.1 %. A driver before 510 has no reserved-memory query and
counts the reserve in "used" (nvml.h, nvmlMemory_t), so that much of "used" is never another process."""


def no_gpu_reason(inventory: NvmlSnapshot) -> str | None:
    """Why per-GPU checks cannot run (used as their SKIP reason), or None when NVML lists GPUs."""
    return inventory.unavailable


NO_GPU_FIX = ("Start the job on a GPU instance; in a container, start it with the GPUs (`docker run --gpus all`, "
              "the NVIDIA container runtime, or the Kubernetes `nvidia.com/gpu` resource). To rehearse the "
              "distributed path on this machine's CPUs instead (gloo ranks), run `preflight --cpu`.")


def judge_gpu_presence(pci_gpus: int, nvml_gpus: int, torch_gpus: int, cpu_rehearsal: bool) -> Verdict:
    """NOT READY on a machine with no NVIDIA GPU at all (sysfs, NVML and torch agree), unless a CPU
    rehearsal was asked for: a ``--nproc-per-node=gpu`` job cannot start there (torchrun counts 0)."""
    found = max(pci_gpus, nvml_gpus, torch_gpus)
    if cpu_rehearsal:
        extra = f"; {found} NVIDIA GPU(s) are here but not used" if found else ""
        return passed(f"a CPU rehearsal was asked for (--cpu): the distributed checks run on gloo CPU ranks{extra}")
    if found:
        return passed(f"NVIDIA GPUs here: {pci_gpus} on the PCI bus, {nvml_gpus} listed by NVML, {torch_gpus} seen "
                      "by the job's torch")
    return fail("NO_NVIDIA_GPU", "no NVIDIA GPU on this machine (none on the PCI bus, none in NVML, none in torch): "
                "a `torchrun --nproc-per-node=gpu` job cannot start here", NO_GPU_FIX)


def judge_nvml(inventory: NvmlSnapshot, expect_gpus: int | None, pci_gpus: int = 0,
               job_gpus: Sequence[GpuInfo] | None = None) -> Verdict:
    """NVML starts and lists GPUs; a missing library is SKIP on a machine nobody said had GPUs. A lost GPU
    outside ``job_gpus`` is a fact in the summary (the job's own are test_gpu_responds' FAILs)."""
    problem = inventory.error
    if problem is not None:
        if problem.code in NOT_A_GPU_MACHINE and expect_gpus is None and pci_gpus == 0:
            return skip(f"no NVIDIA GPU visible: {problem.cause}", evidence={"nvml": problem.nvml_error})
        wanted = f" (expected {expect_gpus} GPUs)" if expect_gpus else ""
        if pci_gpus:
            wanted += f"; {pci_gpus} NVIDIA GPU(s) are on the PCI bus"
        what = "NVML hangs" if problem.code == "NVML_TIMEOUT" else "NVML cannot start"
        return fail(
            problem.code,
            f"{what}: {problem.cause}{wanted}",
            problem.remediation,
            evidence={"nvml": problem.nvml_error},
        )
    if not inventory.gpus:
        return fail(
            "NO_GPU",
            f"NVML (driver {inventory.driver_version}) starts but lists no GPU",
            "Run `nvidia-smi -L` and `sudo dmesg | grep -i xid`; in a container, pass the GPUs through "
            "(--gpus all). A GPU that fell off the bus needs a reset or a reboot.",
        )
    cuda = inventory.cuda_driver_version_text or "unknown"
    outside = [g.index for g in inventory.gpus if g.gpu_lost and g not in job_gpus] if job_gpus is not None else []
    aside = "".join(f"; GPU {i} is lost (fell off the bus); not used by this job" for i in outside)
    return passed(
        f"NVML sees {len(inventory.gpus)} GPU(s); driver {inventory.driver_version}, driver CUDA {cuda}{aside}",
        details={"backend": inventory.label, "nvml_walk_s": round(inventory.duration_s, 3)},
    )


def lost_skip(gpu: GpuInfo) -> Verdict | None:
    """SKIP naming a lost GPU (its one finding is :func:`judge_gpu_responds`'s), None for a GPU that answers."""
    if not gpu.gpu_lost:
        return None
    return skip(f"GPU {gpu.index} is lost: nothing else can be read from it (see test_gpu_responds)")


def _query_failed(gpu: GpuInfo, *fields: str) -> Verdict | None:
    """SKIP for a lost GPU; ERROR naming the GPU when one of ``fields`` could not be read."""
    lost = lost_skip(gpu)
    if lost is not None:
        return lost
    failed = [name for name in fields if name in gpu.query_errors]
    if not failed:
        return None
    detail = "; ".join(gpu.query_errors[name] for name in failed)
    return error(f"{gpu.label}: NVML query failed: {detail}", code="NVML_QUERY_FAILED")


def judge_gpu_responds(gpu: GpuInfo) -> Verdict:
    """Every NVML query answers; GPU_IS_LOST (fell off the bus, XID 79) is FAIL."""
    if gpu.gpu_lost:
        where = f" ({gpu.pci_bus_id})" if isinstance(gpu.pci_bus_id, str) else ""
        return fail(
            "GPU_LOST",
            f"GPU {gpu.index}{where}: NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus; a job on it fails at its "
            "first CUDA call",
            f"Look at it with `nvidia-smi -q -i {gpu.index}` and `sudo dmesg | grep -i xid` (XID 79 = fallen off the "
            f"bus); reset it with `sudo nvidia-smi -r -i {gpu.index}` (no process on it) or reboot; if it does not "
            "come back, or comes back and falls off again, open a ticket with the provider naming the GPU's bus id "
            "(the node needs service).",
            evidence={"nvml": "\n".join(f"{k}: {v}" for k, v in gpu.query_errors.items())},
        )
    if gpu.query_errors:
        detail = "; ".join(f"{k}: {v}" for k, v in gpu.query_errors.items())
        return error(f"{gpu.label}: some NVML queries failed: {detail}", code="NVML_QUERY_FAILED")
    return passed(f"{gpu.label} answers every NVML query")


def judge_gpu_busy(gpu: GpuInfo, own_pids: Collection[int] = (), fail_fraction: float = BUSY_FAIL_FRACTION) -> Verdict:
    """No other process holds memory on the GPU (WARN small holders, FAIL at ``fail_fraction``).

    The driver's own reserve is never "another process": it is reported apart (``memory_reserved_bytes``)
    by drivers 510+, and with an older driver, whose "used" includes it, up to
    :data:`DRIVER_RESERVE_BOUND` of the GPU is set aside before judging.
    """
    failed = _query_failed(gpu, "memory", "processes")
    if failed:
        return failed
    total, used, reserved = gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_reserved_bytes
    if isinstance(total, Absent) or isinstance(used, Absent):
        return skip(f"{gpu.label}: memory use is not reported here")
    if isinstance(reserved, int):
        held = used
        share = f"{used // MIB:,} of {total // MIB:,} MiB in use, {reserved // MIB:,} MiB reserved by the driver"
    else:
        held = max(0, used - int(DRIVER_RESERVE_BOUND * total))
        share = f"{used // MIB:,} of {total // MIB:,} MiB in use, the driver's own reserve included (driver before 510)"
    others = [] if isinstance(gpu.processes, Absent) else [p for p in gpu.processes if p.pid not in own_pids]
    act = fail if held >= fail_fraction * total else warn
    if others and COMPUTE_EXCLUSIVE_PROCESS in _compute_modes(gpu):
        return skip(f"{gpu.label}: another process holds it in compute mode Exclusive_Process, so the job cannot "
                    "use it at all (see test_gpu_compute_mode); " + share)
    if others:
        listed = ", ".join(
            f"pid {p.pid} ({'?' if p.used_memory_bytes is None else f'{p.used_memory_bytes // MIB:,}'} MiB)"
            for p in others
        )
        return act(
            "GPU_IN_USE",
            f"{gpu.label}: {len(others)} other process(es) on it: {listed}; {share}",
            f"Stop them before the run: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv -i {gpu.index}`, "
            "then `kill <pid>`. Inside a container these are host pids: stop them on the host.",
            details={"pids": [p.pid for p in others]},
        )
    if held >= max(UNSEEN_FLOOR_BYTES, UNSEEN_FLOOR_FRACTION * total):
        return act(
            "GPU_MEMORY_IN_USE_UNSEEN",
            f"{gpu.label}: {share} but no process is visible from here",
            "Another container or a host process holds it (NVML cannot see across pid namespaces): run "
            "`nvidia-smi` on the host and stop it, or use another GPU.",
        )
    return passed(f"{gpu.label}: no other process; {share}")


def judge_ecc(gpu: GpuInfo) -> Verdict:
    """No uncorrectable ECC error since the driver loaded (FAIL); lifetime ones alone are WARN."""
    failed = _query_failed(gpu, "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate")
    if failed:
        return failed
    volatile, aggregate = gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate
    if gpu.ecc_enabled is False:
        return skip(f"{gpu.label}: ECC is off, so there are no error counters to read")
    if isinstance(volatile, Absent):
        return skip(f"{gpu.label}: ECC error counters: {volatile}")
    if volatile > 0:
        return fail(
            "GPU_ECC_UNCORRECTABLE",
            f"{gpu.label}: {volatile} uncorrectable ECC error(s) since the driver loaded",
            f"Do not run on GPU {gpu.index}: stop its processes and reset it (`sudo nvidia-smi -r -i {gpu.index}`) "
            f"or reboot; inspect `nvidia-smi -q -d ECC,ROW_REMAPPER -i {gpu.index}`. Errors that come back mean RMA.",
            details={"volatile": volatile, "aggregate": aggregate},
        )
    if isinstance(aggregate, int) and aggregate > 0:
        return warn(
            "GPU_ECC_HISTORY",
            f"{gpu.label}: {aggregate} uncorrectable ECC error(s) over its life, none since the driver loaded",
            f"Watch GPU {gpu.index}: check `nvidia-smi -q -d ECC,ROW_REMAPPER -i {gpu.index}` shows no pending "
            "remap; report it to the provider if the count grows.",
        )
    return passed(f"{gpu.label}: no uncorrectable ECC errors")


def judge_memory_repairs(gpu: GpuInfo) -> Verdict:
    """No pending or failed row remap (Ampere+) and no pending page retirement (older GPUs)."""
    failed = _query_failed(gpu, "remapped_rows", "retired_pages_pending")
    if failed:
        return failed
    rows, pending_pages = gpu.remapped_rows, gpu.retired_pages_pending
    if not isinstance(rows, Absent):
        if rows.failed:
            return fail(
                "GPU_ROW_REMAP_FAILED",
                f"{gpu.label}: a row remap failed ({rows.uncorrected} uncorrectable-error remaps): no spare rows left",
                f"GPU {gpu.index} needs replacement (RMA): move the job to another node and report it to the provider.",
            )
        if rows.pending:
            return fail(
                "GPU_ROW_REMAP_PENDING",
                f"{gpu.label}: a row remap is pending; it takes effect only after a GPU reset",
                f"Stop the processes on GPU {gpu.index} and reset it (`sudo nvidia-smi -r -i {gpu.index}`), or reboot.",
            )
        return passed(f"{gpu.label}: no pending or failed row remaps ({rows.corrected + rows.uncorrected} done)")
    if pending_pages is True:
        doubles = gpu.retired_pages_double_bit
        return fail(
            "GPU_RETIRED_PAGES_PENDING",
            f"{gpu.label}: a memory page retirement is pending ({doubles} double-bit pages retired)",
            f"Reset GPU {gpu.index} (`sudo nvidia-smi -r -i {gpu.index}`) or reboot so the retirement takes effect.",
        )
    if pending_pages is False:
        return passed(f"{gpu.label}: no pending page retirement")
    return skip(f"{gpu.label}: neither row remapping nor page retirement is reported by this GPU")


def judge_mig(gpu: GpuInfo, devices: Sequence[CudaDevice] = (), ranks: int = 1) -> Verdict:
    """MIG on a GPU the job uses: fine for a one-rank job on the slice; NOT READY for a job of more ranks
    (a CUDA process enumerates one MIG device, MIG devices have no peer-to-peer access: see
    :mod:`preflight.node.devices`), a mix of MIG slices and full GPUs included."""
    failed = _query_failed(gpu, "mig_mode")
    if failed:
        return failed
    if gpu.mig_enabled is Absent.NOT_SUPPORTED:
        return passed(f"{gpu.label}: MIG not supported, whole GPU")
    if isinstance(gpu.mig_enabled, Absent):
        return skip(f"{gpu.label}: MIG mode: {gpu.mig_enabled}")
    fix = (
        f"If the job needs the whole GPU: `sudo nvidia-smi -i {gpu.index} -mig 0`, then reset it "
        f"(`sudo nvidia-smi -r -i {gpu.index}`) or reboot."
    )
    if gpu.mig_enabled:
        mine = next((d for d in devices if d.index == gpu.index), CudaDevice(gpu))
        memory = mine.memory_total_bytes
        size = f", {memory // MIB:,} MiB" if isinstance(memory, int) else ""
        slices = 0 if isinstance(gpu.mig_devices, Absent) else len(gpu.mig_devices)
        seen = f"{mine.name}{size}" + ("" if mine.certain else ", which slice CUDA picks is not documented")
        if ranks <= 1 and len(devices) <= 1:
            return passed(f"{gpu.label}: MIG is on ({slices} MIG device(s)); the job's one rank runs on {seen}")
        full = [d.index for d in devices if not d.is_mig]
        mix = f" among {len(full)} full GPU(s) ({', '.join(f'GPU {i}' for i in full)})" if full else ""
        return fail(
            "GPU_MIG_IN_MULTI_GPU_JOB",
            f"{gpu.label}: MIG is on ({slices} MIG device(s)) in a job of {ranks} ranks{mix}: a CUDA process "
            f"enumerates one MIG device ({seen}) and MIG devices have no peer-to-peer access, so "
            "`--nproc-per-node=gpu` ranks on it fail or stall",
            fix + " Or keep the job off it: CUDA_VISIBLE_DEVICES listing only full GPUs, or one rank per MIG slice "
            "(CUDA_VISIBLE_DEVICES=MIG-<uuid> from `nvidia-smi -L`).",
        )
    if gpu.mig_pending is True:
        return warn("GPU_MIG_PENDING", f"{gpu.label}: MIG turns on at the next GPU reset: a later reset leaves the job "
                    "one slice of this GPU", fix)
    return passed(f"{gpu.label}: MIG disabled")


def judge_compute_mode(gpu: GpuInfo, own_pids: Collection[int] = ()) -> Verdict:
    """PROHIBITED admits no CUDA context (NOT READY: the rank cannot start); EXCLUSIVE_PROCESS admits one
    process, fine for one rank per GPU but NOT READY when another process already holds the GPU
    (cudaErrorDevicesUnavailable, "all CUDA-capable devices are busy or unavailable": NVIDIA/DIGITS#2005)."""
    lost = lost_skip(gpu)
    if lost is not None:
        return lost
    modes = _compute_modes(gpu)
    if not modes:
        return skip(f"{gpu.label}: compute mode: {gpu.compute_mode}")
    fix = (f"Set the default compute mode: `sudo nvidia-smi -i {gpu.index} -c DEFAULT` (or ask the provider; a "
           "scheduler may set it on purpose)")
    if COMPUTE_PROHIBITED in modes:
        return fail("GPU_COMPUTE_PROHIBITED",
                    f"{gpu.label}: compute mode Prohibited: no process may create a CUDA context, so the job's rank "
                    "on it cannot start", fix + ".")
    others = [] if isinstance(gpu.processes, Absent) else [p for p in gpu.processes if p.pid not in own_pids]
    if COMPUTE_EXCLUSIVE_PROCESS in modes and others:
        pids = ", ".join(str(p.pid) for p in others)
        return fail("GPU_EXCLUSIVE_BUSY",
                    f"{gpu.label}: compute mode Exclusive_Process and another process already holds a context on it "
                    f"(pid {pids}): the job's rank cannot create its own",
                    f"Stop pid {pids} (`nvidia-smi --query-compute-apps=pid --format=csv -i {gpu.index}`), or " + fix
                    + "; inside a container these are host pids.", details={"pids": [p.pid for p in others]})
    names = ", ".join(sorted({COMPUTE_MODE_NAMES.get(m, str(m)) for m in modes}))
    if COMPUTE_EXCLUSIVE_PROCESS in modes:
        return passed(f"{gpu.label}: compute mode {names}: one process per GPU, which a job of one rank per GPU "
                      "is (a second process that touches this GPU, e.g. a DataLoader worker calling CUDA, would fail)")
    return passed(f"{gpu.label}: compute mode {names}")


def _compute_modes(gpu: GpuInfo) -> set[int]:
    """The GPU's compute mode, or with MIG on each slice's (nvml.h: only a MIG handle answers then)."""
    if isinstance(gpu.compute_mode, int):
        return {gpu.compute_mode}
    slices = gpu.mig_instances if isinstance(gpu.mig_instances, tuple) else ()
    return {m.compute_mode for m in slices if isinstance(m.compute_mode, int)}


def judge_persistence(gpu: GpuInfo) -> Verdict:
    """Persistence mode on, so the driver state survives between processes."""
    failed = _query_failed(gpu, "persistence_mode")
    if failed:
        return failed
    if isinstance(gpu.persistence_mode, Absent):
        return skip(f"{gpu.label}: persistence mode: {gpu.persistence_mode}")
    if not gpu.persistence_mode:
        return warn(
            "GPU_PERSISTENCE_OFF",
            f"{gpu.label}: persistence mode is off; every process start re-initialises the GPU",
            "Enable the persistence daemon: `sudo systemctl enable --now nvidia-persistenced` "
            "(or `sudo nvidia-smi -pm 1`).",
        )
    return passed(f"{gpu.label}: persistence mode on")


def judge_throttling(gpu: GpuInfo) -> Verdict:
    """No thermal or power slowdown at idle (``Idle`` and user clock settings are normal)."""
    failed = _query_failed(gpu, "clock_event_reasons")
    if failed:
        return failed
    reasons = gpu.clock_event_reasons
    if isinstance(reasons, Absent):
        return skip(f"{gpu.label}: clock event reasons: {reasons}")
    held = reasons & THROTTLE_REASON_BITS
    if held:
        names = ", ".join(decode_clock_event_reasons(held))
        temperature = "" if isinstance(gpu.temperature_c, Absent) else f" at {gpu.temperature_c} C"
        return warn(
            "GPU_THROTTLED_AT_IDLE",
            f"{gpu.label}: clocks held down before any load{temperature}: {names}",
            f"Check cooling and power: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {gpu.index}`; a lowered "
            "power limit shows there (`nvidia-smi -pl`); HW slowdowns mean airflow or PSU trouble on the host.",
            details={"reasons": list(decode_clock_event_reasons(reasons))},
        )
    names = ", ".join(decode_clock_event_reasons(reasons)) or "none"
    return passed(f"{gpu.label}: no thermal or power slowdown (reasons: {names})")


def judge_pcie_link(gpu: GpuInfo, under_load: tuple[int, int] | None = None) -> Verdict:
    """PCIe at its maximum generation and width, judged only from a sample taken under load."""
    failed = _query_failed(gpu, "pcie_current", "pcie_max")
    if failed:
        return failed
    if isinstance(gpu.pcie_max, Absent):
        return skip(f"{gpu.label}: PCIe link is not reported here (common in VMs)")
    best = f"Gen{gpu.pcie_max[0]} x{gpu.pcie_max[1]}"
    if under_load is None:
        now = "unknown" if isinstance(gpu.pcie_current, Absent) else f"Gen{gpu.pcie_current[0]} x{gpu.pcie_current[1]}"
        return skip(
            f"{gpu.label}: PCIe link judged only under load (idle GPUs lower it to save power); now {now}, max {best}"
        )
    gen, width = under_load
    if gen < gpu.pcie_max[0] or width < gpu.pcie_max[1]:
        return warn(
            "GPU_PCIE_LINK_DEGRADED",
            f"{gpu.label}: PCIe link under load is Gen{gen} x{width}, below its maximum {best}",
            "Reseat the GPU or riser and check the slot's PCIe settings in the BIOS; compare with "
            f"`nvidia-smi -q -d PCI -i {gpu.index}` while a copy runs.",
        )
    return passed(f"{gpu.label}: PCIe Gen{gen} x{width} under load (max {best})")


def judge_gpu_models(gpus: Sequence[GpuInfo]) -> Verdict:
    """All GPUs the job uses are one model with one memory size: the slowest sets the pace. The physical
    GPUs are compared (a MIG slice is the MIG check's finding); a lost GPU is left out, named, never
    counted as a model of its own."""
    lost = [g.index for g in gpus if g.gpu_lost]
    aside = "; " + ", ".join(f"GPU {i} is lost: not compared" for i in lost) if lost else ""
    known = [g for g in gpus if not g.gpu_lost and isinstance(g.name, str)]
    if not known:
        return skip(f"no GPU to compare{aside}")
    groups: dict[tuple[str, int | str], list[int]] = {}
    for gpu in known:
        memory = gpu.memory_total_bytes if isinstance(gpu.memory_total_bytes, int) else str(gpu.memory_total_bytes)
        groups.setdefault((str(gpu.name), memory), []).append(gpu.index)
    if len(groups) == 1:
        (name, memory), indices = next(iter(groups.items()))
        size = f"{memory // MIB:,} MiB" if isinstance(memory, int) else memory
        return passed(f"{len(indices)} x {name} ({size}){aside}")
    listed = "; ".join(
        f"GPU {','.join(map(str, idx))}: {name} ({m // MIB:,} MiB)"
        if isinstance(m, int)
        else f"GPU {','.join(map(str, idx))}: {name}"
        for (name, m), idx in groups.items()
    )
    return warn(
        "MIXED_GPUS",
        f"GPUs differ: {listed}{aside}: every DDP/FSDP step waits for the slowest and memory is limited by the "
        "smallest",
        "Run the job on GPUs of one model (select them with CUDA_VISIBLE_DEVICES=<GPU UUIDs from `nvidia-smi -L`>); "
        "in DDP/FSDP every step waits for the slowest GPU and memory is limited by the smallest.",
    )


def gpu_table(gpus: Sequence[GpuInfo], verdicts: Sequence[Sequence[Verdict]]) -> View:
    """The GPU table for the report; rows of GPUs with a WARN/FAIL/ERROR are highlighted."""
    bad = {Status.WARN, Status.FAIL, Status.ERROR}
    rows: list[list[object]] = []
    highlight: list[int] = []
    columns: list[str] = []
    for position, (gpu, found) in enumerate(zip(gpus, verdicts, strict=True)):
        row = gpu.table_row()
        columns = [*row, "problems"]
        problems = [v.code or v.status.value for v in found if v.status in bad]
        rows.append([*row.values(), ", ".join(problems) or "none"])
        if problems:
            highlight.append(position)
    return View(
        kind="table", title="GPUs (NVML order)", data={"columns": columns, "rows": rows, "highlight": highlight}
    )


def own_pids() -> frozenset[int]:
    """This process and its parent (the ``preflight`` CLI): never "other processes"."""
    return frozenset({os.getpid(), os.getppid()})


def idle_verdicts(gpu: GpuInfo, devices: Sequence[CudaDevice], ranks: int) -> list[Verdict]:
    """Every per-GPU judge that needs no load, for the GPU table's "problems" column (``devices`` and
    ``ranks``: the job's, for the MIG judge)."""
    judges = (
        judge_gpu_responds,
        partial(judge_gpu_busy, own_pids=own_pids()),
        partial(judge_compute_mode, own_pids=own_pids()),
        judge_ecc,
        judge_memory_repairs,
        partial(judge_mig, devices=devices, ranks=ranks),
        judge_persistence,
        judge_throttling,
    )
    return [judge(gpu) for judge in judges]
