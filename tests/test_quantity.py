"""Model and memory sizes: every accepted spelling, and a clear error for everything else."""

from __future__ import annotations

from decimal import Decimal

import pytest

from preflight.parse.quantity import (
    Headroom,
    QuantityError,
    format_bytes,
    format_param_count,
    parse_headroom,
    parse_memory_size,
    parse_param_count,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7B", 7_000_000_000),
        ("7b", 7_000_000_000),
        ("7e9", 7_000_000_000),
        ("7E9", 7_000_000_000),
        ("7000M", 7_000_000_000),
        ("1.5T", 1_500_000_000_000),
        ("125M", 125_000_000),
        ("350k", 350_000),
        ("350K", 350_000),
        (" 70 B ", 70_000_000_000),
        ("6738415616", 6_738_415_616),
        ("0.5B", 500_000_000),
        ("1e15", 10**15),
    ],
)
def test_param_counts(text: str, expected: int) -> None:
    assert parse_param_count(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-3B", "greater than zero"),
        ("0", "greater than zero"),
        ("0B", "greater than zero"),
        ("seven", "not a number"),
        ("nan", "not a number"),
        ("inf", "not a number"),
        ("1e400", "more than 10\\^15"),
        ("2e15", "more than 10\\^15"),
        ("", "empty"),
        ("   ", "empty"),
        ("7GB", "memory size"),
        ("7X", "unknown suffix"),
        ("1.5", "whole number"),
        ("1.2345678901B", "whole number"),
        ("1.2.3B", "not a number"),
        ("7 B B", "not a number"),
    ],
)
def test_bad_param_counts(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_param_count(text)


def test_quantity_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_param_count("seven")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),
        ("80G", 80 * 10**9),
        ("80gb", 80 * 10**9),
        ("80GiB", 80 * 2**30),
        ("81920MiB", 80 * 2**30),
        ("81559MiB", 81559 * 2**20),
        ("512MB", 512 * 10**6),
        ("512 MiB", 512 * 2**20),
        ("1.5TB", 1_500_000_000_000),
        ("1TiB", 2**40),
        ("64KiB", 65536),
        ("100B", 100),
        ("0.5KB", 500),
        ("1.5B", 1),
    ],
)
def test_memory_sizes(text: str, expected: int) -> None:
    assert parse_memory_size(text) == expected


def test_h100_marketing_80gb_is_below_its_real_memory() -> None:
    """The stated rule: '80GB' understates an H100's 81559 MiB, the safe side for planning."""
    assert parse_memory_size("80GB") < parse_memory_size("81559MiB") < parse_memory_size("80GiB")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("80", "needs a unit"),
        ("-80GB", "greater than zero"),
        ("0GB", "greater than zero"),
        ("eighty GB", "not a number"),
        ("80XB", "unknown unit"),
        ("1e400GB", "2\\^70"),
        ("", "empty"),
        ("nan GB", "not a number"),
    ],
)
def test_bad_memory_sizes(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_memory_size(text)


def test_headroom_percentage_and_size() -> None:
    assert parse_headroom("20%").bytes_of(80 * 10**9) == 16 * 10**9
    assert parse_headroom("0%").bytes_of(80 * 10**9) == 0
    assert parse_headroom("12.5 %").bytes_of(80 * 10**9) == 10 * 10**9
    assert parse_headroom("10GB").bytes_of(80 * 10**9) == 10 * 10**9
    assert parse_headroom("20%").describe() == "20% of each GPU"
    assert parse_headroom("10GB").describe() == "10.00 GB"


@pytest.mark.parametrize("text", ["20%", "0%", "12.5%", "10GB", "81559MiB", "0.5 KB"])
def test_headroom_text_round_trips(text: str) -> None:
    """The preflight CLI hands parsed options to pytest as ``str(value)``: it must read back the same."""
    headroom = parse_headroom(text)
    assert parse_headroom(str(headroom)) == headroom


@pytest.mark.parametrize("text", ["100%", "120%", "-5%", "abc%", "nan%", "10"])
def test_bad_headroom(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_headroom(text)


def test_headroom_needs_exactly_one_form() -> None:
    with pytest.raises(QuantityError):
        Headroom()
    with pytest.raises(QuantityError):
        Headroom(fraction=Decimal("0.1"), absolute_bytes=1)


@pytest.mark.parametrize(
    ("value", "text"),
    [(7_000_000_000, "7B"), (1_500_000_000_000, "1.5T"), (125_000_000, "125M"), (350_000, "350k"),
     (6_738_415_616, "6.738415616B"), (999, "999")],
)
def test_format_param_count_round_trips(value: int, text: str) -> None:
    assert format_param_count(value) == text
    assert parse_param_count(text) == value


def test_format_bytes_is_decimal_gigabytes() -> None:
    assert format_bytes(126 * 10**9) == "126.00 GB"
    assert format_bytes(15_750_000_000) == "15.75 GB"
