"""The node model's derived GPU facts, in-process over the real binding (the NVML child over the fake C
library): the job's devices and lost GPUs, the fabric, the job's topology, and the deadline of
``nvidia-smi topo -m`` once NVML has hung."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from preflight.node import AFTER_HUNG_DRIVER_S, Node
from preflight.node.fabric import Layout, fabric_from, restrict
from preflight.node.transports import Transports
from preflight.parse.topo import parse_topo_matrix
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, run_command
from tests.fakes.fake_torch import cuda_answer, torch_runner
from tests.fakes.nvml import fake_transport, walk_fake
from tests.fakes.nvml_plugin import sysfs_root
from tests.fakes.nvml_profiles import PROFILES


class Smi:
    """``nvidia-smi`` that answers nothing in time, remembering the deadline it was given; every other
    command (the NVML child) runs for real."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def __call__(self, argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                 env: Mapping[str, str] | None = None) -> CommandResult:
        if list(argv[:1]) != ["nvidia-smi"]:
            return run_command(argv, timeout_s, env)
        self.deadlines.append(timeout_s)
        return CommandResult(tuple(argv), None, "", "", timed_out=True, duration_s=timeout_s)


def node_of(profile: str, tmp_path: Path, environ: Mapping[str, str] | None = None, gpus: int = 8,
            nvml_timeout_s: float = 20.0, **faults: Any) -> tuple[Node, Smi]:
    smi = Smi()
    transports = Transports(nvml=fake_transport(profile, **faults), run=torch_runner(cuda_answer(gpus), smi),
                            environ=dict(environ or {}), root=sysfs_root(PROFILES[profile], tmp_path))
    return Node(transports, nproc=None, nvml_timeout_s=lambda: nvml_timeout_s), smi


def test_after_nvml_hung_nvidia_smi_gets_a_short_deadline(tmp_path: Path) -> None:
    """Issue 24 row 8: `nvidia-smi topo -m` waited its full 120 s on the same hung driver."""
    node, smi = node_of("2x-h100-nvl-hung", tmp_path, gpus=2, nvml_timeout_s=1.0)
    assert node.nvml_hung
    found = node.smi_topology(budget_s=120.0)
    assert smi.deadlines == [AFTER_HUNG_DRIVER_S] and found.matrix is None
    assert node.smi_topology(budget_s=120.0) is found  # run once


def test_a_healthy_driver_gives_nvidia_smi_its_budget(tmp_path: Path) -> None:
    node, smi = node_of("8x-l40s", tmp_path)
    node.smi_topology(budget_s=42.0)
    assert smi.deadlines == [42.0]


def test_nvswitches_on_the_bus_come_from_sysfs(tmp_path: Path) -> None:
    node, _ = node_of("8x-a100-sxm", tmp_path)
    assert node.pci_gpus.count == 8 and len(node.pci_gpus.nvswitch_bus_ids) == 6
    assert node.fabric.nvswitches_on_pci == 6 and node.job_layout is Layout.NVSWITCH
    b200, _ = node_of("8x-b200-hgx", tmp_path / "b200")
    assert b200.pci_gpus.nvswitch_bus_ids == () and b200.job_layout is Layout.NVSWITCH  # NVML says so


def test_a_lost_gpu_is_the_jobs_unless_the_variable_names_the_jobs_gpus(tmp_path: Path) -> None:
    everything, _ = node_of("8x-h100-sxm", tmp_path / "all", lost_at_handle={5})
    assert [g.index for g in everything.lost_gpus] == [5] and len(everything.job_gpus) == 8
    assert everything.job_sees == 7
    half, _ = node_of("8x-h100-sxm", tmp_path / "half", {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, gpus=4,
                      lost_at_handle={5})
    assert [g.index for g in half.job_gpus] == [0, 1, 2, 3] and half.lost_gpus == ()


def test_job_devices_of_a_mig_gpu_are_its_slice(tmp_path: Path) -> None:
    node, _ = node_of("4x-a100-sxm-mixed-mig", tmp_path, gpus=3)
    devices = node.job_devices
    assert [d.is_mig for d in devices] == [True, True, False, False]
    assert devices[0].describe() == "GPU 0 (3g.40gb slice)" and not devices[0].certain
    assert node.job_sees == 3  # MIG makes NVML's count uncertain: torch's answer


def test_fabric_expectations_never_come_from_the_name() -> None:
    snapshot = walk_fake("8x-h800-hgx", nvlinks_missing={3})
    fabric = fabric_from(snapshot, 4)
    assert fabric.expectation(3) is not None and "fabric" in fabric.expectation(3)  # type: ignore[operator]
    assert fabric.gpu(0).to_switch == 8  # type: ignore[union-attr]
    no_bridge = fabric_from(walk_fake("4x-a100-pcie-no-bridge"))
    assert [no_bridge.expectation(i) for i in range(4)] == [None] * 4
    v100 = fabric_from(walk_fake("8x-v100-sxm2"))  # driver 418: no remote device type, PCI bus ids decide
    assert v100.gpu(0).peers == {1: 1, 2: 1, 3: 2, 6: 2}  # type: ignore[union-attr]


def test_the_job_matrix_from_nvml_and_restricted_from_nvidia_smi(shared_fixtures: Path) -> None:
    fabric = fabric_from(walk_fake("4x-a100-pcie-bridged"))
    matrix = fabric.matrix([0, 1, 2, 3])
    assert matrix is not None and matrix.links[0] == ("X", "NV12", "SYS", "SYS")
    text = (shared_fixtures / "topo" / "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt").read_text()
    smi = restrict(parse_topo_matrix(text), ["GPU2", "GPU3"])
    assert smi is not None and smi.gpus == ("GPU2", "GPU3") and smi.links == (("X", "NV12"), ("NV12", "X"))
    assert smi.numa_affinity == ("2", "3")
