"""Read the result table printed by nccl-tests (``all_reduce_perf`` and its siblings).

The table's own header names the columns, so the parser reads it instead of assuming one layout:
2019 builds print ``error`` (a float) and no ``root``; 2020+ print ``root`` and ``#wrong`` (an
integer, ``N/A`` with ``-c 0``); abridged copies keep only the out-of-place block. Launcher
prefixes (srun ``--label`` `` 0: ``, mpirun ``--tag-output`` ``[1,0]<stdout>:``) are removed, and
lines that are not table rows (NCCL INFO, Open MPI help-message notices) are skipped. A quoting
prefix or an indent common to every line (a pasted copy) is removed, and a table a terminal wrapped
at its width is rejoined. A line that looks like a row but cannot be read raises
:class:`NcclTestsError` instead of being guessed.

The rank count comes from the ``# Using devices`` list: the highest rank shown when the author
elided the middle of it with ``...``, unknown when the list was cut at the end or when the ranks
listed, NCCL's own ``nranks`` and the busbw factor disagree. Without a ``*_perf`` name in the
text, the collective is told from the columns (``preflight.parse.nccl_tests_layout``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from preflight.parse import nccl_tests_layout as layout
from preflight.parse.pasted import join_wrapped, unpaste

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
_COLUMN_NAMES = frozenset({"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "error"})
_COLLECTIVE = re.compile(r"\b(\w+_perf)\b")
_ELISION = re.compile(r"^#?\s*(?:\.{3,}|\u2026)\s*$")
_NRANKS = re.compile(r"\bNCCL INFO\b.*?\bnranks (\d+)\b")
_SIGNATURES = (
    re.compile(r"#\s*nThread\s+\d+\s+nGpus\s+\d+"),
    re.compile(r"#\s*Using devices"),
    re.compile(r"#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+"),
    re.compile(r"\bsize\s+count\s+type\b"),
    re.compile(r"#\s*Avg bus bandwidth"),
    re.compile(r"\bout-of-place\s+in-place\b"),
)


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
    rank_count: int | None = None
    devices_elided: bool = False
    layout_collectives: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ranks(self) -> int | None:
        """How many ranks ran (None when the output does not say it with certainty)."""
        return self.rank_count

    @property
    def collective_named(self) -> str | None:
        """The binary: as the output names it, else as the columns tell when only one fits."""
        if self.collective is not None:
            return self.collective
        return self.layout_collectives[0] if len(self.layout_collectives) == 1 else None

    @property
    def single_rank(self) -> bool:
        """One rank: nothing crossed a GPU boundary, and all_reduce's busbw is 0 by definition."""
        return self.rank_count == 1 or (self.rank_count is None and self.rows_say_one_rank)

    @property
    def rows_say_one_rank(self) -> bool:
        """busbw is 0 in every row where algbw is not: a factor of 2(n-1)/n or (n-1)/n with n = 1."""
        pairs = [(m.algbw_gbps, m.busbw_gbps) for r in self.rows for m in r.measurements]
        return any(a > 0 for a, _ in pairs) and all(b == 0 for _, b in pairs)

    @property
    def max_size_bytes(self) -> int:
        """The largest message size tested."""
        return max(r.size_bytes for r in self.rows)

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
    """True when ``text`` holds an nccl-tests column header (once pasting is undone)."""
    lines, _ = unpaste(text.splitlines())
    return any(_header_columns(_strip_prefix(line).strip()) for line in lines)


def looks_like_nccl_tests(text: str) -> bool:
    """True when ``text`` is plainly nccl-tests output (its parameter line, device list or column
    titles), whether or not a table can be read from it."""
    return sum(1 for pattern in _SIGNATURES if pattern.search(text)) >= 2


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the first (and only) nccl-tests table in ``text``."""
    unpasted, notes = unpaste(text.splitlines())
    lines = [(number, _strip_prefix(line.rstrip()).strip()) for number, line in enumerate(unpasted, start=1)]
    if not _is_wrapped([line for _, line in lines]):
        return _parse(lines, notes, text)
    raw = [line.rstrip("\r") for line in unpasted]
    readings: list[tuple[NcclTestsResult, str]] = []
    problem = ""
    for inside_words in (True, False):
        rejoined, width = _rejoin(lines, raw, inside_words)
        note = f"the table was wrapped at {width}; its rows were rejoined and each one checked"
        try:
            readings.append((_parse(rejoined, [*notes, note], text), width))
        except NcclTestsError as exc:
            problem = problem or f"the table was wrapped at {width} and cannot be rejoined with certainty: {exc}"
    if not readings:
        raise NcclTestsError(problem)
    if len(readings) == 2 and readings[0][0].rows != readings[1][0].rows:
        raise NcclTestsError(f"the table was wrapped at {readings[0][1]} and rejoins two ways that both read as "
                             "a table (was a number cut at the edge?); copy it again without wrapping")
    return readings[0][0]


def _parse(lines: list[tuple[int, str]], notes: list[str], text: str) -> NcclTestsResult:
    columns: list[str] | None = None
    rows: list[Row] = []
    devices: list[str] = []
    listed: list[int] = []
    elided_after: int | None = None
    parameters: dict[str, str] = {}
    avg: float | None = None
    avg_flag: str | None = None
    oob: int | None = None
    collective: str | None = None

    for line_no, line in lines:
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
            listed.append(int(match["rank"]))
            continue
        if listed and columns is None and _ELISION.match(line):
            elided_after = listed[-1]
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
    factor = layout.bus_factor([(m.algbw_gbps, m.busbw_gbps) for r in rows for m in r.measurements])
    ranks, elided = _rank_count(listed, elided_after, _stated_nranks(text), notes)
    cols = layout.columns({r.redop for r in rows}, {r.root for r in rows}, {_size_ratio(r) for r in rows}, factor)
    if elided and ranks is not None and not layout.collectives(cols, ranks) and layout.collectives(cols, None):
        notes.append(f"{ranks} ranks (from the elided device list) do not fit the busbw/algbw factor "
                     f"{factor:.3f}: the rank count is unclear")
        ranks = None
    guessed = () if collective is not None else layout.collectives(cols, ranks)
    return NcclTestsResult(collective, tuple(rows), tuple(devices), parameters, avg, avg_flag, oob,
                           rank_count=ranks, devices_elided=elided, layout_collectives=guessed, notes=tuple(notes))


def _header_start(line: str) -> bool:
    """The first physical line of a column header, wrapped or not (``#  size  count  type ...``)."""
    return line.startswith("#") and line.lstrip("#").split()[:3] == ["size", "count", "type"]


def _is_wrapped(lines: list[str]) -> bool:
    """The column header does not end on its own line: a terminal wrapped the table."""
    for index, line in enumerate(lines[:-1]):
        if _header_start(line):
            following = lines[index + 1]
            if not following or following.startswith("#") or _looks_like_row(following):
                return False
            last = line.split()[-1]
            return last not in _COLUMN_NAMES or any(name.endswith(following.split()[0]) for name in _COLUMN_NAMES)
    return False


def _rejoin(lines: list[tuple[int, str]], raw: list[str], inside_words: bool) -> tuple[list[tuple[int, str]], str]:
    """Each physical line that reached the edge joined with the next ones that are not a new row,
    a comment or blank (how: :func:`preflight.parse.pasted.join_wrapped`); the width in words."""
    edge = max(len(r) for r in raw) - 8
    groups: list[list[str]] = []
    numbers: list[int] = []
    previous = ""
    for (line_no, line), physical in zip(lines, raw, strict=True):
        if groups and len(previous) > edge and line and not line.startswith("#") and not _looks_like_row(line):
            groups[-1].append(physical)
        else:
            groups.append([physical])
            numbers.append(line_no)
        previous = physical
    joined, width = join_wrapped(groups, inside_words)
    return [(number, _strip_prefix(text.rstrip()).strip()) for number, text in zip(numbers, joined, strict=True)], width


def _size_ratio(row: Row) -> float | None:
    size = layout.TYPE_BYTES.get(row.type)
    return row.size_bytes / (row.count * size) if size and row.count else None


def _stated_nranks(text: str) -> int | None:
    """NCCL's ``nranks N`` when every NCCL INFO line that states it says the same."""
    found = {int(m.group(1)) for m in _NRANKS.finditer(text)}
    return next(iter(found)) if len(found) == 1 else None


def _rank_count(listed: list[int], elided_after: int | None, nranks: int | None,
                notes: list[str]) -> tuple[int | None, bool]:
    """(rank count, whether the device list was elided), with a note where it is not plain."""
    if not listed:
        return nranks, False
    complete = listed == list(range(len(listed)))
    if complete and elided_after is None:
        count: int | None = len(listed)
    elif elided_after is not None and elided_after == listed[-1]:
        notes.append(f"the device list was cut after rank {elided_after}: the rank count is not shown")
        return nranks, True
    else:
        count = max(listed) + 1
        shown = ", ".join(str(r) for r in listed)
        notes.append(f"the device list was elided (ranks {shown} shown): {count} ranks, from the highest rank shown")
    if nranks is not None and count != nranks:
        notes.append(f"the device list shows {count} ranks but NCCL says nranks {nranks}: the rank count is unclear")
        return None, not complete or elided_after is not None
    return count, not complete or elided_after is not None


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
