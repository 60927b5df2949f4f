"""Parser for ``nvidia-smi topo -m`` (alias ``topo --matrix``).

The text comes from the live node or from a capture a person pasted, so it may carry shell prompt
lines, an old ``====MATRIX====`` banner, a legend, ANSI codes, tabs turned into spaces and headers
with odd indentation, and a quoting prefix (``> ``) or a code-block indent common to every line.
A copy that a terminal wrapped at its width is rejoined when every GPU cell comes out intact, and
refused with that reason otherwise. The parser reads cells as whitespace-separated tokens (no cell value contains
a space; the multi-word column names are recognised by name) and checks everything it can: the
GPU block is square with ``X`` on the diagonal, every cell is a link code nvidia-smi writes, the
matrix is symmetric and every row has exactly the cells the header announces. Anything else raises
:class:`TopologyParseError` with one line saying what is wrong; it never guesses a link.

Affinity cells are secondary: when a row's affinity cells cannot be assigned to their columns with
certainty (a long CPU list that ran into the next column, empty cells) they are left as ``None``
and a note says why, while the link matrix is still returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from preflight.parse.pasted import join_wrapped, unpaste


class TopologyParseError(ValueError):
    """A capture that cannot be read with certainty; the message is one line saying why."""


LINK_CODE = re.compile(r"^(?:X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|SOC)$")
"""Link codes nvidia-smi writes. ``SOC`` is the pre-2017 name of ``SYS`` (cross-socket)."""

P2P_STATUS_CODES = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "DR", "U", "CND"})
"""Codes of ``nvidia-smi topo -p2p``: a different matrix, recognised to explain the refusal."""

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_AFFINITY_PATTERNS = {
    name: re.compile(r"(?<!\S)" + r"\s+".join(name.split()) + r"(?!\S)") for name in AFFINITY_COLUMNS
}
_PLACEHOLDER = {name: f"\x00{index}" for index, name in enumerate(AFFINITY_COLUMNS)}
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_GPU_NAME = re.compile(r"^GPU(0|[1-9][0-9]*)$")
_GLUED_GPUS = re.compile(r"^((?:GPU[0-9]+){2,})(\S*)$|^(GPU[0-9]+)([A-Za-z]\S*)$")
_NIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
_LAUNCHER_PREFIX = re.compile(r"^(\s*[0-9]+: |\[[0-9]+,[0-9]+\]<std(?:out|err)>:)")
"""``srun --label`` (``0: ``) and ``mpirun --tag-output`` (``[1,0]<stdout>:``) line prefixes."""
_ID_LIST = re.compile(r"^[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*$")


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    """What ``nvidia-smi topo -m`` says about one node.

    ``links[i][j]`` is the code between ``gpus[i]`` and ``gpus[j]`` exactly as written (``X`` on
    the diagonal). NIC columns keep their header names (``NIC0`` or ``mlx5_0``); ``nic_devices``
    gives the device behind each (from the NIC legend, or the name itself; ``None`` if unknown).
    Affinity tuples are ``None`` when the column is absent; a cell is ``None`` when unreadable.
    """

    gpus: tuple[str, ...]
    links: tuple[tuple[str, ...], ...]
    nics: tuple[str, ...] = ()
    nic_devices: tuple[str | None, ...] = ()
    gpu_nic_links: tuple[tuple[str, ...], ...] = ()
    cpu_affinity: tuple[str | None, ...] | None = None
    numa_affinity: tuple[str | None, ...] | None = None
    gpu_numa_id: tuple[str | None, ...] | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        count = len(self.gpus)
        if count == 0:
            raise TopologyParseError("no GPU in the matrix")
        if len(self.links) != count or any(len(row) != count for row in self.links):
            raise TopologyParseError(f"GPU link matrix is not {count}x{count}")
        for i, row in enumerate(self.links):
            for j, code in enumerate(row):
                _check_code(code, self.gpus[i], self.gpus[j])
                if (i == j) != (code == "X"):
                    where = "diagonal cell" if i == j else "off-diagonal cell"
                    raise TopologyParseError(f"{self.gpus[i]} row, column {self.gpus[j]}: {where} is {code!r}")
                if self.links[j][i] != code:
                    raise TopologyParseError(
                        f"matrix is not symmetric: {self.gpus[i]}->{self.gpus[j]} is {code} "
                        f"but {self.gpus[j]}->{self.gpus[i]} is {self.links[j][i]}"
                    )
        if len(self.nic_devices) != len(self.nics):
            raise TopologyParseError("nic_devices must name one device per NIC column")
        ragged = any(len(row) != len(self.nics) for row in self.gpu_nic_links)
        if self.nics and (len(self.gpu_nic_links) != count or ragged):
            raise TopologyParseError(f"GPU x NIC block is not {count}x{len(self.nics)}")
        for values in (self.cpu_affinity, self.numa_affinity, self.gpu_numa_id):
            if values is not None and len(values) != count:
                raise TopologyParseError("an affinity column does not have one cell per GPU")

    def link(self, a: int, b: int) -> str:
        """The code between GPU ``a`` and GPU ``b`` (by position)."""
        return self.links[a][b]

    def pairs(self) -> Iterator[tuple[int, int, str]]:
        """Every unordered GPU pair ``(i, j, code)`` with ``i < j``."""
        for i in range(len(self.gpus)):
            for j in range(i + 1, len(self.gpus)):
                yield i, j, self.links[i][j]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON form (the shape ``preflight topology --json`` prints)."""
        return {
            "gpus": list(self.gpus),
            "links": [list(row) for row in self.links],
            "nics": list(self.nics),
            "nic_devices": list(self.nic_devices),
            "gpu_nic_links": [list(row) for row in self.gpu_nic_links],
            "cpu_affinity": None if self.cpu_affinity is None else list(self.cpu_affinity),
            "numa_affinity": None if self.numa_affinity is None else list(self.numa_affinity),
            "gpu_numa_id": None if self.gpu_numa_id is None else list(self.gpu_numa_id),
            "notes": list(self.notes),
        }


def nvlink_width(code: str) -> int | None:
    """``"NV12"`` -> 12; ``None`` for any code that is not NVLink."""
    return int(code[2:]) if code.startswith("NV") and code[2:].isdigit() else None


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse the output of ``nvidia-smi topo -m``; raise :class:`TopologyParseError` when unsure."""
    raw_lines = text.replace("\r\n", "\n").split("\n")
    lines, paste_notes = unpaste([_ANSI.sub("", line).rstrip("\r") for line in raw_lines])
    lines = _strip_launcher_prefix(lines)
    header_at = _find_header(lines)
    if not _is_wrapped(lines, header_at):
        return _parse_lines(lines, header_at, paste_notes)
    readings: list[tuple[TopoMatrix, str]] = []
    problem = ""
    for inside_words in (True, False):
        rejoined, width = _rejoin(lines, header_at, inside_words)
        try:
            readings.append((_parse_lines(rejoined, header_at, paste_notes), width))
        except TopologyParseError as exc:
            problem = problem or f"the capture was wrapped at {width} (long lines continue on the next line) and " \
                                 f"cannot be rejoined with certainty: {exc}"
    if not readings:
        raise TopologyParseError(problem)
    if len(readings) == 2 and readings[0][0].as_dict() != readings[1][0].as_dict():
        raise TopologyParseError(f"the capture was wrapped at {readings[0][1]} and rejoins two ways that both read "
                                 "as a matrix (was a cell cut at the edge?); capture it again without wrapping")
    matrix, width = readings[0]
    note = f"the capture was wrapped at {width}; its lines were rejoined and every GPU cell checked"
    return replace(matrix, notes=(*matrix.notes, note))


def _parse_lines(lines: list[str], header_at: int, paste_notes: list[str]) -> TopoMatrix:
    """The matrix whose header is ``lines[header_at]``."""
    gpus, nics, affinity_columns = _read_header(lines[header_at])
    columns = gpus + nics
    rows, end = _read_rows(lines, header_at + 1, columns)
    _reject_trailing_matrix(lines[end:], columns)

    missing = [name for name in columns if name not in rows]
    if missing:
        kind = "GPU" if missing[0] in gpus else "NIC"
        raise TopologyParseError(
            f"{kind} rows missing: {', '.join(missing)} (the header lists them; capture truncated?)"
        )

    width = len(columns)
    cells: dict[str, list[str]] = {}
    extras: dict[str, list[str]] = {}
    for name in columns:
        tokens = rows[name]
        if len(tokens) < width:
            raise TopologyParseError(
                f"row {name} has {len(tokens)} cells, the header has {width} GPU/NIC columns (row cut short?)"
            )
        for position, (column, code) in enumerate(zip(columns, tokens[:width], strict=True)):
            if not LINK_CODE.match(code) and (code == "N/A" or _ID_LIST.match(code)):
                raise TopologyParseError(
                    f"row {name}: expected {width} link cells ({columns[0]}..{columns[-1]}), "
                    f"found {position} before {code!r} (ragged or clipped row)"
                )
            _check_code(code, name, column)
        cells[name] = tokens[:width]
        extras[name] = tokens[width:]
        if name in nics and extras[name]:
            raise TopologyParseError(
                f"row {name} has {len(tokens)} cells, expected {width}: extra {' '.join(extras[name])!r}"
            )
        if name in gpus and len(extras[name]) > len(affinity_columns):
            raise TopologyParseError(
                f"row {name} has {len(extras[name])} cells after the link columns, "
                f"the header has {len(affinity_columns)} ({', '.join(affinity_columns) or 'none'})"
            )

    _check_square(columns, cells)
    links = tuple(tuple(cells[g][: len(gpus)]) for g in gpus)
    gpu_nic_links = tuple(tuple(cells[g][len(gpus) :]) for g in gpus) if nics else ()
    affinity, notes = _read_affinity(gpus, affinity_columns, extras)
    legend = _read_nic_legend(lines[end:])
    nic_devices = _nic_devices(nics, legend)
    return TopoMatrix(
        gpus=tuple(gpus),
        links=links,
        nics=tuple(nics),
        nic_devices=nic_devices,
        gpu_nic_links=gpu_nic_links,
        cpu_affinity=affinity.get("CPU Affinity"),
        numa_affinity=affinity.get("NUMA Affinity"),
        gpu_numa_id=affinity.get("GPU NUMA ID"),
        notes=(*paste_notes, *notes),
    )


def _is_first_row(line: str) -> bool:
    tokens = line.split()
    return len(tokens) > 1 and tokens[0] == "GPU0" and LINK_CODE.match(tokens[1]) is not None


def _is_wrapped(lines: Sequence[str], header_at: int) -> bool:
    """A wrapped capture has a header that does not end on its own line: the line after it is
    neither the GPU0 row nor blank, and the header reaches (nearly) the widest line of its block."""
    following = lines[header_at + 1] if header_at + 1 < len(lines) else ""
    if not following.strip() or _is_first_row(following):
        return False
    block = []
    for line in lines[header_at:]:
        if not line.strip():
            break
        block.append(line)
    longest = max(len(line) for line in block)
    reaching = [line for line in block if len(line.rstrip()) > longest - 8]
    return longest >= 40 and len(reaching) >= 2 and len(lines[header_at].rstrip()) > longest - 8


def _rejoin(lines: Sequence[str], header_at: int, inside_words: bool) -> tuple[list[str], str]:
    """The lines with each wrapped header and row joined back into one, and the width in words.

    The header continues until the GPU0 row; each row until the next line that starts with a
    row label (or a blank line). How the pieces are joined: :func:`join_wrapped`.
    """
    groups: list[list[str]] = []
    index = _group(lines, header_at, groups, lambda line: _is_first_row(line))
    labels = set(_split_header(join_wrapped(groups[:1], inside_words)[0][0]))
    while index < len(lines) and lines[index].strip():
        index = _group(lines, index, groups, lambda line: line.split()[0] in labels)
    joined, width = join_wrapped(groups, inside_words)
    return [*lines[:header_at], *joined, *lines[index:]], width


def _group(lines: Sequence[str], start: int, groups: list[list[str]], starts_next: Callable[[str], bool]) -> int:
    """Add ``lines[start]`` and its continuations to ``groups``; the index of the line after them."""
    group = [lines[start]]
    index = start + 1
    while index < len(lines) and lines[index].strip() and not starts_next(lines[index]):
        group.append(lines[index])
        index += 1
    groups.append(group)
    return index


def _strip_launcher_prefix(lines: list[str]) -> list[str]:
    """Remove a launcher's line prefix, but only when every non-empty line carries the same one."""
    filled = [line for line in lines if line.strip()]
    first = _LAUNCHER_PREFIX.match(filled[0]) if filled else None
    if first is None or not all(line.startswith(first.group(1)) for line in filled):
        return lines
    return [line[len(first.group(1)):] for line in lines]


def _check_code(code: str, row: str, column: str) -> None:
    """Refuse a cell that is not a link code, with a hint when it is a ``topo -p2p`` code."""
    if LINK_CODE.match(code):
        return
    if code in P2P_STATUS_CODES:
        raise TopologyParseError(
            f"row {row}, column {column}: {code!r} is a P2P status code; this looks like "
            "`nvidia-smi topo -p2p` output, not the `topo -m` link matrix"
        )
    raise TopologyParseError(
        f"row {row}, column {column}: {code!r} is not a link code (X, NV#, PIX, PXB, PHB, NODE, SYS)"
    )


def _find_header(lines: Sequence[str]) -> int:
    """Index of the header line: the first line whose first token is GPU0 and the next is not a link."""
    for index, line in enumerate(lines):
        tokens = _split_header(line)
        if not tokens or tokens[0] != "GPU0":
            continue
        if len(tokens) > 1 and LINK_CODE.match(tokens[1]):
            raise TopologyParseError("matrix rows start before any header line (header missing?)")
        return index
    first = next((line.strip() for line in lines if line.strip()), "")
    if not first:
        raise TopologyParseError("empty input: no `nvidia-smi topo -m` matrix found")
    raise TopologyParseError(
        f"no `nvidia-smi topo -m` header (a line starting with GPU0) found; first line: {first[:80]!r}"
    )


def _split_header(line: str) -> list[str]:
    """Header tokens, with the multi-word column names kept whole and glued GPU names split."""
    for name, pattern in _AFFINITY_PATTERNS.items():
        line = pattern.sub(_PLACEHOLDER[name], line)
    tokens: list[str] = []
    for token in line.split():
        glued = _GLUED_GPUS.match(token)
        if glued and not _GPU_NAME.match(token):
            names = glued.group(1) or glued.group(3)
            tokens.extend(re.findall(r"GPU[0-9]+", names))
            rest = glued.group(2) if glued.group(1) else glued.group(4)
            if rest:
                tokens.append(rest)
        else:
            tokens.append(token)
    return tokens


def _read_header(line: str) -> tuple[list[str], list[str], list[str]]:
    """GPU columns, NIC columns and affinity columns, in order, with their order checked."""
    by_placeholder = {value: key for key, value in _PLACEHOLDER.items()}
    gpus: list[str] = []
    nics: list[str] = []
    affinity: list[str] = []
    for token in _split_header(line):
        if token in by_placeholder:
            affinity.append(by_placeholder[token])
        elif _GPU_NAME.match(token):
            if nics or affinity:
                raise TopologyParseError(f"header: GPU column {token} comes after NIC or affinity columns")
            gpus.append(token)
        elif _NIC_NAME.match(token) and not affinity:
            nics.append(token)
        else:
            raise TopologyParseError(f"header: unknown column {token!r}")
    expected = [f"GPU{i}" for i in range(len(gpus))]
    if gpus != expected:
        raise TopologyParseError(f"header: GPU columns are {' '.join(gpus)}, expected {' '.join(expected)}")
    if len(set(nics)) != len(nics):
        raise TopologyParseError(f"header: a NIC column is repeated: {' '.join(nics)}")
    order = [name for name in AFFINITY_COLUMNS if name in affinity]
    if affinity != order:
        raise TopologyParseError(f"header: affinity columns out of order or repeated: {', '.join(affinity)}")
    return gpus, nics, affinity


def _read_rows(lines: Sequence[str], start: int, columns: Sequence[str]) -> tuple[dict[str, list[str]], int]:
    """Row tokens by label, from ``start`` to the first line that is not a matrix row."""
    rows: dict[str, list[str]] = {}
    index = start
    while index < len(lines):
        tokens = lines[index].split()
        if not tokens or not (tokens[0] in columns or _looks_like_row(tokens)):
            break
        label = tokens[0]
        if label not in columns:
            raise TopologyParseError(
                f"row {label} has no column in the header (header columns: {', '.join(columns)}); "
                "the capture looks clipped or the matrix is not square"
            )
        if label in rows:
            raise TopologyParseError(f"row {label} appears twice")
        rows[label] = tokens[1:]
        index += 1
    return rows, index


def _looks_like_row(tokens: Sequence[str]) -> bool:
    """A matrix row: a device label followed by at least one link-code-like cell."""
    return len(tokens) >= 2 and (
        _GPU_NAME.match(tokens[0]) is not None
        or (_NIC_NAME.match(tokens[0]) is not None and tokens[1].isupper() and not tokens[0].endswith(":"))
    ) and (LINK_CODE.match(tokens[1]) is not None or tokens[1] in P2P_STATUS_CODES)


def _reject_trailing_matrix(lines: Sequence[str], columns: Sequence[str]) -> None:
    """A matrix row after the row block means two matrices or a row split off by a blank line."""
    for line in lines:
        tokens = line.split()
        if tokens and _GPU_NAME.match(tokens[0]) and _looks_like_row(tokens):
            raise TopologyParseError(
                f"row {tokens[0]} appears after the end of the matrix (two captures pasted together?)"
            )
        if tokens and tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] in ("GPU1", "CPU"):
            raise TopologyParseError("a second matrix header follows the first (two captures pasted together?)")


def _check_square(columns: Sequence[str], cells: dict[str, list[str]]) -> None:
    """X exactly on the diagonal and the whole GPU+NIC block symmetric."""
    for i, row in enumerate(columns):
        for j, column in enumerate(columns):
            code = cells[row][j]
            if i == j and code != "X":
                raise TopologyParseError(f"row {row}: diagonal cell is {code!r}, expected X")
            if i != j and code == "X":
                raise TopologyParseError(f"row {row}, column {column}: X off the diagonal")
            mirror = cells[column][i]
            if mirror != code:
                raise TopologyParseError(
                    f"matrix is not symmetric: {row}->{column} is {code} but {column}->{row} is {mirror}"
                )


def _read_affinity(
    gpus: Sequence[str], columns: Sequence[str], extras: dict[str, list[str]]
) -> tuple[dict[str, tuple[str | None, ...]], list[str]]:
    """Affinity values per column; rows whose cells do not fill the columns are left unread."""
    values: dict[str, list[str | None]] = {name: [] for name in columns}
    notes: list[str] = []
    for gpu in gpus:
        tokens = extras[gpu]
        if len(tokens) == len(columns):
            for name, token in zip(columns, tokens, strict=True):
                _check_affinity_value(gpu, name, token)
                values[name].append(token)
            continue
        for name in columns:
            values[name].append(None)
        if not tokens:
            notes.append(f"{gpu}: affinity cells are empty")
        else:
            notes.append(
                f"{gpu}: affinity cells {' '.join(tokens)!r} do not fill the {len(columns)} columns "
                f"({', '.join(columns)}); a value probably ran into the next column, so they are left unread"
            )
    return {name: tuple(cells) for name, cells in values.items()}, notes


def _check_affinity_value(gpu: str, column: str, value: str) -> None:
    """CPU and NUMA cells are id lists (``0-31,64-95``) or ``N/A``; anything else is damage."""
    if value == "N/A" or _ID_LIST.match(value):
        return
    raise TopologyParseError(f"row {gpu}: {column} {value!r} is not a CPU/NUMA id list (clipped capture?)")


def _read_nic_legend(lines: Sequence[str]) -> dict[str, str]:
    """``NIC0: mlx5_0`` lines of the NIC legend."""
    legend: dict[str, str] = {}
    for line in lines:
        found = _NIC_LEGEND.match(line)
        if found:
            if found.group(1) in legend:
                raise TopologyParseError(f"NIC legend names {found.group(1)} twice")
            legend[found.group(1)] = found.group(2)
    return legend


def _nic_devices(nics: Sequence[str], legend: dict[str, str]) -> tuple[str | None, ...]:
    """The device behind each NIC column; legend entries must match the NIC columns."""
    stray = sorted(set(legend) - set(nics))
    if stray:
        raise TopologyParseError(f"NIC legend names {', '.join(stray)}, which are not columns of the matrix")
    devices: list[str | None] = []
    for nic in nics:
        if re.match(r"^NIC[0-9]+$", nic):
            devices.append(legend.get(nic))
        else:
            devices.append(nic)
    return tuple(devices)
