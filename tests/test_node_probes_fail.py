"""A probe that raises (its command runner fails in a way the runner does not catch, as a run
being torn down by a signal can make it) leaves a fact naming the failure, never an IndexError
in whoever reads the node model next (seen on a SIGTERM 12 s into a run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from preflight.node import Node
from preflight.node.transports import Transports
from preflight.probe.command import CommandResult


def _raising_runner(argv: Sequence[str], timeout_s: float = 0.0, env: Mapping[str, str] | None = None) -> CommandResult:
    raise OSError(24, "Too many open files")


def test_both_background_probes_answer_with_the_failure() -> None:
    node = Node(Transports(run=_raising_runner), nproc=None)
    assert node.torch.problem is not None and "Too many open files" in node.torch.problem
    assert not node.torch.installed
    assert node.nvml.error is not None and node.nvml.error.code == "NVML_PROBE_FAILED"
    assert "Too many open files" in node.nvml.error.cause
    assert node.as_dict()["job"]["ranks"] >= 1  # the job is still decided (CPU ranks)
