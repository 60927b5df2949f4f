"""No NVIDIA GPU, GPUs without a working driver, and --cpu (issue 18.1). The PCI probe reads a
filesystem root laid out as sysfs lays out a PCI device (``vendor``/``class`` files hold
``0x10de``/``0x030200`` for an A100 or H100 3D controller, ``0x068000`` for an NVSwitch bridge,
as ``lspci -n`` shows them on HGX nodes)."""

from __future__ import annotations

from pathlib import Path

from preflight.judge.gpu_health import judge_gpu_presence
from preflight.outcome import Status
from preflight.probe.pci import nvidia_gpus_on_pci


def _device(root: Path, bus_id: str, vendor: str, klass: str) -> None:
    folder = root / "sys" / "bus" / "pci" / "devices" / bus_id
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(vendor + "\n")
    (folder / "class").write_text(klass + "\n")


def test_nvidia_3d_controllers_count_and_nvswitches_do_not(tmp_path: Path) -> None:
    _device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # H100 SXM
    _device(tmp_path, "0000:2a:00.0", "0x10de", "0x030000")  # a VGA-class NVIDIA board
    _device(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch: a bridge
    _device(tmp_path, "0000:00:02.0", "0x8086", "0x030000")  # an Intel display
    found = nvidia_gpus_on_pci(tmp_path)
    assert found.bus_ids == ("0000:18:00.0", "0000:2a:00.0") and found.count == 2


def test_no_sysfs_reads_as_unreadable_not_as_gpus(tmp_path: Path) -> None:
    found = nvidia_gpus_on_pci(tmp_path)
    assert found.count == 0 and not found.readable


def test_no_nvidia_gpu_is_not_ready_unless_a_cpu_rehearsal_was_asked_for() -> None:
    verdict = judge_gpu_presence(0, 0, 0, cpu_rehearsal=False)
    assert verdict.status is Status.FAIL and verdict.code == "NO_NVIDIA_GPU"
    assert "--nproc-per-node=gpu" in verdict.summary and "--cpu" in (verdict.remediation or "")
    rehearsal = judge_gpu_presence(0, 0, 0, cpu_rehearsal=True)
    assert rehearsal.status is Status.PASS and "CPU rehearsal" in rehearsal.summary


def test_gpus_on_the_bus_pass_here_and_leave_the_driver_to_the_nvml_check() -> None:
    verdict = judge_gpu_presence(4, 0, 0, cpu_rehearsal=False)
    assert verdict.status is Status.PASS and "4 on the PCI bus" in verdict.summary
