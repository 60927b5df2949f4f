"""Which nccl-tests binary printed a table, told from its columns when the output does not say.

Facts from the nccl-tests sources (``src/<collective>.cu``, ``GetCollByteCount`` and ``GetBw``):
the ``size`` column is the larger of the send and receive buffers and ``count`` the per-rank
parameter count, so ``size / (count x type size)`` is 1 for all_reduce, reduce, broadcast and
sendrecv and the rank count n for all_gather, reduce_scatter, alltoall, scatter and gather.
``redop`` is ``none`` for the collectives that do not reduce, ``root`` is -1 for the rooted ones
only when no root applies, and busbw = algbw x factor: 2(n-1)/n for all_reduce, (n-1)/n for the
n-ratio collectives, 1 for broadcast, reduce and sendrecv. Pairs that no column tells apart
(all_gather and alltoall, scatter and gather, all_reduce on 2 ranks and sendrecv) are both named.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

TYPE_BYTES = {
    "int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1,
    "half": 2, "bfloat16": 2, "f16": 2, "bf16": 2,
    "int32": 4, "uint32": 4, "float": 4, "int": 4, "uint": 4, "f32": 4,
    "int64": 8, "uint64": 8, "double": 8, "long": 8, "ulong": 8, "f64": 8,
}
FACTOR_TOLERANCE = 0.03
"""Relative: busbw and algbw are printed with 2 decimals, so their ratio is known to about 1 %."""
MIN_ALGBW_GBPS = 1.0
"""Rows slower than this carry too few digits to give the busbw/algbw factor."""


@dataclass(frozen=True, slots=True)
class Columns:
    """What one table's columns say, across all its rows (None where the rows disagree)."""

    reduces: bool | None
    rooted: bool | None
    size_ratio: int | None
    factor: float | None


def bus_factor(pairs: Sequence[tuple[float, float]]) -> float | None:
    """busbw / algbw over the (algbw, busbw) pairs fast enough to give it; None when they disagree."""
    usable = [busbw / algbw for algbw, busbw in pairs if algbw >= MIN_ALGBW_GBPS]
    if not usable:
        zero = [busbw for algbw, busbw in pairs if algbw > 0]
        return 0.0 if zero and all(busbw == 0 for busbw in zero) else None
    middle = statistics.median(usable)
    if any(abs(value - middle) > FACTOR_TOLERANCE * max(middle, 0.1) for value in usable):
        return None
    return middle


def columns(redops: set[str], roots: set[int | None], ratios: set[float | None], factor: float | None) -> Columns:
    """Summarize the rows' redop, root and size/count ratio (None for a column that varies)."""
    reduces = None if len(redops) != 1 else next(iter(redops)) not in ("none", "")
    known_roots = {root for root in roots if root is not None}
    rooted: bool | None = None  # no root column (2019 builds), or rows that disagree
    if known_roots and None not in roots:
        rooted = True if all(r >= 0 for r in known_roots) else False if known_roots == {-1} else None
    whole = {int(r) for r in ratios if r is not None and r >= 1 and float(r).is_integer()}
    ratio = next(iter(whole)) if len(whole) == 1 and None not in ratios and len(ratios) == 1 else None
    return Columns(reduces, rooted, ratio, factor)


def _close(value: float, expected: float) -> bool:
    return abs(value - expected) <= FACTOR_TOLERANCE * max(expected, 0.1)


def collectives(cols: Columns, ranks: int | None) -> tuple[str, ...]:
    """The ``*_perf`` binaries whose output has these columns, most likely first; () when none fits."""
    factor, ratio = cols.factor, cols.size_ratio
    if factor is None or ratio is None or cols.reduces is None:
        return ()
    if ranks == 1 or factor == 0.0:
        return _one_rank(cols)
    if ratio > 1:
        if ranks not in (None, ratio) or not _close(factor, (ratio - 1) / ratio):
            return ()
        if cols.reduces:
            return ("reduce_scatter_perf",) if cols.rooted in (False, None) else ()
        unrooted, rooted = ("all_gather_perf", "alltoall_perf"), ("scatter_perf", "gather_perf")
        return unrooted if cols.rooted is False else rooted if cols.rooted else (*unrooted, *rooted)
    if not cols.reduces:
        return ("broadcast_perf",) if cols.rooted in (True, None) and _close(factor, 1.0) else ()
    found = []
    if cols.rooted in (True, None) and _close(factor, 1.0):
        found.append("reduce_perf")
    if cols.rooted in (False, None):
        all_reduce = _all_reduce_fits(factor, ranks)
        if all_reduce:
            found.append("all_reduce_perf")
        if _close(factor, 1.0):
            found.append("sendrecv_perf")
    return tuple(found)


def _all_reduce_fits(factor: float, ranks: int | None) -> bool:
    """busbw = algbw x 2(n-1)/n, for the known n or for some n >= 2."""
    if ranks is not None:
        return ranks >= 2 and _close(factor, 2 * (ranks - 1) / ranks)
    return 1.0 - FACTOR_TOLERANCE <= factor < 2.0


def _one_rank(cols: Columns) -> tuple[str, ...]:
    """With one rank the ratio is 1 and every factor but 1 is 0: fewer columns differ."""
    if cols.factor != 0.0:
        return ("broadcast_perf",) if not cols.reduces else ("reduce_perf", "sendrecv_perf")
    if cols.reduces:
        return ("all_reduce_perf", "reduce_scatter_perf")
    return ("all_gather_perf", "alltoall_perf", "scatter_perf", "gather_perf")


def describe(names: Sequence[str]) -> str:
    """``all_gather_perf or alltoall_perf``."""
    return " or ".join(names)
