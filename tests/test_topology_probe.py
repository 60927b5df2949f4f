"""The topology probe: nvidia-smi through a recorded runner, NVML through the fake machines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from preflight.probe.command import CommandResult
from preflight.probe.topology import SMI_ARGV, GpuNvlinks, NvmlPair, read_nvml_topology, read_smi_topology
from tests.fakes.nvml import FakeNvml

H100 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"


class Runner:
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.deadlines: list[float] = []

    def __call__(self, argv: Sequence[str], timeout_s: float = 20.0,
                 env: Mapping[str, str] | None = None) -> CommandResult:
        assert tuple(argv) == SMI_ARGV
        self.deadlines.append(timeout_s)
        return self.result


def test_smi_matrix_is_parsed_under_the_given_deadline(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / H100).read_text()
    runner = Runner(CommandResult(SMI_ARGV, 0, text, ""))
    found = read_smi_topology(runner, timeout_s=42.0)
    assert runner.deadlines == [42.0]
    assert found.matrix is not None and found.matrix.link(0, 7) == "NV18"
    assert found.raw == text and found.problem is None and not found.missing


def test_smi_problems_are_values() -> None:
    missing = read_smi_topology(Runner(CommandResult(SMI_ARGV, None, "", "", not_found=True)))
    assert missing.missing and missing.matrix is None and "not found" in (missing.problem or "")
    hung = read_smi_topology(Runner(CommandResult(SMI_ARGV, None, "", "", timed_out=True, duration_s=120)))
    assert not hung.missing and "no answer within 120 s" in (hung.problem or "")
    garbled = read_smi_topology(Runner(CommandResult(SMI_ARGV, 0, "\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "")))
    assert garbled.matrix is None and "GPU rows missing: GPU1" in (garbled.problem or "")
    assert garbled.raw.startswith("\tGPU0")


def test_nvml_counts_links_and_reads_pairs() -> None:
    facts = read_nvml_topology(FakeNvml.from_profile("8x-h100-sxm", nvlinks_missing={3}, nvlink_down={(5, 17)}))
    assert facts.started and facts.error is None and facts.gpu_count == 8
    assert facts.nvlinks[0] == GpuNvlinks(gpu=0, active=18, present=18, version=6)
    assert facts.nvlinks[3] == GpuNvlinks(gpu=3, active=0, present=18, version=None)
    assert facts.nvlinks[5].active == 17
    assert len(facts.pairs) == 28
    assert NvmlPair(0, 1, True, "NODE") in facts.pairs and NvmlPair(0, 4, True, "SYS") in facts.pairs
    assert all(p.nvlink is False for p in facts.pairs if 3 in (p.a, p.b))
    assert facts.bus_ids[1] == "00000000:2A:00.0"


def test_nvml_bridged_pairs_and_pcie_only() -> None:
    bridged = read_nvml_topology(FakeNvml.from_profile("4x-a100-pcie-bridged"))
    assert {(p.a, p.b) for p in bridged.pairs if p.nvlink} == {(0, 1), (2, 3)}
    assert all(g.active == 12 for g in bridged.nvlinks)
    pcie = read_nvml_topology(FakeNvml.from_profile("8x-l40s"))
    assert all(g.present == 0 and g.active == 0 for g in pcie.nvlinks)
    levels = {(p.a, p.b): p.pcie_level for p in pcie.pairs}
    assert levels[(0, 1)] == "PIX" and levels[(0, 2)] == "NODE" and levels[(0, 4)] == "SYS"


def test_nvml_that_cannot_start_or_fails_midway() -> None:
    down = read_nvml_topology(FakeNvml.from_profile("8x-h100-sxm", init_error="DRIVER_NOT_LOADED"))
    assert not down.started and "kernel driver is not loaded" in (down.error or "")
    lost = read_nvml_topology(FakeNvml.from_profile("8x-h100-sxm", gpu_lost={2}))
    assert lost.started and lost.gpu_count == 8 and len(lost.nvlinks) == 2
    assert lost.pairs == () and "GPU is lost" in (lost.error or "")
