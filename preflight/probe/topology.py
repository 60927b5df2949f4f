"""Topology facts of the live node from ``nvidia-smi topo -m``.

``nvidia-smi topo -m`` merges NVML's two separate answers (the PCIe tree of a pair, and NVLink)
into one matrix. NVML's own answers are part of the run's one NVML snapshot
(:mod:`preflight.probe.nvml_snapshot`), so the judge can cross-check the two; nothing is judged
here. A missing ``nvidia-smi``, a timeout or an unreadable matrix become values, never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass

from preflight.parse.topo import TopologyParseError, TopoMatrix, parse_topo_matrix
from preflight.probe.command import CommandRunner

SMI_ARGV = ("nvidia-smi", "topo", "-m")
SMI_TIMEOUT_S = 120.0  # topo -m has taken 112 s on one AMD host (NVIDIA/nccl#557)


@dataclass(frozen=True, slots=True)
class SmiTopology:
    """``nvidia-smi topo -m`` on this node: the matrix, or why there is none."""

    matrix: TopoMatrix | None
    raw: str = ""
    problem: str | None = None
    missing: bool = False


def read_smi_topology(runner: CommandRunner, timeout_s: float = SMI_TIMEOUT_S) -> SmiTopology:
    """Run ``nvidia-smi topo -m`` through the node's command transport under a deadline and parse it."""
    result = runner(SMI_ARGV, timeout_s=timeout_s)
    if result.not_found:
        return SmiTopology(None, problem="nvidia-smi not found on PATH", missing=True)
    if not result.ok:
        return SmiTopology(None, raw=result.stdout + result.stderr, problem=result.describe_failure())
    try:
        return SmiTopology(parse_topo_matrix(result.stdout), raw=result.stdout)
    except TopologyParseError as exc:
        return SmiTopology(None, raw=result.stdout, problem=f"`nvidia-smi topo -m` output not readable: {exc}")
