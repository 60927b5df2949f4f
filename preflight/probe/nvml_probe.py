"""NVML under a deadline: the run's one NVML walk and the PCIe link sample, each in a child process.

The pytest process never calls NVML itself. :func:`take_snapshot` runs
``python -m preflight.probe.nvml_child snapshot`` through the node's command runner (``Transports.run``:
its own session, the whole process group killed at the deadline) and returns its :class:`NvmlSnapshot`;
a child that does not answer in time gives a snapshot whose error is ``NVML_TIMEOUT`` and the run
goes on. :func:`sample_pcie_links` is the same for the current PCIe link of some GPUs, and
:class:`PcieSampler` runs that sample in the background while a load (the all-reduce sweep) runs (a
child it streams to and stops, which a run-to-completion runner cannot express: it starts it itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from preflight.probe.command import CommandResult, CommandRunner
from preflight.probe.nvml_snapshot import NvmlSnapshot, PcieSample, SnapshotError
from preflight.probe.nvml_transport import NvmlTransport
from preflight.workers.lifeline import die_with_parent

CHILD_MODULE = "preflight.probe.nvml_child"
NVML_TIMEOUT_S = 60.0
"""A healthy 8-GPU node answers the whole walk in seconds (10-20 s without persistence mode);
NVML on a sick node can block for minutes."""
PCIE_SAMPLE_TIMEOUT_S = 20.0
STOP_GRACE_S = 10.0
_START_DIR = os.getcwd()  # what an empty sys.path entry meant when this process started


def timeout_error(timeout_s: float) -> SnapshotError:
    """``NVML_TIMEOUT``: the NVML child did not answer within ``timeout_s`` and was killed."""
    return SnapshotError(
        "NVML_TIMEOUT",
        f"NVML did not answer within {timeout_s:.0f} s",
        "Run `nvidia-smi` (it will hang too) and read `sudo dmesg | grep -i -e xid -e nvrm`; a GPU stuck in "
        "reset or a wedged driver needs a reboot.",
    )


def child_argv(mode: str, transport: NvmlTransport, extra: Sequence[str] = ()) -> list[str]:
    """``python -m preflight.probe.nvml_child <mode> ...`` with this interpreter."""
    return [sys.executable, "-m", CHILD_MODULE, mode, *transport.child_args(), *extra]


def child_env() -> dict[str, str]:
    """preflight's own environment with ``PYTHONPATH`` set so the child imports what this process imports
    (preflight from a checkout, a test's fake library). The NVML child is preflight's helper, not the job:
    it never reads the job's variables (NVML ignores ``CUDA_VISIBLE_DEVICES``)."""
    env = dict(os.environ)
    paths = [entry or _START_DIR for entry in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _document(result: CommandResult) -> dict[str, Any]:
    """The JSON document the child printed last; raises ValueError when there is none."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the NVML child printed nothing")
    document = json.loads(lines[-1])
    if not isinstance(document, dict):
        raise ValueError("the NVML child printed something other than a JSON object")
    return document


def _probe_failed(result: CommandResult, problem: str) -> SnapshotError:
    tail = (result.stderr.strip().splitlines() or [""])[-1]
    return SnapshotError(
        "NVML_PROBE_FAILED",
        f"the NVML probe failed: {problem}" + (f" ({result.describe_failure()})" if result.describe_failure() else ""),
        "Run `python -m preflight.probe.nvml_child snapshot` by hand to see the error; then `nvidia-smi -q`.",
        tail,
    )


def probe_failed_error(problem: str) -> SnapshotError:
    """NVML_PROBE_FAILED for a probe that raised before its child could answer."""
    return SnapshotError("NVML_PROBE_FAILED", f"the NVML probe failed: {problem}",
                         "Run `python -m preflight.probe.nvml_child snapshot` by hand to see the error; then "
                         "`nvidia-smi -q`.", problem)


def take_snapshot(transport: NvmlTransport, runner: CommandRunner, timeout_s: float = NVML_TIMEOUT_S) -> NvmlSnapshot:
    """The run's NVML walk in a child process (started by the node's command ``runner``), bounded by
    ``timeout_s``. Never raises, never hangs."""
    result = runner(child_argv("snapshot", transport), timeout_s=timeout_s, env=child_env())
    if result.timed_out:
        return NvmlSnapshot(label=transport.label, error=timeout_error(timeout_s), duration_s=result.duration_s)
    try:
        return NvmlSnapshot.from_json(_document(result))
    except (ValueError, KeyError, TypeError) as exc:
        return NvmlSnapshot(label=transport.label, error=_probe_failed(result, str(exc)), duration_s=result.duration_s)


def sample_pcie_links(
    indices: Sequence[int],
    transport: NvmlTransport,
    runner: CommandRunner,
    timeout_s: float = PCIE_SAMPLE_TIMEOUT_S,
    duration_s: float = 0.0,
    interval_s: float = 0.5,
) -> PcieSample:
    """Current PCIe generation/width of the GPUs at NVML ``indices`` (best over ``duration_s``), bounded."""
    extra = _pcie_args(indices, duration_s, interval_s)
    result = runner(child_argv("pcie", transport, extra), timeout_s=timeout_s, env=child_env())
    if result.timed_out:
        return PcieSample(error=timeout_error(timeout_s), duration_s=result.duration_s)
    try:
        return PcieSample.from_json(_document(result))
    except (ValueError, KeyError, TypeError) as exc:
        return PcieSample(error=_probe_failed(result, str(exc)), duration_s=result.duration_s)


def _pcie_args(indices: Sequence[int], duration_s: float, interval_s: float) -> list[str]:
    return ["--gpus", ",".join(str(i) for i in indices), "--duration-s", str(duration_s),
            "--interval-s", str(interval_s)]


class PcieSampler:
    """Sample the PCIe links in the background while a load runs; :meth:`stop` returns the best seen.

    ``with PcieSampler([0, 1], transport) as sampler: run_the_sweep()`` then ``sampler.result``.
    The child samples every ``interval_s`` until :meth:`stop` closes its stdin, or ``max_duration_s``.
    """

    def __init__(self, indices: Sequence[int], transport: NvmlTransport, *, max_duration_s: float = 300.0,
                 interval_s: float = 0.5) -> None:
        self.indices = tuple(indices)
        self.transport = transport
        self.argv = child_argv("pcie", transport, [*_pcie_args(indices, max_duration_s, interval_s),
                                                   "--until-stdin-closes"])
        self.result: PcieSample | None = None
        self._process: subprocess.Popen[str] | None = None
        self._started = 0.0

    def start(self) -> PcieSampler:
        """Start the sampling child (its own session, so :meth:`stop` can kill its whole group)."""
        self._started = time.monotonic()
        self._process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE,
            start_new_session=True, env=child_env(), text=True, errors="replace",
            preexec_fn=die_with_parent,  # noqa: PLW1509 - dies with preflight; only prctl runs before exec
        )
        return self

    def stop(self, timeout_s: float = STOP_GRACE_S) -> PcieSample:
        """Ask the child to report (close its stdin), wait up to ``timeout_s``, kill it if NVML hangs."""
        process = self._process
        if process is None:
            raise RuntimeError("PcieSampler.stop() before start()")
        try:
            out, err = process.communicate(timeout=timeout_s)  # closes the child's stdin first
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            self.result = PcieSample(error=timeout_error(timeout_s), duration_s=time.monotonic() - self._started)
            return self.result
        finished = CommandResult(tuple(self.argv), process.returncode, out, err,
                                 duration_s=time.monotonic() - self._started)
        try:
            self.result = PcieSample.from_json(_document(finished))
        except (ValueError, KeyError, TypeError) as exc:
            self.result = PcieSample(error=_probe_failed(finished, str(exc)), duration_s=finished.duration_s)
        return self.result

    def __enter__(self) -> PcieSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
