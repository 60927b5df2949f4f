"""The NCCL log analyzer on every shared capture, and on logs written for the cases they lack."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.parse.nccl_explain import explain
from preflight.parse.nccl_log import NcclLogError, analyze, device_label
from tests.conftest import shared_fixtures_dir


def _names(folder: str) -> list[str]:
    path = shared_fixtures_dir() / folder
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else ["(absent)"]


# Expectations written by reading each file.
LOGS: dict[str, dict[str, object]] = {
    "2GPU-torch-watchdog-timeout-BROADCAST-SeqNum1-deepspeed.txt": {
        "version": None, "transports": {}, "warnings": 0,
        "timeouts": [(0, "BROADCAST", 1, 131072000, 600000, 600081), (1, "BROADCAST", 1, 131072000, 600000, 600088)],
    },
    "4xH100-Lambda-NCCL-2.26.2-init-lines-author-elided.txt": {
        "version": "2.26.2", "transports": {"P2P": 1}, "mechanisms": {"P2P/direct pointer": 1}, "warnings": 0, "timeouts": [],
    },
    "8xH100-P2P-CUMEM-ring-channels-connected-all-rings.txt": {
        "version": None, "transports": {"P2P": 28}, "mechanisms": {"P2P/CUMEM": 28}, "warnings": 0, "timeouts": [],
    },
    "P2P-IPC-read-2GPU-deepseek-v2.5-channels.txt": {
        "version": None, "transports": {"P2P": 6}, "mechanisms": {"P2P/IPC/read": 6}, "warnings": 0, "timeouts": [],
    },
    "error-torch-DistBackendError-unhandled-cuda-error-NCCL-2.21.5-out-of-memory-traceback.txt": {
        "version": "2.21.5", "transports": {}, "warnings": 0, "timeouts": [],
        "errors": [("unhandled cuda error", "Cuda failure 'out of memory'")],
    },
    "error-torch-rank0-prefixed-unhandled-cuda-error-NCCL-2.20.5-calloc-async.txt": {
        "version": "2.20.5", "transports": {}, "warnings": 0, "timeouts": [],
        "errors": [("unhandled cuda error", "Failed to CUDA calloc async 4 bytes")],
    },
    "old-format-busid-ranks-P2P-IPC-read-and-NET-Socket-2node-workstation.txt": {
        "version": None, "transports": {"NET": 4, "P2P": 4},
        "mechanisms": {"NET/Socket/0": 4, "P2P/IPC/read": 4}, "warnings": 0, "timeouts": [],
    },
    "warn-GB200-strongstream-commDestroy-unspecified-launch-failure-timestamped.txt": {
        "version": None, "transports": {}, "warnings": 4, "timeouts": [],
        "first_warning": ("misc/strongstream.cc:424", "ncclStrongStreamSynchronize", "Cuda failure 'unspecified launch failure'"),
    },
    "warn-RTXPRO6000-Blackwell-enqueue-cuda-failure-700-illegal-memory-access.txt": {
        "version": None, "transports": {}, "warnings": 1, "timeouts": [],
        "first_warning": ("enqueue.cc:1556", None, "Cuda failure 700 'an illegal memory access was encountered'"),
    },
    "warn-alloc-cuda-failure-2-out-of-memory-P2P-CUMEM.txt": {
        "version": None, "transports": {}, "warnings": 1, "timeouts": [],
        "first_warning": ("include/alloc.h:228", None, "Cuda failure 2 'out of memory'"),
    },
    "warn-nvls-cuda-failure-1-invalid-argument-CUMEM-disabled.txt": {
        "version": None, "transports": {}, "warnings": 1, "timeouts": [],
        "first_warning": ("transport/nvls.cc:621", None, "Cuda failure 1 'invalid argument'"),
    },
    "watchdog-timeout-mismatched-allreduce-sizes-2node.txt": {
        "version": None, "transports": {}, "warnings": 0,
        "timeouts": [(8, "ALLREDUCE", 218, 1299726652, 600000, 600001), (0, "ALLREDUCE", 218, 1, 600000, 600001)],
    },
    "watchdog-timeout-old-torch-format-E-ProcessGroupNCCL.txt": {
        "version": None, "transports": {}, "warnings": 0,
        "timeouts": [(3, "ALLREDUCE", 4967570, 73728, 1800000, 1800542)],
    },
}


@pytest.mark.parametrize("name", _names("nccl_logs"))
def test_every_shared_log(shared_fixtures: Path, name: str) -> None:
    log = analyze((shared_fixtures / "nccl_logs" / name).read_text())
    expected = LOGS[name]
    assert log.nccl_version == expected["version"]
    assert log.transports() == expected["transports"]
    if "mechanisms" in expected:
        assert log.mechanisms() == expected["mechanisms"]
    assert len(log.warnings) == expected["warnings"]
    got = [(t.rank, t.collective, t.seq_num, t.numel_in, t.timeout_ms, t.ran_for_ms) for t in log.timeouts]
    assert got == expected["timeouts"]
    assert [(e.reason, e.last_error) for e in log.errors] == expected.get("errors", [])
    if "first_warning" in expected:
        first = log.warnings[0]
        assert (first.source, first.function, first.message) == expected["first_warning"]


# NCCL lines inside the nccl-tests captures: only the H800 file has any (Destroy COMPLETE lines),
# and the 2.19.4 file names the NCCL library it was built against (nccl-library=21903).
TESTS_VERSIONS = {"8xA100-SXM4-80GB-all_reduce_perf-nccl-tests-2.19.4-new-header-format.txt": "2.19.3"}


@pytest.mark.parametrize("name", _names("nccl_tests"))
def test_nccl_lines_in_every_nccl_tests_capture(shared_fixtures: Path, name: str) -> None:
    log = analyze((shared_fixtures / "nccl_tests" / name).read_text())
    assert log.transports() == {}
    assert log.warnings == () and log.timeouts == () and log.errors == ()
    assert log.nccl_version == TESTS_VERSIONS.get(name)
    if name.startswith("8xH800"):
        assert log.nccl_line_count == 5
        assert [(r.rank, r.cuda_dev, r.bus_id) for r in log.ranks][:2] == [(0, 0, "f000"), (1, 1, "34000")]


def test_pairs_in_the_8x_h100_ring(shared_fixtures: Path) -> None:
    log = analyze((shared_fixtures / "nccl_logs" / "8xH100-P2P-CUMEM-ring-channels-connected-all-rings.txt").read_text())
    pairs = {(p.src_rank, p.dst_rank): p.transports for p in log.pairs()}
    assert pairs[(4, 5)] == {"P2P/CUMEM": 10}
    assert pairs[(7, 0)] == {"P2P/CUMEM": 5}
    assert set(pairs) == {(0, 1), (2, 3), (4, 5), (5, 6), (6, 7), (7, 0)}


def test_old_format_uses_bus_ids_and_directions(shared_fixtures: Path) -> None:
    log = analyze((shared_fixtures / "nccl_logs" / "old-format-busid-ranks-P2P-IPC-read-and-NET-Socket-2node-workstation.txt").read_text())
    received = [c for c in log.connections if c.direction == "receive"]
    assert {(c.src_rank, c.src_device, c.dst_device) for c in received} == {(9, "51000", "4b000"), (8, "4b000", "4b000")}
    assert all(c.mechanism == "Socket/0" for c in received)
    explained = explain(log)
    assert any("rank 0 (GPU@4b000) -> rank 7 (GPU@cf000)" in p["explanation"] for p in explained["pairs"])


def test_written_log_with_prefixes_shm_nvls_and_collnet(test_data: Path) -> None:
    log = analyze((test_data / "nccl" / "shm-nvls-collnet-tagged.log").read_text())
    assert log.nccl_version == "2.21.5"
    # Channel 01 0->1 appears twice: counted once.
    assert log.transports() == {"COLLNET": 1, "P2P": 2, "SHM": 3}  # NVLS set-up lines are not connections
    assert log.nvls_ranks == 2
    assert log.nvls_channels == 16 and log.nvls_used
    collnet = next(c for c in log.connections if c.family == "COLLNET")
    assert (collnet.channel, collnet.src_rank, collnet.dst_rank, collnet.direction) == (0, 0, None, "send")
    assert [(w.source, w.message) for w in log.warnings] == [("enqueue.cc:1556", "Cuda failure 2 'out of memory'")]
    assert [(t.rank, t.collective, t.seq_num, t.numel_out) for t in log.timeouts] == [
        (2, "_ALLGATHER_BASE", 7, 16384),
        (3, None, None, None),
    ]
    assert {(r.rank, r.cuda_dev, r.bus_id) for r in log.ranks} == {(0, 0, "18000"), (1, 1, "2a000")}


def test_shm_pair_is_explained_as_no_peer_to_peer(test_data: Path) -> None:
    explained = explain(analyze((test_data / "nccl" / "shm-nvls-collnet-tagged.log").read_text()))
    sentences = [p["explanation"] for p in explained["pairs"]]
    assert "rank 0 (GPU0) -> rank 1 (GPU1) over SHM: peer-to-peer was not used (data goes through host shared memory)" in sentences
    shm = next(p for p in explained["pairs"] if (p["src_rank"], p["dst_rank"]) == (0, 1))
    assert shm["peer_to_peer"] is False and shm["channels"] == 2
    hint = explained["warnings"][0]["hint"]
    assert hint is not None and hint.startswith("the GPU ran out of memory")
    assert "NCCL_BUFFSIZE" in hint and "NCCL_P2P_DISABLE" not in hint  # trading memory for bandwidth is no fix


def test_shm_only_log_says_p2p_was_not_used() -> None:
    text = "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
    explained = explain(analyze(text))
    assert any("no connection used peer-to-peer" in f for f in explained["findings"])


def test_first_collective_timeout_points_at_p2p(shared_fixtures: Path) -> None:
    log = analyze((shared_fixtures / "nccl_logs" / "2GPU-torch-watchdog-timeout-BROADCAST-SeqNum1-deepspeed.txt").read_text())
    findings = explain(log)["findings"]
    assert any("very first collective (BROADCAST, SeqNum 1)" in f for f in findings)


def test_mismatched_sizes_are_called_a_desync(shared_fixtures: Path) -> None:
    log = analyze((shared_fixtures / "nccl_logs" / "watchdog-timeout-mismatched-allreduce-sizes-2node.txt").read_text())
    assert any("desync" in f for f in explain(log)["findings"])


def test_conflicting_versions_give_no_single_version() -> None:
    log = analyze("NCCL version 2.18.1+cuda12.1\nNCCL version 2.21.5+cuda12.4\n")
    assert log.nccl_version is None and log.versions == ("2.18.1", "2.21.5")


def test_lines_without_via_are_not_connections() -> None:
    log = analyze("h:1:1 [0] NCCL INFO Channel 01/02 :    0   7   6   5\nh:1:1 [0] NCCL INFO Trees [0] 1/8/-1->0->-1\n")
    assert log.connections == () and log.nccl_line_count == 2


def test_binary_text_is_refused() -> None:
    with pytest.raises(NcclLogError, match="NUL bytes"):
        analyze("NCCL INFO\x00\x01")


@pytest.mark.parametrize(("device", "label"), [("0", "GPU0"), ("7", "GPU7"), ("4b000", "GPU@4b000"), ("51000", "GPU@51000"), (None, None)])
def test_device_labels(device: str | None, label: str | None) -> None:
    assert device_label(device) == label


def test_errors_with_inline_detail_and_without_detail() -> None:
    text = (
        "RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:1191, invalid usage, NCCL version 2.14.3\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network error, NCCL version 2.14.3\n"
        "Last error: socket timeout\n"
    )
    log = analyze(text)
    assert [(e.reason, e.last_error, e.line_no) for e in log.errors] == [
        ("invalid usage", None, 1),
        ("remote process exited or there was a network error", "socket timeout", 3),
    ]
    assert log.nccl_version == "2.14.3"
