"""All NVML work in a child process under a deadline: the snapshot, the PCIe sample, the transport."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

import pytest

from preflight.probe.command import CommandResult, run_command
from preflight.probe.nvml_child import run
from preflight.probe.nvml_probe import PcieSampler, child_argv, sample_pcie_links, take_snapshot
from preflight.probe.nvml_transport import REAL, NvmlTransport, TransportError
from tests.fakes.nvml import FACTORY, fake_transport, walk_fake

pytestmark = pytest.mark.e2e


def test_the_child_returns_the_walk_of_the_fake() -> None:
    snapshot = take_snapshot(fake_transport("8x-h100-sxm", ecc_volatile={3: 2}), run_command, timeout_s=60)
    assert snapshot.error is None and snapshot.label == "fake:8x-h100-sxm"
    assert snapshot.gpus[3].ecc_uncorrected_volatile == 2
    in_process = walk_fake("8x-h100-sxm", ecc_volatile={3: 2})
    assert (snapshot.gpus, snapshot.pairs) == (in_process.gpus, in_process.pairs)
    assert len(snapshot.pairs) == 28 and snapshot.duration_s > 0


def test_a_hung_gpu_becomes_one_timeout_and_the_child_is_killed() -> None:
    started = time.monotonic()
    snapshot = take_snapshot(fake_transport("2x-h100-nvl-hung"), run_command, timeout_s=2)
    elapsed = time.monotonic() - started
    assert snapshot.error is not None and snapshot.error.code == "NVML_TIMEOUT"
    assert "within 2 s" in snapshot.error.cause and snapshot.gpus == ()
    assert elapsed < 30  # killed at the deadline, not left to hang (generous: the machine is shared)


def test_a_hang_fault_on_any_machine_times_out_too() -> None:
    snapshot = take_snapshot(fake_transport("8x-l40s", hang_gpus={5}), run_command, timeout_s=2)
    assert snapshot.error is not None and snapshot.error.code == "NVML_TIMEOUT"


def test_the_real_library_on_this_machine() -> None:
    snapshot = take_snapshot(REAL, run_command, timeout_s=60)
    if snapshot.error is None:
        pytest.skip("an NVIDIA driver is present here; this test covers machines without one")
    assert snapshot.error.code == "NVML_LIBRARY_NOT_FOUND" and "libnvidia-ml.so.1" in snapshot.error.cause
    assert snapshot.label == "pynvml"


class Recorded:
    """A command runner that records the argv and deadline and answers a canned result."""

    def __init__(self, stdout: str = "", stderr: str = "", returncode: int | None = 0, timed_out: bool = False):
        self.result = (stdout, stderr, returncode, timed_out)
        self.calls: list[tuple[tuple[str, ...], float, Mapping[str, str] | None]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float = 20.0,
                 env: Mapping[str, str] | None = None) -> CommandResult:
        self.calls.append((tuple(argv), timeout_s, env))
        out, err, code, timed_out = self.result
        duration = timeout_s if timed_out else 0.1
        return CommandResult(tuple(argv), code, out, err, timed_out=timed_out, duration_s=duration)


def test_the_deadline_and_the_transport_reach_the_child() -> None:
    runner = Recorded(stdout=json.dumps(walk_fake("1x-a10g").to_json()) + "\n")
    transport = fake_transport("1x-a10g")
    snapshot = take_snapshot(transport, timeout_s=7.5, runner=runner)
    argv, deadline, env = runner.calls[0]
    assert deadline == 7.5 and argv[1:4] == ("-m", "preflight.probe.nvml_child", "snapshot")
    assert "--library-factory" in argv and FACTORY in argv and env is not None and "PYTHONPATH" in env
    assert snapshot.error is None and len(snapshot.gpus) == 1


@pytest.mark.parametrize(("stdout", "stderr", "code"), [
    ("", "Traceback ...\nImportError: no module", 1),
    ("not json\n", "", 0),
    ('{"label": "x"}\n', "", 0),
    ("[1, 2]\n", "", 0),
])
def test_a_child_that_answers_nonsense_is_a_probe_failure(stdout: str, stderr: str, code: int) -> None:
    snapshot = take_snapshot(fake_transport("1x-a10g"), runner=Recorded(stdout, stderr, code))
    assert snapshot.error is not None and snapshot.error.code == "NVML_PROBE_FAILED"
    assert snapshot.label == "fake:1x-a10g"


def test_a_timed_out_runner_is_nvml_timeout() -> None:
    snapshot = take_snapshot(REAL, timeout_s=3, runner=Recorded(timed_out=True, returncode=None))
    assert snapshot.error is not None and snapshot.error.code == "NVML_TIMEOUT"


@pytest.mark.parametrize("factory", ["no_colon", "tests.fakes.nope:make", "tests.fakes.nvml:no_such_function"])
def test_a_bad_library_factory_is_a_typed_error_not_a_traceback(factory: str) -> None:
    transport = NvmlTransport(factory, "{}", "fake:bad")
    with pytest.raises(TransportError):
        transport.factory()
    document = run(["snapshot", *transport.child_args()])
    assert document["error"]["code"] == "NVML_PROBE_FAILED" and document["label"] == "fake:bad"


def test_transport_arguments_round_trip_through_the_child_command_line() -> None:
    transport = fake_transport("2x-mixed-a6000-h100", persistence_off={1})
    argv = child_argv("snapshot", transport)
    document = run(argv[3:])
    assert document["label"] == "fake:2x-mixed-a6000-h100"
    assert [g["persistence_mode"] for g in document["gpus"]] == [True, False]


# -- the PCIe link sample ------------------------------------------------------------------------------


def test_pcie_sample_at_idle_shows_the_trained_down_link() -> None:
    sample = sample_pcie_links([0, 3], fake_transport("8x-l40s"), run_command, timeout_s=60)
    assert sample.error is None and sample.link(0) == (1, 16) and sample.link(3) == (1, 16)
    assert sample.link(5) is None


def test_pcie_sampler_reports_the_link_under_load() -> None:
    sampler = PcieSampler([0, 2], fake_transport("8x-l40s", under_load=True, pcie_current={2: (4, 8)}),
                          interval_s=0.1).start()
    time.sleep(0.5)
    sample = sampler.stop(timeout_s=60)
    assert sample.error is None and sample.link(0) == (4, 16) and sample.link(2) == (4, 8)
    assert all(link.samples >= 1 for link in sample.links)


def test_pcie_sampler_on_a_hung_gpu_is_a_timeout() -> None:
    # a grace of 2 s, not the default 10: the child blocks in NVML for ever, so any grace runs out the same way
    sample = PcieSampler([0, 1], fake_transport("2x-h100-nvl-hung"), interval_s=0.1).start().stop(timeout_s=2.0)
    assert sample is not None and sample.error is not None and sample.error.code == "NVML_TIMEOUT"


def test_pcie_sample_with_a_bounded_call_on_a_hung_gpu() -> None:
    sample = sample_pcie_links([1], fake_transport("2x-h100-nvl-hung"), run_command, timeout_s=2)
    assert sample.error is not None and sample.error.code == "NVML_TIMEOUT"
