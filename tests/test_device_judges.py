"""What the job will see: count, torch/NVML/variable agreement, the variable itself, the order trap."""

from __future__ import annotations

import random


from preflight.judge.visible_devices import (
    judge_device_agreement,
    judge_device_order,
    judge_gpu_count,
    judge_visible_devices,
)
from preflight.outcome import Status, Verdict
from preflight.parse.visible_devices import (
    DeviceOrder,
    GpuIdentity,
    VisibleDevices,
    VisibleDevicesError,
    parse_device_order,
    parse_visible_devices,
    resolve_visible_devices,
)
from preflight.probe.job_torch import JobTorch
from tests.fakes.nvml import walk_fake


def identities(profile: str, **faults: object) -> list[GpuIdentity]:
    gpus = walk_fake(profile, **faults).gpus
    found = [gpu.identity() for gpu in gpus]
    assert all(found)
    return [identity for identity in found if identity is not None]


def visible(
    raw: str | None, profile: str = "8x-h100-sxm", order: str | None = None, **faults: object
) -> VisibleDevices:
    try:
        parsed_order = parse_device_order(order)
    except VisibleDevicesError:
        parsed_order = DeviceOrder.FASTEST_FIRST
    return resolve_visible_devices(parse_visible_devices(raw), identities(profile, **faults), parsed_order)


def torch_sees(count: int | None, cuda: str | None = "12.4", error: str | None = None) -> JobTorch:
    return JobTorch(python="python3", version="2.13.0", cuda=cuda, device_count=count, device_count_error=error)


# -- count ---------------------------------------------------------------------------------------------


def test_count_matches_expectation() -> None:
    verdict = judge_gpu_count(visible(None), 8, nvml_count=8, expected=8)
    assert verdict.status is Status.PASS and "the job will see 8 GPU(s)" in verdict.summary


def test_missing_gpu_fails_with_the_bus_hint() -> None:
    verdict = judge_gpu_count(visible(None, absent_gpus={7}), 7, nvml_count=7, expected=8)
    assert (verdict.status, verdict.code) == (Status.FAIL, "GPU_COUNT_MISMATCH")
    assert "expected 8 GPU(s), but the job will see 7" in verdict.summary
    assert "xid" in (verdict.remediation or "")


def test_variable_narrowing_the_count_is_named() -> None:
    verdict = judge_gpu_count(visible("0,1"), 2, nvml_count=8, expected=8)
    assert verdict.code == "GPU_COUNT_MISMATCH"
    assert "CUDA_VISIBLE_DEVICES='0,1'" in verdict.summary and "CUDA_VISIBLE_DEVICES" in (verdict.remediation or "")


def test_zero_gpus_for_the_job_fails_without_expectation() -> None:
    assert judge_gpu_count(visible(""), 0, nvml_count=8, expected=None).code == "GPU_COUNT_MISMATCH"


def test_lost_gpus_explaining_the_shortfall_are_the_nvml_checks_finding() -> None:
    """Issue 24 item 5: two GPUs off the bus are two GPU_LOST FAILs, not also a count mismatch."""
    seen = visible(None, absent_gpus={3, 6})
    verdict = judge_gpu_count(seen, 6, nvml_count=8, expected=8, lost=2)
    assert verdict.status is Status.SKIP and "2 GPU(s) fell off the bus" in verdict.summary


def test_mig_count_is_the_node_models() -> None:
    """Node.job_sees takes torch's count where NVML cannot predict it (MIG)."""
    seen = visible(None, "4x-a100-sxm-mixed-mig")
    assert seen.count_certain is False
    assert judge_gpu_count(seen, 3, nvml_count=4, expected=3).status is Status.PASS


# -- torch, NVML and the variable agree ------------------------------------------------------------------


def test_agreement() -> None:
    assert judge_device_agreement(visible("0,1,2,3"), 8, torch_sees(4)).status is Status.PASS


def test_torch_counting_otherwise_fails() -> None:
    verdict = judge_device_agreement(visible(None), 8, torch_sees(7))
    assert (verdict.status, verdict.code) == (Status.FAIL, "DEVICE_COUNT_DISAGREES")
    assert "torchrun --nproc-per-node=gpu would start 7" in verdict.summary


def test_cpu_torch_on_a_gpu_machine_fails() -> None:
    verdict = judge_device_agreement(visible(None), 8, torch_sees(0, cuda=None))
    assert verdict.code == "TORCH_CPU_BUILD"


def test_torch_missing_is_a_skip() -> None:
    missing = JobTorch(python="python3", problem="import torch failed: no torch")
    assert judge_device_agreement(visible(None), 8, missing).status is Status.SKIP


def test_torch_count_error_fails() -> None:
    verdict = judge_device_agreement(visible(None), 8, torch_sees(None, error="CUDA driver too old"))
    assert verdict.code == "TORCH_DEVICE_COUNT_FAILED" and "CUDA driver too old" in verdict.summary


def test_mig_makes_a_disagreement_acceptable() -> None:
    verdict = judge_device_agreement(visible(None, "4x-a100-sxm-mixed-mig"), 4, torch_sees(3))
    assert verdict.status is Status.PASS and "MIG" in verdict.summary


# -- the variable ----------------------------------------------------------------------------------------


def test_unset_variable_passes() -> None:
    assert judge_visible_devices(visible(None)).status is Status.PASS


def test_malformed_variable_says_what_cuda_will_do() -> None:
    verdict = judge_visible_devices(visible("0,2,-1,1"))
    assert (verdict.status, verdict.code) == (Status.FAIL, "CUDA_VISIBLE_DEVICES_MALFORMED")
    assert "CUDA stops reading at '-1'; 1 ignored" in verdict.summary
    assert (
        "CUDA will use 2 GPU(s): cuda0 = GPU 0 (00000000:18:00.0), cuda1 = GPU 2 (00000000:3A:00.0)" in verdict.summary
    )


def test_duplicate_leaves_no_gpu() -> None:
    verdict = judge_visible_devices(visible("3,3"))
    assert verdict.code == "CUDA_VISIBLE_DEVICES_MALFORMED" and "CUDA will use 0 GPU(s): no GPU" in verdict.summary


def test_empty_variable_fails() -> None:
    verdict = judge_visible_devices(visible(""))
    assert (verdict.status, verdict.code) == (Status.FAIL, "CUDA_VISIBLE_DEVICES_EMPTY")


def test_uuid_prefix_variable_passes_and_unknown_uuid_fails() -> None:
    uuid = identities("8x-h100-sxm")[5].uuid
    good = judge_visible_devices(visible(uuid[:12]))
    assert good.status is Status.PASS and "cuda0 = GPU 5" in good.summary
    bad = judge_visible_devices(visible("GPU-zzzz"))
    assert bad.code == "CUDA_VISIBLE_DEVICES_MALFORMED" and "matches no GPU" in bad.summary


def test_index_past_the_end_fails() -> None:
    verdict = judge_visible_devices(visible("0,1,8", "8x-h100-sxm"))
    assert verdict.code == "CUDA_VISIBLE_DEVICES_MALFORMED" and "index 8 but only 8 GPU(s)" in verdict.summary


# -- CUDA_DEVICE_ORDER --------------------------------------------------------------------------------


def test_order_trap_on_mixed_gpus() -> None:
    gpus = identities("2x-mixed-a6000-h100")
    verdict = judge_device_order(visible("0", "2x-mixed-a6000-h100"), None, gpus)
    assert (verdict.status, verdict.code) == (Status.WARN, "CUDA_DEVICE_ORDER_TRAP")
    assert "index 0 is GPU 1 (Fake NVIDIA H100 PCIe), not nvidia-smi's GPU 0 (Fake NVIDIA RTX A6000)" in verdict.summary
    assert "PCI_BUS_ID" in (verdict.remediation or "")


def test_pci_bus_id_order_defuses_the_trap() -> None:
    gpus = identities("2x-mixed-a6000-h100")
    seen = visible("0", "2x-mixed-a6000-h100", order="PCI_BUS_ID")
    assert judge_device_order(seen, "PCI_BUS_ID", gpus).status is Status.PASS


def test_identical_gpus_have_no_trap() -> None:
    verdict = judge_device_order(visible("0,1"), None, identities("8x-h100-sxm"))
    assert verdict.status is Status.PASS and "same model" in verdict.summary


def test_uuids_have_no_trap() -> None:
    gpus = identities("2x-mixed-a6000-h100")
    assert judge_device_order(visible(gpus[1].uuid, "2x-mixed-a6000-h100"), None, gpus).status is Status.PASS


def test_unknown_order_value_warns() -> None:
    verdict = judge_device_order(visible("0"), "pci_bus_id", identities("8x-h100-sxm"))
    assert (verdict.status, verdict.code) == (Status.WARN, "CUDA_DEVICE_ORDER_INVALID")


# -- garbage never breaks a judge ---------------------------------------------------------------------


def test_garbage_always_gives_verdicts() -> None:
    rng = random.Random(99)
    gpus = identities("2x-mixed-a6000-h100")
    for _ in range(500):
        raw = "".join(rng.choice("0123,-+ GPUMIG-ab\x00é") for _ in range(rng.randint(0, 12)))
        order = rng.choice([None, "PCI_BUS_ID", "junk", ""])
        seen = visible(raw, "2x-mixed-a6000-h100", order=order)
        verdicts: list[Verdict] = [
            judge_visible_devices(seen),
            judge_device_order(seen, order, gpus),
            judge_gpu_count(seen, seen.count, 2, rng.choice([None, 1, 2, 8])),
            judge_device_agreement(seen, 2, torch_sees(rng.randint(0, 2))),
        ]
        assert all(isinstance(v, Verdict) for v in verdicts)
