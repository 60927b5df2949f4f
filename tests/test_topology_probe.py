"""The topology probe: nvidia-smi through a recorded runner, NVML through the fake backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from preflight.parse.topo import parse_topo_matrix
from preflight.probe.command import CommandResult
from preflight.probe.topology import SMI_ARGV, GpuNvlinks, NvmlPair, read_nvml_topology, read_smi_topology
from tests.fakes.topology_nvml import FakeTopologyNvml

H100 = "8xH100-AWS-p5.48xlarge-NV18-no-NIC-columns-legend.txt"
PAIRS = "4xA100-80GB-PCIe-NV12-bridge-pairs-Azure-NC96ads.txt"


class Runner:
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.deadlines: list[float] = []

    def __call__(self, argv: Sequence[str], timeout_s: float = 20.0, env: Mapping[str, str] | None = None) -> CommandResult:
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


def _fake(shared: Path, name: str, **kwargs: object) -> FakeTopologyNvml:
    return FakeTopologyNvml.build(parse_topo_matrix((shared / "topo" / name).read_text()), **kwargs)  # type: ignore[arg-type]


def test_nvml_counts_links_and_reads_pairs(shared_fixtures: Path) -> None:
    facts = read_nvml_topology(_fake(shared_fixtures, H100, missing=[3], down=[(5, 17)]))
    assert facts.started and facts.error is None and facts.gpu_count == 8
    assert facts.nvlinks[0] == GpuNvlinks(gpu=0, active=18, present=18, version=6)
    assert facts.nvlinks[3] == GpuNvlinks(gpu=3, active=0, present=18, version=None)
    assert facts.nvlinks[5].active == 17
    assert len(facts.pairs) == 28
    assert NvmlPair(0, 1, True, "NODE") in facts.pairs
    assert all(p.nvlink is False for p in facts.pairs if 3 in (p.a, p.b))
    assert facts.bus_ids[0] == "00000000:18:00.0"


def test_nvml_pcie_levels_and_no_nvlink(shared_fixtures: Path) -> None:
    facts = read_nvml_topology(_fake(shared_fixtures, "4xL40S-NODE-SYS-2NICs-no-NVLink.txt"))
    assert all(g.present == 0 and g.active == 0 for g in facts.nvlinks)
    levels = {(p.a, p.b): p.pcie_level for p in facts.pairs}
    assert levels[(0, 1)] == "NODE" and levels[(0, 2)] == "SYS"
    assert all(p.nvlink is False for p in facts.pairs)


def test_nvml_that_cannot_start_or_fails_midway(shared_fixtures: Path) -> None:
    down = read_nvml_topology(_fake(shared_fixtures, PAIRS, unavailable="libnvidia-ml.so.1 not found"))
    assert not down.started and "libnvidia-ml.so.1 not found" in (down.error or "")
    partial = read_nvml_topology(_fake(shared_fixtures, PAIRS, failing=frozenset({"p2p_status"})))
    assert partial.started and partial.gpu_count == 4 and len(partial.nvlinks) == 4
    assert partial.pairs == () and "p2p_status: GPU is lost" in (partial.error or "")
