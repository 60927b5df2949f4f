"""``preflight topology [FILE | -] [--json]``: explain an ``nvidia-smi topo -m`` matrix.

With FILE (or ``-`` for stdin) it explains a saved capture, so a person can paste what a colleague
sent; without one it asks the live node. The explanation is the layout (NVSwitch, NVLink pairs,
PCIe only, ...), what it means for FSDP/ZeRO-3, GPUs with fewer NVLinks than their peers, and
which CPUs/NUMA node each GPU sits next to. Exit 0 when it explained the matrix, 2 when it could not.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from preflight.errors import UsageError
from preflight.inputs import STDIN, read_text, shown
from preflight.options import UsageParser
from preflight.judge.topology import classify, judge_affinity, judge_layout, judge_nvlink_balance
from preflight.outcome import Verdict
from preflight.parse.topo import TopologyParseError, TopoMatrix, parse_topo_matrix
from preflight.probe.command import CommandRunner, run_command

LIVE_ARGV = ("nvidia-smi", "topo", "-m")
DEFAULT_TIMEOUT_S = 180.0  # topo -m took 112 s on one AMD host (NVIDIA/nccl#557)


def _parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="preflight topology",
        description="Explain an `nvidia-smi topo -m` matrix: how the GPUs are linked and what that means "
        "for DDP/FSDP/DeepSpeed. Reads FILE, stdin with '-', or runs nvidia-smi on this node.",
    )
    parser.add_argument("file", nargs="?", metavar="FILE | -", help="saved `nvidia-smi topo -m` output ('-' = stdin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"deadline for the live `nvidia-smi topo -m` (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    return parser


def main(argv: list[str], runner: CommandRunner = run_command) -> int:
    """Entry point of the sub-command; ``runner`` is replaced by the tests."""
    args = _parser().parse_args(argv)
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    text, source = _read(args.file, runner, args.timeout)
    try:
        matrix = parse_topo_matrix(text)
    except TopologyParseError as exc:
        raise UsageError(f"cannot read the topology from {source}: {exc}") from None
    verdicts = {
        "layout": judge_layout(matrix),
        "nvlink_balance": judge_nvlink_balance(matrix),
        "affinity": judge_affinity(matrix),
    }
    if args.json:
        print(json.dumps(explain(matrix, verdicts, source), indent=2))
    else:
        print(render_text(matrix, verdicts, source))
    return 0


def _read(file: str | None, runner: CommandRunner, timeout_s: float) -> tuple[str, str]:
    """The capture's text and where it came from."""
    if file == STDIN:
        return read_text(file), "stdin"
    if file is not None:
        return read_text(file), shown(file)
    result = runner(LIVE_ARGV, timeout_s=timeout_s)
    if result.not_found:
        raise UsageError("nvidia-smi not found on PATH: no NVIDIA driver here; pass a saved capture (FILE or -)")
    if not result.ok:
        raise UsageError(f"`nvidia-smi topo -m` failed: {result.describe_failure()}")
    return result.stdout, "nvidia-smi topo -m"


def _verdict_dict(verdict: Verdict) -> dict[str, Any]:
    return {
        "status": verdict.status.value,
        "code": verdict.code,
        "summary": verdict.summary,
        "remediation": verdict.remediation,
    }


def explain(matrix: TopoMatrix, verdicts: dict[str, Verdict], source: str) -> dict[str, Any]:
    """The ``--json`` object: the parsed matrix, its classification and the verdicts."""
    facts = classify(matrix)
    return {
        "source": source,
        **matrix.as_dict(),
        "classification": facts.as_dict(),
        "summary": facts.summary,
        "verdicts": {name: _verdict_dict(v) for name, v in verdicts.items()},
    }


def render_text(matrix: TopoMatrix, verdicts: dict[str, Verdict], source: str) -> str:
    """A person's view: the summary first, the grid, then what each judgement found."""
    lines = [f"Topology ({source}): {classify(matrix).summary}", ""]
    width = max(4, *(len(c) for row in matrix.links for c in row), *(len(g) for g in matrix.gpus)) + 2
    lines.append((" " * width + "".join(g.ljust(width) for g in matrix.gpus)).rstrip())
    for gpu, row in zip(matrix.gpus, matrix.links, strict=True):
        lines.append((gpu.ljust(width) + "".join(code.ljust(width) for code in row)).rstrip())
    lines.append("")
    for name, verdict in verdicts.items():
        label = f"{verdict.status.value}" + (f" {verdict.code}" if verdict.code else "")
        lines.append(f"{name}: {label}: {verdict.summary}")
        if verdict.remediation and verdict.code:
            lines.append(f"  fix: {verdict.remediation}")
    if matrix.nics:
        nics = ", ".join(
            f"{nic}={device}" if device and device != nic else nic
            for nic, device in zip(matrix.nics, matrix.nic_devices, strict=True)
        )
        lines.append(f"NICs: {nics}")
    lines.extend(f"note: {note}" for note in matrix.notes)
    return "\n".join(lines).rstrip()
