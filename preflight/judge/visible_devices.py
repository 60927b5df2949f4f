"""Judges of what the job will see: the GPU count, and NVML, torch and the variables agreeing.

``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` are read by
:mod:`preflight.parse.visible_devices`; these judges turn its answer into verdicts that say what
CUDA will actually do.
"""

from __future__ import annotations

from collections.abc import Sequence

from preflight.outcome import Verdict, fail, passed, skip, warn
from preflight.parse.visible_devices import (
    DEVICE_ORDER_VAR,
    VISIBLE_DEVICES_VAR,
    DeviceOrder,
    GpuIdentity,
    SelectorKind,
    VisibleDevices,
    VisibleDevicesError,
    cuda_enumeration,
    parse_device_order,
)
from preflight.probe.job_torch import JobTorch


def _setting_text(visible: VisibleDevices) -> str:
    raw = visible.setting.raw
    return f"{VISIBLE_DEVICES_VAR} unset" if raw is None else f"{VISIBLE_DEVICES_VAR}={raw!r}"


def judge_gpu_count(
    visible: VisibleDevices, job_sees: int, nvml_count: int, expected: int | None, lost: int = 0
) -> Verdict:
    """The job sees ``--expect-gpus`` GPUs (FAIL otherwise), and at least one. ``job_sees`` is the node
    model's answer (:attr:`preflight.node.Node.job_sees`); GPUs that fell off the bus (``lost``) are the NVML
    check's finding, so a shortfall they explain is a SKIP naming them."""
    count = job_sees
    seen = f"the job will see {count} GPU(s) ({visible.describe()}); NVML lists {nvml_count}; {_setting_text(visible)}"
    if expected is None and count > 0:
        return passed(seen)
    if count == expected:
        return passed(seen)
    if lost and count + lost >= (expected or 1):
        return skip(f"{lost} GPU(s) fell off the bus (see test_gpu_responds); {seen}")
    if nvml_count < (expected or 1):
        fix = (
            "A GPU is missing from the machine: compare `nvidia-smi -L` with the instance type, read "
            "`sudo dmesg | grep -i xid` (XID 79 = fell off the bus); reboot or replace the node."
        )
    else:
        fix = (
            f"NVML lists {nvml_count} GPUs but {_setting_text(visible)} leaves {count}: fix or unset "
            f"{VISIBLE_DEVICES_VAR}, or pass the right --expect-gpus."
        )
    wanted = "at least 1" if expected is None else str(expected)
    return fail("GPU_COUNT_MISMATCH", f"expected {wanted} GPU(s), but {seen}", fix)


def judge_device_agreement(visible: VisibleDevices, nvml_count: int, torch: JobTorch) -> Verdict:
    """torch.cuda.device_count() (what --nproc-per-node=gpu starts) matches NVML + the variable."""
    if torch.version is None:
        return skip(f"torch not available: {torch.problem}")
    if torch.cuda is None and nvml_count > 0:
        return fail(
            "TORCH_CPU_BUILD",
            f"torch {torch.version} is a CPU-only build but NVML lists {nvml_count} GPU(s)",
            "Install a CUDA build of torch matching the driver, e.g. "
            "`pip install torch --index-url https://download.pytorch.org/whl/cu124`.",
        )
    if torch.device_count is None:
        return fail(
            "TORCH_DEVICE_COUNT_FAILED",
            f"torch {torch.version} (CUDA {torch.cuda}) could not count GPUs: {torch.device_count_error}",
            "Run `python -c 'import torch; print(torch.cuda.device_count())'` to see the error; a driver older "
            "than torch's CUDA build is the usual cause.",
        )
    predicted = f"NVML with {_setting_text(visible)} gives {visible.count}"
    if torch.device_count == visible.count:
        return passed(f"torch, NVML and {VISIBLE_DEVICES_VAR} agree: {visible.count} GPU(s)")
    if not visible.count_certain:
        return passed(f"torch counts {torch.device_count} GPU(s); {predicted}, which MIG makes uncertain")
    return fail(
        "DEVICE_COUNT_DISAGREES",
        f"torch counts {torch.device_count} GPU(s), but {predicted}: torchrun --nproc-per-node=gpu would start "
        f"{torch.device_count} process(es)",
        f"Compare `nvidia-smi -L` with `python -c 'import torch; print(torch.cuda.device_count())'` in the job's "
        f"environment; check {VISIBLE_DEVICES_VAR} is exported the same way for the job, and that no GPU fails CUDA "
        "init (fabric manager down on NVSwitch machines gives CUDA error 802).",
    )


def judge_visible_devices(visible: VisibleDevices) -> Verdict:
    """``CUDA_VISIBLE_DEVICES`` reads as written; otherwise FAIL saying what CUDA will do with it."""
    setting = visible.setting
    if setting.kind is SelectorKind.ALL:
        return passed(f"{VISIBLE_DEVICES_VAR} unset: the job sees every GPU ({visible.count})")
    outcome = f"CUDA will use {visible.count} GPU(s): {visible.describe()}"
    fix = (
        f"Write a plain comma-separated list, e.g. {VISIBLE_DEVICES_VAR}=0,1,2,3 or GPU UUIDs from `nvidia-smi -L`, "
        "or unset it to use every GPU."
    )
    if setting.kind is SelectorKind.NONE:
        return fail(
            "CUDA_VISIBLE_DEVICES_EMPTY",
            f"{_setting_text(visible)}: {'; '.join(visible.problems)}",
            f"Unset it (`unset {VISIBLE_DEVICES_VAR}`) or list the GPUs; an empty value usually comes from a "
            "scheduler variable that was not set.",
        )
    if visible.problems:
        return fail(
            "CUDA_VISIBLE_DEVICES_MALFORMED",
            f"{_setting_text(visible)}: {'; '.join(visible.problems)}. {outcome}",
            fix,
            details={"visible": [v.gpu.uuid for v in visible.gpus]},
        )
    note = f" ({'; '.join(visible.notes)})" if visible.notes else ""
    return passed(f"{_setting_text(visible)}: {outcome}{note}")


def judge_device_order(visible: VisibleDevices, order_raw: str | None, gpus: Sequence[GpuIdentity]) -> Verdict:
    """Indices in ``CUDA_VISIBLE_DEVICES`` mean the nvidia-smi GPUs (PCI_BUS_ID, or identical GPUs)."""
    try:
        order = parse_device_order(order_raw)
    except VisibleDevicesError as exc:
        return warn(
            "CUDA_DEVICE_ORDER_INVALID",
            str(exc),
            f"export {DEVICE_ORDER_VAR}=PCI_BUS_ID so CUDA numbers GPUs like nvidia-smi.",
        )
    if visible.setting.kind is not SelectorKind.INDEX:
        return passed(f"{DEVICE_ORDER_VAR}={order.value}; {VISIBLE_DEVICES_VAR} does not use indices")
    if order is DeviceOrder.PCI_BUS_ID:
        return passed(f"{DEVICE_ORDER_VAR}=PCI_BUS_ID: CUDA indices are nvidia-smi indices")
    fastest, certain = cuda_enumeration(gpus, DeviceOrder.FASTEST_FIRST)
    by_bus, _ = cuda_enumeration(gpus, DeviceOrder.PCI_BUS_ID)
    if certain and fastest == by_bus:
        return passed(
            f"{DEVICE_ORDER_VAR} is {order_raw or 'unset (FASTEST_FIRST)'}, but all GPUs are the same model, "
            "so CUDA indices follow the PCI bus like nvidia-smi"
        )
    moved = [
        f"index {i} is GPU {fastest[i].nvml_index} ({fastest[i].name}), "
        f"not nvidia-smi's GPU {by_bus[i].nvml_index} ({by_bus[i].name})"
        for i in sorted(set(visible.setting.indices))
        if i < len(fastest) and fastest[i] != by_bus[i]
    ]
    guess = "" if certain else " (CUDA's fastest-first order is a heuristic; this is its likely result)"
    detail = "; ".join(moved) if moved else "the indices used happen to match, but any other index may not"
    return warn(
        "CUDA_DEVICE_ORDER_TRAP",
        f"{_setting_text(visible)} uses indices while {DEVICE_ORDER_VAR} is {order_raw or 'unset'}: CUDA numbers "
        f"GPUs fastest first, nvidia-smi by PCI bus: {detail}{guess}",
        f"export {DEVICE_ORDER_VAR}=PCI_BUS_ID (indices then match nvidia-smi), or select GPUs by UUID "
        f"({VISIBLE_DEVICES_VAR}=GPU-...).",
    )
