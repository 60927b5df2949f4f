"""NCCL logs and nccl-tests outputs the way people paste them (issue 17), on captures of our own
in ``tests/data/nccl`` (see its README for each shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.cli import main
from preflight.parse import nccl_tests_layout as layout
from preflight.parse.nccl_explain import explain
from preflight.parse.nccl_log import analyze
from preflight.parse.nccl_tests import NcclTestsError, contains_table, looks_like_nccl_tests, parse_nccl_tests
from preflight.parse.pasted import strip_indent, strip_quoting
from tests.conftest import TEST_DATA

NCCL = TEST_DATA / "nccl"


def _text(name: str) -> str:
    return (NCCL / name).read_text()


def _json(capsys: pytest.CaptureFixture[str], name: str) -> dict[str, Any]:
    assert main(["nccl-log", str(NCCL / name), "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def _refusal(capsys: pytest.CaptureFixture[str], name: str) -> str:
    assert main(["nccl-log", str(NCCL / name)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("preflight: error: "), err
    return err[0]


# -- 1. a table indented as a code block; nccl-tests output with no readable row ------------------


@pytest.mark.parametrize(("name", "ranks", "collective", "indent"), [
    ("all_reduce_perf-markdown-indented-4-spaces.txt", 8, "all_reduce_perf", 4),
    ("all_reduce-rst-indented-3-spaces-unnamed.txt", 4, "all_reduce_perf", 3),
])
def test_an_indented_table_is_read(name: str, ranks: int, collective: str, indent: int) -> None:
    text = _text(name)
    assert contains_table(text)
    result = parse_nccl_tests(text)
    assert (len(result.rows), result.ranks, result.collective_named) == (6, ranks, collective)
    assert result.rows[0].size_bytes == 1048576 and result.max_size_bytes == 1073741824
    assert f"every line was indented by {indent} characters; the indentation was removed" in result.notes


@pytest.mark.parametrize(("name", "reason"), [
    ("all_reduce-table-pasted-as-markdown-no-rows.txt", "no nccl-tests table header"),
    ("all_reduce_perf-header-then-killed-no-rows.txt", "the nccl-tests table has a header but no rows"),
])
def test_nccl_tests_output_without_a_readable_row_is_refused(capsys: pytest.CaptureFixture[str], name: str,
                                                             reason: str) -> None:
    assert looks_like_nccl_tests(_text(name))
    line = _refusal(capsys, name)
    assert "is nccl-tests output, but its table cannot be read" in line and reason in line


def test_an_unreadable_table_beside_nccl_lines_is_reported_not_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "mixed.log"
    log.write_text("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                   + _text("all_reduce_perf-header-then-killed-no-rows.txt"))
    assert main(["nccl-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "nccl-tests table: could not be read (the nccl-tests table has a header but no rows)" in out
    assert "no NCCL connections" not in out


def test_a_plain_log_is_not_taken_for_nccl_tests_output() -> None:
    assert not looks_like_nccl_tests(_text("shm-nvls-collnet-tagged.log"))
    assert not looks_like_nccl_tests("# Using devices, said the README\n")


# -- 2. a device list elided with ... ---------------------------------------------------------------


def test_an_elided_device_list_gives_the_highest_rank_shown(capsys: pytest.CaptureFixture[str]) -> None:
    tests = _json(capsys, "all_reduce_perf-device-list-elided.txt")["nccl_tests"]
    assert (tests["ranks"], tests["devices_elided"]) == (8, True)
    assert tests["notes"] == ["the device list was elided (ranks 0, 1, 6, 7 shown): 8 ranks, from the highest "
                              "rank shown"]


def test_a_device_list_cut_at_the_end_gives_no_rank_count(capsys: pytest.CaptureFixture[str]) -> None:
    tests = _json(capsys, "all_reduce_perf-device-list-cut-after-rank-3.txt")["nccl_tests"]
    assert (tests["ranks"], tests["devices_elided"], tests["collective"]) == (None, True, "all_reduce_perf")
    assert tests["notes"] == ["the device list was cut after rank 3: the rank count is not shown"]


def test_an_elided_list_that_nccl_or_the_bus_factor_contradicts_gives_no_rank_count() -> None:
    elided = _text("all_reduce_perf-device-list-elided.txt")
    nccl_says_16 = elided + "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 busId 18000 - Init COMPLETE\n"
    result = parse_nccl_tests(nccl_says_16)
    assert result.ranks is None and "NCCL says nranks 16" in result.notes[-1]
    six_shown = elided.replace("#  Rank  6 ", "#  Rank  4 ").replace("#  Rank  7 ", "#  Rank  5 ")
    result = parse_nccl_tests(six_shown)  # 6 ranks do not give busbw = 1.75 x algbw
    assert result.ranks is None and "do not fit the busbw/algbw factor 1.750" in result.notes[-1]


# -- 3. NVLS set-up lines are not channel connections ------------------------------------------------


def test_nvls_is_reported_as_used_with_its_channels(capsys: pytest.CaptureFixture[str]) -> None:
    log = analyze(_text("nvls-8-ranks-p2p-cumem-setup.log"))
    assert log.transports() == {"P2P": 16}
    assert (log.nvls_used, log.nvls_channels, log.nvls_ranks) == (True, 16, 8)
    findings = explain(log)["findings"]
    assert "NVLS (NVLink SHARP) was used with 16 NVLS channels, set up by 8 ranks: reductions done inside the " \
           "NVSwitch" in findings
    assert not any(f.startswith("NVLS:") for f in findings)
    assert main(["nccl-log", str(NCCL / "nvls-8-ranks-p2p-cumem-setup.log")]) == 0
    out = capsys.readouterr().out
    assert "NVLS (NVLink SHARP) was set up with 16 channels." in out and "channel connections, NVLink" not in out


# -- 4. newer torch watchdog wording, wrapped ------------------------------------------------------------


def test_timeout_at_nccl_work_and_wrapped_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    timeouts = _json(capsys, "watchdog-timeout-at-nccl-work-wrapped.log")["timeouts"]
    got = [(t["rank"], t["collective"], t["seq_num"], t["numel_in"], t["timeout_ms"], t["ran_for_ms"], t["line_no"])
           for t in timeouts]
    assert got == [
        (2, None, 1187, None, None, None, 1),  # only "Timeout at NCCL work": no collective named for rank 2
        (0, "ALLREDUCE", 1187, 25690112, 600000, 600047, 2),  # described on a line wrapped at 120 columns
        (1, "ALLREDUCE", 1187, 25690112, 600000, 600051, 6),  # described over three 80-column lines
    ]


@pytest.mark.parametrize("width", [66, 80, 97, 120])
def test_a_watchdog_line_wrapped_anywhere_is_read(width: int) -> None:
    line = ("[rank3]:[E1130 14:35:07.402311877 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=42, OpType=_REDUCE_SCATTER_BASE, NumelIn=8388608, NumelOut=1048576, "
            "Timeout(ms)=600000) ran for 600013 milliseconds before timing out.")
    pieces = [line[i:i + width] for i in range(0, len(line), width)]
    assert 3 <= len(pieces) <= 6
    (timeout,) = analyze("\n".join(pieces) + "\n[rank3]:[E1130 14:35:08.1 ProcessGroupNCCL.cpp:1] next record\n").timeouts
    assert (timeout.rank, timeout.collective, timeout.seq_num, timeout.numel_in, timeout.ran_for_ms) == (
        3, "_REDUCE_SCATTER_BASE", 42, 8388608, 600013)


def test_a_trimmed_space_at_the_cut_does_not_hide_the_timeout() -> None:
    text = ("[rank1]:[E1130 14:35:07.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective\n"
            "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=4, NumelOut=16, Timeout(ms)=60000) ran\n"
            "for 60004 milliseconds before timing out.\n")
    (timeout,) = analyze(text).timeouts
    assert (timeout.rank, timeout.collective, timeout.ran_for_ms) == (1, "ALLGATHER", 60004)


def test_a_wrapped_line_does_not_swallow_the_next_record() -> None:
    text = ("[rank0]:[E1218 20:27:21.486305774 ProcessGroupNCCL.cpp:1895] [PG ID 1 PG GUID 1 Rank 0] Process group "
            "watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=BROADCAST, \n"
            "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632 "
            "(most recent call first):\n")
    (timeout,) = analyze(text).timeouts
    assert (timeout.rank, timeout.collective, timeout.seq_num, timeout.numel_in) == (0, "BROADCAST", 1, None)


# -- 5. quoting prefixes; a table wrapped at 80 columns ----------------------------------------------------


def test_an_email_quoted_log_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "nccl-log-email-quoted.log")
    assert data["nccl_version"] == "2.26.2" and data["transports"] == {"SHM": 3}
    assert [w["message"] for w in data["warnings"]] == ["Cuda failure 2 'out of memory'"]
    assert [(e["reason"], e["last_error"]) for e in data["errors"]] == [("unhandled cuda error",
                                                                        "Cuda failure 2 'out of memory'")]


def test_a_chat_quoted_table_is_read() -> None:
    result = parse_nccl_tests(_text("all_reduce_perf-chat-quoted.txt"))
    assert (len(result.rows), result.ranks, result.collective) == (6, 8, "all_reduce_perf")
    assert "every line was quoted with '>>>'; the quoting was removed" in result.notes


def test_a_table_wrapped_at_80_columns_is_rejoined_exactly() -> None:
    wrapped = parse_nccl_tests(_text("all_reduce_perf-wrapped-80-columns.txt"))
    whole = parse_nccl_tests(_text("all_reduce_perf-markdown-indented-4-spaces.txt"))  # the same run, unwrapped
    assert wrapped.rows == whole.rows and wrapped.devices == whole.devices and wrapped.ranks == 8
    assert wrapped.reported_avg_busbw == whole.reported_avg_busbw
    assert "the table was wrapped at 80 columns; its rows were rejoined and each one checked" in wrapped.notes


def test_a_wrapped_table_whose_cuts_cannot_be_told_is_refused_naming_the_wrap(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(NcclTestsError, match="the table was wrapped at 81 columns or a little more and cannot be "
                                             "rejoined with certainty"):
        parse_nccl_tests(_text("all_reduce_perf-wrapped-81-columns-indented.txt"))
    assert "wrapped at 81 columns" in _refusal(capsys, "all_reduce_perf-wrapped-81-columns-indented.txt")


def test_quoting_is_removed_only_when_every_line_has_it() -> None:
    assert strip_quoting(["> a", ">", "> > b"]) == (["a", "", "> b"], ">")
    assert strip_quoting(["> > a", ">> b", "> >"]) == (["a", "b", ""], ">>")
    assert strip_quoting(["> a", "b"]) == (["> a", "b"], None)
    assert strip_indent(["    a", "", "      b"]) == (["a", "", "  b"], "    ")
    assert strip_indent(["\ta", "b"]) == (["\ta", "b"], "")


# -- 6. one rank ------------------------------------------------------------------------------------------


def test_a_one_rank_all_reduce_says_it_measured_no_link(capsys: pytest.CaptureFixture[str]) -> None:
    result = parse_nccl_tests(_text("all_reduce_perf-one-rank-busbw-zero.txt"))
    assert result.ranks == 1 and result.single_rank and result.peak_busbw_gbps == 0
    assert main(["nccl-log", str(NCCL / "all_reduce_perf-one-rank-busbw-zero.txt")]) == 0
    out = capsys.readouterr().out
    assert ("nccl-tests table (all_reduce_perf on 1 rank): one rank has no peer to exchange data with: busbw is 0 by "
            "definition, and the run did not cross GPUs or nodes") in out
    assert "peak busbw" not in out


def test_busbw_zero_everywhere_means_one_rank_even_without_a_device_list() -> None:
    text = _text("all_reduce_perf-one-rank-busbw-zero.txt")
    table_only = text[text.index("#                     "):]
    result = parse_nccl_tests(table_only)
    assert result.ranks is None and result.single_rank
    assert result.layout_collectives == ("all_reduce_perf", "reduce_scatter_perf")


# -- 7. the collective from the columns; the largest size tested -------------------------------------------


@pytest.mark.parametrize(("name", "candidates"), [
    ("unnamed-all_reduce-8-ranks-table-only.txt", ["all_reduce_perf"]),
    ("unnamed-reduce_scatter-8-ranks.txt", ["reduce_scatter_perf"]),
    ("unnamed-all_gather-8-ranks.txt", ["all_gather_perf", "alltoall_perf"]),
    ("unnamed-broadcast-8-ranks-root-0.txt", ["broadcast_perf"]),
    ("unnamed-reduce-8-ranks-root-0.txt", ["reduce_perf"]),
    ("unnamed-sendrecv-8-ranks.txt", ["sendrecv_perf"]),
    ("all_reduce_perf-mpirun-tag-output-noise.txt", ["all_reduce_perf", "sendrecv_perf"]),  # 2 ranks: factor 1
])
def test_the_collective_is_told_from_the_columns(capsys: pytest.CaptureFixture[str], name: str,
                                                 candidates: list[str]) -> None:
    tests = _json(capsys, name)["nccl_tests"]
    assert tests["collective_candidates"] == candidates
    assert tests["collective"] == (candidates[0] if len(candidates) == 1 else None)
    assert tests["max_size_bytes"] == max(tests["peak_size_bytes"], tests["max_size_bytes"])


def test_the_largest_size_is_reported_beside_the_peak(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-log", str(NCCL / "unnamed-sendrecv-8-ranks.txt")]) == 0
    out = capsys.readouterr().out
    assert ("nccl-tests table (sendrecv_perf on 8 ranks; the collective told from the columns): peak busbw "
            "356.49 GB/s at 1 GiB (the largest size tested)") in out


@pytest.mark.parametrize(("reduces", "rooted", "ratio", "factor", "ranks", "expected"), [
    (True, False, 1, 1.75, 8, ("all_reduce_perf",)),
    (True, False, 1, 1.0, 8, ("sendrecv_perf",)),
    (True, False, 1, 1.0, 2, ("all_reduce_perf", "sendrecv_perf")),
    (True, False, 1, 1.0, None, ("all_reduce_perf", "sendrecv_perf")),
    (True, None, 1, 1.0, None, ("reduce_perf", "all_reduce_perf", "sendrecv_perf")),  # 2019 layout: no root column
    (True, False, 8, 0.875, 8, ("reduce_scatter_perf",)),
    (False, True, 4, 0.75, None, ("scatter_perf", "gather_perf")),
    (True, False, 8, 0.875, 4, ()),  # the size ratio says 8 ranks, the device list 4: no answer
    (True, False, 1, 1.75, 4, ()),   # 4 ranks give 1.5, not 1.75
    (False, False, 1, 1.0, 8, ()),   # not reducing, no root, ratio 1: no nccl-tests binary prints that
])
def test_layout_rules(reduces: bool, rooted: bool | None, ratio: int, factor: float, ranks: int | None,
                      expected: tuple[str, ...]) -> None:
    assert layout.collectives(layout.Columns(reduces, rooted, ratio, factor), ranks) == expected


def test_the_bus_factor_needs_agreeing_rows() -> None:
    assert layout.bus_factor([(10.0, 17.5), (100.0, 175.1), (0.01, 0.0)]) == pytest.approx(1.75, abs=0.001)
    assert layout.bus_factor([(10.0, 17.5), (100.0, 100.0)]) is None
    assert layout.bus_factor([(0.5, 0.0), (3.0, 0.0)]) == 0.0
    assert layout.bus_factor([(0.5, 0.2)]) is None
