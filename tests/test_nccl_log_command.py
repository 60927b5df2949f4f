"""``preflight nccl-log FILE [--json]`` on every shared capture, stdin, and bad input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.commands.nccl_log import main
from preflight.errors import UsageError
from tests.conftest import REPO_ROOT, shared_fixtures_dir


def _all_files() -> list[str]:
    root = shared_fixtures_dir()
    found = [f"{d}/{p.name}" for d in ("nccl_logs", "nccl_tests") if (root / d).is_dir() for p in sorted((root / d).iterdir())]
    return found or ["(absent)"]


@pytest.mark.parametrize("relative", _all_files())
def test_every_shared_file_as_json(shared_fixtures: Path, relative: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(shared_fixtures / relative), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"nccl_version", "transports", "warnings", "timeouts"}
    assert data["nccl_version"] is None or isinstance(data["nccl_version"], str)
    assert set(data["transports"]) <= {"P2P", "SHM", "NET", "NVLS", "COLLNET"}
    assert all(isinstance(n, int) and n > 0 for n in data["transports"].values())
    if relative.startswith("nccl_tests/"):
        assert data["nccl_tests"]["peak_busbw_gbps"] > 0


@pytest.mark.parametrize("relative", _all_files())
def test_every_shared_file_as_text(shared_fixtures: Path, relative: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(shared_fixtures / relative)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NCCL log: ") and "NCCL version: " in out and "What the log shows:" in out


def test_json_of_a_timeout_names_the_collective(shared_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(shared_fixtures / "nccl_logs" / "watchdog-timeout-old-torch-format-E-ProcessGroupNCCL.txt"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["timeouts"] == [{
        "rank": 3, "collective": "ALLREDUCE", "seq_num": 4967570, "numel_in": 73728, "numel_out": 73728,
        "timeout_ms": 1800000, "ran_for_ms": 1800542, "line_no": 1,
        "line": data["timeouts"][0]["line"],
    }]
    assert data["timeouts"][0]["line"].startswith("(RayWorkerVllm pid=1394) [E ProcessGroupNCCL.cpp:475]")


def test_json_of_channels_counts_transports(shared_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(shared_fixtures / "nccl_logs" / "4xH100-Lambda-NCCL-2.26.2-init-lines-author-elided.txt"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["nccl_version"] == "2.26.2" and data["transports"] == {"P2P": 1}
    assert data["pairs"][0]["explanation"] == "rank 2 (GPU2) -> rank 3 (GPU3) over P2P/direct pointer on 1 channel: direct peer-to-peer"


def test_text_explains_shm_and_warnings(test_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(test_data / "nccl" / "shm-nvls-collnet-tagged.log")])
    out = capsys.readouterr().out
    assert "NCCL version: 2.21.5" in out
    assert "rank 0 (GPU0) -> rank 1 (GPU1) over SHM: peer-to-peer was not used" in out
    assert "NVLS (NVLink SHARP) was set up with 16 channels." in out
    assert "line 18: enqueue.cc:1556: Cuda failure 2 'out of memory'" in out
    assert "rank 2: _ALLGATHER_BASE (SeqNum 7, 4096 elements) did not finish after 60012 ms (timeout 60000 ms)" in out
    assert "rank 3: a collective (not named in the log) did not finish" in out


def test_text_summarizes_an_nccl_tests_table(shared_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(shared_fixtures / "nccl_tests" / "8xH100-SXM-single-node-all_reduce_perf-128M-4G-NVLS.txt")])
    out = capsys.readouterr().out
    assert "peak busbw 476.53 GB/s at 4 GiB (the largest size tested), average 439.37 GB/s over 6 sizes" in out


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = "h:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9\nh:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["file"] == "-" and data["nccl_version"] == "2.27.5" and data["transports"] == {"SHM": 1}


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read .*no-such.log"):
        main([str(tmp_path / "no-such.log")])


def test_binary_file_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "core"
    path.write_bytes(b"\x7fELF\x00\x01\x02")
    with pytest.raises(UsageError, match="binary data"):
        main([str(path)])


def test_bad_option_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --yaml"):
        main(["x.log", "--yaml"])
    with pytest.raises(UsageError, match="required: file"):
        main([])


@pytest.mark.e2e
def test_cli_exit_codes(tmp_path: Path, shared_fixtures: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    ok = subprocess.run([sys.executable, "-m", "preflight", "nccl-log", "--json",
                         str(shared_fixtures / "nccl_logs" / "warn-alloc-cuda-failure-2-out-of-memory-P2P-CUMEM.txt")],
                        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["warnings"][0]["message"] == "Cuda failure 2 'out of memory'"
    bad = subprocess.run([sys.executable, "-m", "preflight", "nccl-log", str(tmp_path / "missing.log")],
                         capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("preflight: error: cannot read")
