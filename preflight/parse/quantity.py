"""Parsing model sizes (``7B``, ``1.5T``) and memory sizes (``80GB``, ``81559MiB``).

Unit rule for memory, stated once and used everywhere in preflight:

* ``KB``, ``MB``, ``GB``, ``TB`` and the bare ``K``, ``M``, ``G``, ``T`` are decimal (SI):
  ``80GB`` = ``80G`` = 80 * 10**9 bytes. This is what the ZeRO/ml-engineering arithmetic uses
  ("7B x 18 bytes = 126 GB") and what Kubernetes means by ``G``.
* ``KiB``, ``MiB``, ``GiB``, ``TiB`` are binary: ``80GiB`` = 80 * 2**30 bytes. ``nvidia-smi``
  reports MiB.
* A GPU sold as "80 GB" (H100 SXM) reports 81559 MiB = 85.5 * 10**9 bytes, so typing ``80GB``
  understates it by about 6 %. The understatement is on the safe side for planning; pass the
  ``nvidia-smi`` figure (``81559MiB``) for the exact answer.

Model sizes use the usual suffixes of parameter counts, case-insensitive: ``k`` = 10**3,
``M`` = 10**6, ``B`` = 10**9 (billion), ``T`` = 10**12, or plain/scientific numbers (``7e9``).

Anything that cannot be read with certainty raises :class:`QuantityError` (a ``ValueError``)
with a one-line message; nothing here guesses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MAX_PARAMS = 10**15
"""Upper bound on a parameter count: larger inputs are typos (``1e400``), not models."""

MAX_BYTES = 2**70
"""Upper bound on a memory size (a zebibyte): larger inputs are typos."""

_PARAM_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}

_MEMORY_UNITS = {
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "M": 10**6,
    "MB": 10**6,
    "G": 10**9,
    "GB": 10**9,
    "T": 10**12,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}

_NUMBER_AND_UNIT = re.compile(r"^\s*([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


class QuantityError(ValueError):
    """A size that cannot be read with certainty; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Headroom:
    """Memory kept free for activations and temporary tensors: a fraction of each GPU or bytes."""

    fraction: Decimal | None = None
    absolute_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.fraction is None) == (self.absolute_bytes is None):
            raise QuantityError("headroom is either a percentage or a size, not both")
        if self.fraction is not None and not Decimal(0) <= self.fraction < Decimal(1):
            raise QuantityError(f"headroom must be at least 0% and below 100%, got {self.fraction * 100}%")

    def __str__(self) -> str:
        """The exact text ``parse_headroom`` reads back (the CLI hands options on as text)."""
        if self.absolute_bytes is not None:
            return f"{self.absolute_bytes}B"
        assert self.fraction is not None
        return f"{_plain(self.fraction * 100)}%"

    def bytes_of(self, gpu_total_bytes: int) -> int:
        """The headroom in bytes for a GPU of ``gpu_total_bytes``."""
        if self.absolute_bytes is not None:
            return self.absolute_bytes
        assert self.fraction is not None
        return int(self.fraction * gpu_total_bytes)

    def describe(self) -> str:
        """Human form, e.g. ``20% of each GPU`` or ``10.00 GB``."""
        if self.absolute_bytes is not None:
            return format_bytes(self.absolute_bytes)
        assert self.fraction is not None
        return f"{_plain(self.fraction * 100)}% of each GPU"


def parse_param_count(text: str) -> int:
    """``"7B"`` -> 7_000_000_000; also ``7e9``, ``7000M``, ``1.5T``, ``125M``, ``350k``."""
    number, suffix = _split(text, what="model size")
    key = suffix.upper()
    if key not in _PARAM_SUFFIXES:
        hint = " (that looks like a memory size)" if key in _MEMORY_UNITS and key != "B" else ""
        raise QuantityError(f"model size {text.strip()!r}: unknown suffix {suffix!r}{hint}; use k, M, B or T")
    value = _positive(number, text, what="model size") * _PARAM_SUFFIXES[key]
    if value > MAX_PARAMS:
        raise QuantityError(f"model size {text.strip()!r} is more than 10^15 parameters; check the number")
    if value != value.to_integral_value():
        raise QuantityError(f"model size {text.strip()!r} is not a whole number of parameters")
    return int(value)


def parse_memory_size(text: str) -> int:
    """``"80GB"`` -> 80 * 10**9 bytes; ``"80GiB"`` -> 80 * 2**30; a unit is required."""
    number, unit = _split(text, what="memory size")
    if not unit:
        raise QuantityError(f"memory size {text.strip()!r} needs a unit, e.g. 80GB or 81559MiB")
    key = unit.upper()
    if key not in _MEMORY_UNITS:
        raise QuantityError(
            f"memory size {text.strip()!r}: unknown unit {unit!r}; use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB"
        )
    value = _positive(number, text, what="memory size") * _MEMORY_UNITS[key]
    if value > MAX_BYTES:
        raise QuantityError(f"memory size {text.strip()!r} is more than 2^70 bytes; check the number")
    return int(value.to_integral_value(rounding="ROUND_FLOOR"))


def parse_headroom(text: str) -> Headroom:
    """``"20%"`` (of each GPU's memory) or a memory size such as ``"10GB"``; ``"0%"`` is allowed."""
    stripped = text.strip()
    if stripped.endswith("%"):
        number = stripped[:-1].strip()
        try:
            percent = Decimal(number)
        except InvalidOperation:
            raise QuantityError(f"headroom {stripped!r} is not a percentage") from None
        if not percent.is_finite() or not Decimal(0) <= percent < Decimal(100):
            raise QuantityError(f"headroom {stripped!r} must be at least 0% and below 100%")
        return Headroom(fraction=percent / 100)
    return Headroom(absolute_bytes=parse_memory_size(stripped))


def format_bytes(value: int | float) -> str:
    """Decimal gigabytes with two decimals (``126.00 GB``), the unit the sizing rule uses."""
    return f"{value / 10**9:,.2f} GB"


def format_param_count(value: int) -> str:
    """``7_000_000_000`` -> ``7B``; ``1_500_000_000_000`` -> ``1.5T``; exact, never rounded."""
    for suffix, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if value >= scale:
            return f"{_plain(Decimal(value) / scale)}{suffix}"
    return str(value)


def _split(text: str, *, what: str) -> tuple[str, str]:
    """Split ``"1.5 T"`` into ``("1.5", "T")``; reject anything else with a clear message."""
    if not isinstance(text, str) or not text.strip():
        raise QuantityError(f"{what} is empty")
    match = _NUMBER_AND_UNIT.match(text)
    if match is None:
        raise QuantityError(f"{what} {text.strip()!r} is not a number with an optional unit (e.g. 7B, 80GB)")
    return match.group(1), match.group(2)


def _positive(number: str, text: str, *, what: str) -> Decimal:
    """The number as an exact Decimal, which must be finite and above zero."""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise QuantityError(f"{what} {text.strip()!r} is not a number") from None
    if not value.is_finite():
        raise QuantityError(f"{what} {text.strip()!r} is not a finite number")
    if value <= 0:
        raise QuantityError(f"{what} {text.strip()!r} must be greater than zero")
    return value


def _plain(value: Decimal) -> str:
    """A Decimal without exponent or trailing zeros: ``Decimal('1.50E+1')`` -> ``15``."""
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
