"""Read the result table printed by nccl-tests (``all_reduce_perf`` and its siblings).

The table's own header names the columns, so the parser reads it instead of assuming one layout:
2019 builds print ``error`` (a float) and no ``root``; 2020+ print ``root`` and ``#wrong`` (an
integer, ``N/A`` with ``-c 0``); abridged copies keep only the out-of-place block. Launcher
prefixes (srun ``--label`` `` 0: ``, mpirun ``--tag-output`` ``[1,0]<stdout>:``) are removed, and
lines that are not table rows (NCCL INFO, Open MPI help-message notices) are skipped. A line that
looks like a row but cannot be read raises :class:`NcclTestsError` instead of being guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_PREFIX = re.compile(r"^(?:\s*\d+:\s?|\[\d+,\d+\]<(?:stdout|stderr)>:\s?)")
_LEADING = ("size", "count", "type", "redop", "root")
_TYPES = frozenset(
    ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2",
     "char", "int", "uint", "long", "ulong", "f16", "f32", "f64", "bf16"]
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+)\s*(?:GB/s)?\s*(?P<flag>OK|FAILED)?\s*$")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<value>\d+)\s*(?P<flag>OK|FAILED)?")
_DEVICE = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\b.*?\bdevice\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.+?)\s*$")
_PARAMS = re.compile(r"^#\s*nThread\s")
_COLLECTIVE = re.compile(r"\b(\w+_perf)\b")


class NcclTestsError(ValueError):
    """nccl-tests output that cannot be read with certainty."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One half of a row (out-of-place or in-place): time in µs, bandwidths in GB/s (10^9)."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None
    error: float | None

    @property
    def correct(self) -> bool | None:
        """True/False when validation ran; None when it did not (``N/A``)."""
        if self.wrong is not None:
            return self.wrong == 0
        return None


@dataclass(frozen=True, slots=True)
class Row:
    """One message size."""

    size_bytes: int
    count: int
    type: str
    redop: str
    root: int | None
    out_of_place: Measurement
    in_place: Measurement | None

    @property
    def busbw_gbps(self) -> float:
        """The better of out-of-place and in-place busbw."""
        return max(m.busbw_gbps for m in self.measurements)

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        """Out-of-place then (when printed) in-place."""
        return (self.out_of_place,) if self.in_place is None else (self.out_of_place, self.in_place)


@dataclass(frozen=True, slots=True)
class NcclTestsResult:
    """A parsed nccl-tests run."""

    collective: str | None
    rows: tuple[Row, ...]
    devices: tuple[str, ...]
    parameters: dict[str, str]
    reported_avg_busbw: float | None
    avg_flag: str | None
    out_of_bounds: int | None

    @property
    def ranks(self) -> int | None:
        """Number of ranks listed under ``# Using devices`` (None when the list was cut)."""
        return len(self.devices) or None

    @property
    def peak(self) -> Row:
        """The row with the highest busbw."""
        return max(self.rows, key=lambda r: r.busbw_gbps)

    @property
    def peak_busbw_gbps(self) -> float:
        """Highest busbw of any size, out-of-place or in-place."""
        return self.peak.busbw_gbps

    @property
    def avg_busbw_gbps(self) -> float:
        """Mean busbw over every printed measurement, as nccl-tests computes its footer."""
        values = [m.busbw_gbps for r in self.rows for m in r.measurements]
        return sum(values) / len(values)

    @property
    def wrong_total(self) -> int | None:
        """Sum of ``#wrong`` (None when validation was off or the column is absent)."""
        counts = [m.wrong for r in self.rows for m in r.measurements]
        if any(c is None for c in counts):
            return None
        return sum(c for c in counts if c is not None)


def contains_table(text: str) -> bool:
    """True when ``text`` holds an nccl-tests column header."""
    return any(_header_columns(_strip_prefix(line)) for line in text.splitlines())


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the first (and only) nccl-tests table in ``text``."""
    columns: list[str] | None = None
    rows: list[Row] = []
    devices: list[str] = []
    parameters: dict[str, str] = {}
    avg: float | None = None
    avg_flag: str | None = None
    oob: int | None = None
    collective: str | None = None

    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = _strip_prefix(raw.rstrip())
        if collective is None and (found := _COLLECTIVE.search(line)):
            collective = found.group(1)
        if header := _header_columns(line):
            if columns is not None:
                raise NcclTestsError(f"line {line_no}: a second nccl-tests table starts here; split the runs")
            columns = header
            continue
        if _PARAMS.match(line):
            parameters = _parameters(line)
            continue
        if match := _DEVICE.match(line):
            devices.append(match["name"])
            continue
        if match := _AVG.match(line):
            avg, avg_flag = float(match["value"]), match["flag"]
            continue
        if match := _OOB.match(line):
            oob = int(match["value"])
            continue
        if columns is not None and _looks_like_row(line):
            rows.append(_row(line, columns, line_no))
    if columns is None:
        raise NcclTestsError("no nccl-tests table header (the '#  size  count  type ...' line) found")
    if not rows:
        raise NcclTestsError("the nccl-tests table has a header but no rows")
    return NcclTestsResult(collective, tuple(rows), tuple(devices), parameters, avg, avg_flag, oob)


def _strip_prefix(line: str) -> str:
    """Remove an srun ``--label`` or mpirun ``--tag-output`` prefix."""
    return _PREFIX.sub("", line, count=1) if _PREFIX.match(line) and not _looks_like_row(line) else line


def _header_columns(line: str) -> list[str] | None:
    """The column names of a ``#  size  count  type  redop ...`` header line, else None."""
    if not line.startswith("#"):
        return None
    names = line.lstrip("#").split()
    if len(names) < 6 or names[:3] != ["size", "count", "type"] or "busbw" not in names:
        return None
    return names


def _looks_like_row(line: str) -> bool:
    """A row starts with two whole numbers and a data type name."""
    tokens = line.split()
    return len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit() and tokens[2] in _TYPES


def _row(line: str, columns: list[str], line_no: int) -> Row:
    """One table row, read through the header's column names."""
    tokens = line.split()
    if len(tokens) != len(columns):
        raise NcclTestsError(
            f"line {line_no}: {len(tokens)} fields where the header names {len(columns)}: {line.strip()!r}"
        )
    lead = [name for name in columns if name in _LEADING]
    if columns[: len(lead)] != lead:
        raise NcclTestsError(f"line {line_no}: unexpected column order {columns!r}")
    values = dict(zip(lead, tokens[: len(lead)], strict=True))
    groups = _groups(columns[len(lead):], tokens[len(lead):], line_no)
    root = values.get("root")
    return Row(
        size_bytes=int(values["size"]),
        count=int(values["count"]),
        type=values["type"],
        redop=values.get("redop", ""),
        root=_int(root, "root", line_no) if root is not None else None,
        out_of_place=groups[0],
        in_place=groups[1] if len(groups) > 1 else None,
    )


def _groups(names: list[str], tokens: list[str], line_no: int) -> list[Measurement]:
    """Split ``time algbw busbw #wrong time algbw busbw #wrong`` into measurements."""
    starts = [i for i, name in enumerate(names) if name == "time"]
    if not starts or starts[0] != 0 or len(starts) > 2:
        raise NcclTestsError(f"line {line_no}: cannot find the time/algbw/busbw groups in {names!r}")
    out = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(names)
        fields = dict(zip(names[start:end], tokens[start:end], strict=True))
        for needed in ("algbw", "busbw"):
            if needed not in fields:
                raise NcclTestsError(f"line {line_no}: column {needed!r} missing from a measurement group")
        wrong = fields.get("#wrong")
        error = fields.get("error")
        out.append(
            Measurement(
                time_us=_float(fields["time"], "time", line_no),
                algbw_gbps=_float(fields["algbw"], "algbw", line_no),
                busbw_gbps=_float(fields["busbw"], "busbw", line_no),
                wrong=None if wrong in (None, "N/A") else _int(wrong, "#wrong", line_no),
                error=None if error in (None, "N/A") else _float(error, "error", line_no),
            )
        )
    return out


def _float(text: str, name: str, line_no: int) -> float:
    """A finite float or a clear error."""
    try:
        value = float(text)
    except ValueError:
        raise NcclTestsError(f"line {line_no}: {name} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise NcclTestsError(f"line {line_no}: {name} is not finite: {text!r}")
    return value


def _int(text: str, name: str, line_no: int) -> int:
    """A whole number (negative allowed: root -1) or a clear error."""
    if not re.fullmatch(r"-?\d+", text):
        raise NcclTestsError(f"line {line_no}: {name} is not a whole number: {text!r}")
    return int(text)


def _parameters(line: str) -> dict[str, str]:
    """``# nThread 1 nGpus 8 minBytes 8 ... step: 2(factor) warmup iters: 5`` -> a dict."""
    body = line.lstrip("#").strip()
    return dict(re.findall(r"(\w+(?: iters)?):?\s+(\S+)", body))
