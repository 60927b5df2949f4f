"""``preflight topology``: saved captures, stdin, the live node through a recorded runner."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from preflight.commands import topology
from preflight.errors import UsageError
from preflight.probe.command import CommandResult
from tests.conftest import REPO_ROOT, TEST_DATA

EXPECTED = TEST_DATA / "topo" / "expected"
LAMBDA = "4xH100-SXM-Lambda-NV18-PHB-NIC-header-7-leading-spaces.txt"


class RecordedRunner:
    """Answers ``nvidia-smi topo -m`` with a fixed result and remembers the deadline it got."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float = 20.0,
                 env: Mapping[str, str] | None = None) -> CommandResult:
        if tuple(argv) != topology.LIVE_ARGV:
            raise AssertionError(f"unexpected command {argv!r}")
        self.calls.append((tuple(argv), timeout_s))
        return self.result


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], **kwargs: object) -> dict[str, Any]:
    assert topology.main(argv, **kwargs) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.parametrize("twin", sorted(EXPECTED.glob("*.json")), ids=lambda p: p.stem)
def test_json_gives_gpus_and_links_as_written(shared_fixtures: Path, capsys: pytest.CaptureFixture[str],
                                              twin: Path) -> None:
    expected = json.loads(twin.read_text())
    capture = shared_fixtures / "topo" / f"{twin.stem}.txt"
    if "error" in expected:
        with pytest.raises(UsageError) as caught:
            topology.main([str(capture), "--json"])
        assert expected["error"] in str(caught.value) and "\n" not in str(caught.value)
        return
    data = _json(capsys, [str(capture), "--json"])
    assert data["gpus"] == expected["gpus"]
    assert data["links"] == expected["links"]
    assert all(data["links"][i][i] == "X" for i in range(len(data["gpus"])))
    assert data["summary"] == data["classification"]["summary"]
    assert set(data["verdicts"]) == {"layout", "nvlink_balance", "affinity"}


def test_text_explains_the_layout_and_the_fix(shared_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = shared_fixtures / "topo" / "8xA100-PCIe-NV12-bridge-pairs-NODE-SYS.txt"
    assert topology.main([str(capture)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "8 GPUs, NVLink (NV12) only within pairs (0-1, 2-3, 4-5, 6-7)" in first
    # issue 24 item 4: a bridged-pair node costs nothing without a link-bound plan: a PASS saying what it means
    assert "layout: PASS" in out and "training works either way" in out
    assert "GPU0  X     NV12  NODE  NODE  SYS" in out


def test_stdin_dash(shared_fixtures: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO((shared_fixtures / "topo" / LAMBDA).read_text()))
    data = _json(capsys, ["-", "--json"])
    assert data["source"] == "stdin"
    assert data["classification"]["layout"] == "nvswitch"
    assert data["nics"] == ["NIC0"] and data["nic_devices"] == ["mlx5_0"]


def test_live_node_runs_nvidia_smi_with_a_deadline(shared_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (shared_fixtures / "topo" / LAMBDA).read_text()
    runner = RecordedRunner(CommandResult(topology.LIVE_ARGV, 0, text, ""))
    data = _json(capsys, ["--json", "--timeout", "30"], runner=runner)
    assert runner.calls == [(topology.LIVE_ARGV, 30.0)]
    assert data["source"] == "nvidia-smi topo -m"
    assert data["links"][0] == ["X", "NV18", "NV18", "NV18"]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (CommandResult(topology.LIVE_ARGV, None, "", "", not_found=True), "nvidia-smi not found on PATH"),
        (CommandResult(topology.LIVE_ARGV, None, "", "", timed_out=True, duration_s=180.0), "no answer within 180 s"),
        (CommandResult(topology.LIVE_ARGV, 9, "", "NVIDIA-SMI has failed because it couldn't communicate with "
                       "the NVIDIA driver."), "exit code 9"),
        (CommandResult(topology.LIVE_ARGV, 0, "No devices were found\n", ""), "first line: 'No devices were found'"),
    ],
    ids=["absent", "hung", "failed", "no-gpus"],
)
def test_live_node_problems_are_one_line_usage_errors(result: CommandResult, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        topology.main([], runner=RecordedRunner(result))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read .*missing.txt"):
        topology.main([str(tmp_path / "missing.txt")])
    damaged = TEST_DATA / "topo" / "own" / "ragged-row-missing-cell.txt"
    with pytest.raises(UsageError, match="row GPU2: expected 4 link cells"):
        topology.main([str(damaged)])
    with pytest.raises(UsageError, match="--timeout must be > 0"):
        topology.main(["--timeout", "0", str(damaged)])
    with pytest.raises(UsageError, match="unrecognized arguments"):
        topology.main(["--bogus"])


@pytest.mark.e2e
def test_cli_exit_codes(shared_fixtures: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": "/nonexistent"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "preflight", "topology", *args],
                              capture_output=True, text=True, env=env, timeout=120)

    ok = run(str(shared_fixtures / "topo" / LAMBDA), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    live = run()
    assert live.returncode == 2
    assert live.stderr.strip().splitlines() == ["preflight: error: nvidia-smi not found on PATH: no NVIDIA driver "
                                                "here; pass a saved capture (FILE or -)"]
    bad = run(str(TEST_DATA / "topo" / "own" / "asymmetric.txt"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "not symmetric" in bad.stderr
