"""The nccl-tests table parser on every captured generation and on written edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.parse.nccl_tests import NcclTestsError, contains_table, parse_nccl_tests
from tests.conftest import shared_fixtures_dir


def _names() -> list[str]:
    path = shared_fixtures_dir() / "nccl_tests"
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else ["(absent)"]


# name -> (rows, ranks (listed, or NCCL INFO nranks), peak busbw, peak size, footer average, #wrong total, first size, has in-place)
EXPECTED: dict[str, tuple[int, int | None, float, int, float | None, int | None, int, bool]] = {
    "2x8xH100-multinode-srun-prefixed-validation-off-NA.txt": (11, 16, 167.87, 268435456, 142.735, None, 8388608, True),
    "2xA40-NV4-bridge-pair-all_reduce_perf-1G-10G.txt": (4, None, 47.49, 4294967296, 47.4509, 0, 1073741824, True),
    "2xA40-across-NODE-NCCL_P2P_DISABLE=1-all_reduce_perf-1G-10G.txt": (4, None, 4.02, 2147483648, 3.85845, 0, 1073741824, True),
    "4of8xA100-SXM-NVSwitch-all_reduce_perf-1G-10G-P2P-enabled.txt": (4, None, 234.74, 8589934592, 222.066, 0, 1073741824, True),
    "4xA100-80GB-PCIe-Azure-all_gather_perf-single-size.txt": (1, 4, 25.95, 33554432, 25.905, 0, 33554432, True),
    "4xH100-SXM-Lambda-VM-all_reduce_perf-g4-8B-1G-NCCL-2.26.2.txt": (28, 4, 355.89, 1073741824, 98.414, 0, 8, True),
    "4xRTX4090-PCIe-tinygrad-P2P-driver-all_reduce_perf-1K-1G.txt": (21, 4, 25.31, 536870912, 13.3111, 0, 1024, True),
    "6xRTX4090-tinybox-tinygrad-P2P-driver-all_reduce_perf-32M.txt": (1, 6, 24.58, 33554432, 24.5413, 0, 33554432, True),
    "8xA100-SXM4-80GB-all_reduce_perf-g8-8B-4G.txt": (30, 8, 232.44, 4294967296, 66.2058, 0, 8, True),
    "8xA100-SXM4-80GB-all_reduce_perf-mpirun-np8-with-interleaved-MPI-help-messages.txt": (30, 8, 232.93, 4294967296, 72.7724, 0, 8, True),
    "8xA100-SXM4-80GB-all_reduce_perf-nccl-tests-2.19.4-new-header-format.txt": (25, 8, 182.90, 134217728, 34.9024, 0, 8, True),
    "8xB200-GKE-A4-single-node-all_reduce-ABRIDGED-by-author.txt": (12, 8, 845.44, 17179869184, 587.371, None, 8388608, False),
    "8xH100-SXM-single-node-all_reduce_perf-128M-4G-NVLS.txt": (6, 8, 476.53, 4294967296, 439.369, 0, 134217728, True),
    "8xH800-broadcast_perf-validation-off-NA-4B-2G.txt": (30, 8, 165.02, 2147483648, None, None, 4, True),
    "8xRTX4090-stock-driver-no-P2P-all_reduce_perf-8B-128M.txt": (25, 8, 15.04, 33554432, 4.85265, 0, 8, True),
}


@pytest.mark.parametrize("name", _names())
def test_every_capture(shared_fixtures: Path, name: str) -> None:
    text = (shared_fixtures / "nccl_tests" / name).read_text()
    assert contains_table(text)
    result = parse_nccl_tests(text)
    rows, ranks, peak, peak_size, avg, wrong, first, in_place = EXPECTED[name]
    assert len(result.rows) == rows
    assert result.ranks == ranks
    assert result.peak_busbw_gbps == pytest.approx(peak)
    assert result.peak.size_bytes == peak_size
    assert result.reported_avg_busbw == (pytest.approx(avg) if avg is not None else None)
    assert result.wrong_total == wrong
    assert result.rows[0].size_bytes == first
    assert (result.rows[0].in_place is not None) == in_place
    if avg is not None:
        # the footer averages every printed busbw; printed values are rounded to 2 decimals
        assert result.avg_busbw_gbps == pytest.approx(avg, abs=0.2)


def test_columns_of_one_row(shared_fixtures: Path) -> None:
    result = parse_nccl_tests((shared_fixtures / "nccl_tests" / "2x8xH100-multinode-srun-prefixed-validation-off-NA.txt").read_text())
    row = result.rows[-1]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (8589934592, 2147483648, "float", "sum", -1)
    assert (row.out_of_place.time_us, row.out_of_place.algbw_gbps, row.out_of_place.busbw_gbps) == (103530.0, 82.97, 155.57)
    assert row.out_of_place.wrong is None and row.out_of_place.correct is None
    assert result.parameters["iters"] == "200" and result.parameters["validation"] == "0"
    assert result.parameters["warmup iters"] == "5"


def test_broadcast_has_root_zero_and_redop_none(shared_fixtures: Path) -> None:
    result = parse_nccl_tests((shared_fixtures / "nccl_tests" / "8xH800-broadcast_perf-validation-off-NA-4B-2G.txt").read_text())
    assert {(r.redop, r.root) for r in result.rows} == {("none", 0)}
    assert all(r.out_of_place.algbw_gbps == r.out_of_place.busbw_gbps for r in result.rows)


def test_collective_name_from_header_or_command(shared_fixtures: Path) -> None:
    folder = shared_fixtures / "nccl_tests"
    assert parse_nccl_tests((folder / "8xA100-SXM4-80GB-all_reduce_perf-nccl-tests-2.19.4-new-header-format.txt").read_text()).collective == "all_reduce_perf"
    assert parse_nccl_tests((folder / "2xA40-NV4-bridge-pair-all_reduce_perf-1G-10G.txt").read_text()).collective is None


def test_2019_error_column_layout(test_data: Path) -> None:
    result = parse_nccl_tests((test_data / "nccl" / "all_reduce_perf-2019-error-column.txt").read_text())
    assert result.ranks == 8 and result.devices[0] == "Tesla V100-SXM2-16GB"
    first = result.rows[0]
    assert first.root is None and first.redop == "sum"
    assert first.out_of_place.error == pytest.approx(2e-7) and first.out_of_place.wrong is None
    assert result.peak_busbw_gbps == pytest.approx(85.41)
    assert result.avg_busbw_gbps == pytest.approx(67.068, abs=0.01)
    assert result.reported_avg_busbw == pytest.approx(67.068)


def test_tag_output_prefix_and_noise_and_failed_footer(test_data: Path) -> None:
    result = parse_nccl_tests((test_data / "nccl" / "all_reduce_perf-mpirun-tag-output-noise.txt").read_text())
    assert [r.size_bytes for r in result.rows] == [33554432, 67108864, 134217728]
    assert result.devices == ("NVIDIA L40S", "NVIDIA L40S")
    assert result.avg_flag == "FAILED" and result.wrong_total == 3
    out_of_place, in_place = result.rows[2].out_of_place, result.rows[2].in_place
    assert out_of_place is not None and in_place is not None
    assert out_of_place.correct is False and in_place.correct is True


HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"


def test_row_with_missing_field_is_an_error() -> None:
    text = HEADER + "     1048576        262144     float     sum      -1    28.06   37.36   56.05      0    27.36   38.32\n"
    with pytest.raises(NcclTestsError, match="line 2: 11 fields where the header names 13"):
        parse_nccl_tests(text)


def test_unreadable_number_is_an_error() -> None:
    text = HEADER + "     1048576        262144     float     sum      -1    28.06   37.36   5x.05      0    27.36   38.32   57.48      0\n"
    with pytest.raises(NcclTestsError, match="busbw is not a number"):
        parse_nccl_tests(text)


def test_no_header_is_an_error() -> None:
    with pytest.raises(NcclTestsError, match="no nccl-tests table header"):
        parse_nccl_tests("hello\n")


def test_header_without_rows_is_an_error() -> None:
    with pytest.raises(NcclTestsError, match="no rows"):
        parse_nccl_tests(HEADER)


def test_second_table_is_an_error() -> None:
    row = "     1048576        262144     float     sum      -1    28.06   37.36   56.05      0    27.36   38.32   57.48      0\n"
    with pytest.raises(NcclTestsError, match="second nccl-tests table"):
        parse_nccl_tests(HEADER + row + HEADER + row)


def test_noise_starting_with_a_number_is_skipped() -> None:
    row = "     1048576        262144     float     sum      -1    28.06   37.36   56.05      0    27.36   38.32   57.48      0\n"
    result = parse_nccl_tests(HEADER + "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail\n" + row)
    assert len(result.rows) == 1


def test_text_without_table() -> None:
    assert not contains_table("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
