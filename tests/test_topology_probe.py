"""The topology probe: nvidia-smi through a recorded runner (NVML pairs: tests/test_nvml_probe.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from preflight.probe.command import CommandResult
from preflight.probe.topology import SMI_ARGV, read_smi_topology

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
