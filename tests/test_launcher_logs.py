"""A launch's logs read in bounded pieces (preflight/launch/logs.py): a tail from the end of a file, and a
log of any size cut to its first and last bytes by a chunked copy, never read whole."""

from __future__ import annotations

import os
from pathlib import Path

from preflight.launch import logs


def test_a_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    path.write_bytes(b"x" * (3 * logs.TAIL_BYTES) + b"\n".join(b"line %d" % i for i in range(50)))
    assert logs.tail(path, lines=3) == "line 47\nline 48\nline 49"
    assert len(logs.read_bounded(path, limit=100)) == 100
    assert logs.tail(tmp_path / "missing.log") == ""


def test_a_long_log_keeps_its_head_and_its_tail_and_says_what_was_left_out(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    with open(path, "wb") as handle:
        handle.write(b"HEAD\n")
        handle.write(b"m" * 5000)
        handle.write(b"\nTAIL\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        original = logs.write_bounded(fd, path, keep=1000, head=100)
    finally:
        os.close(fd)
    text = path.read_text()
    assert original == 5011 and text.startswith("HEAD\n") and text.endswith("\nTAIL\n")
    assert "[preflight: 4,011 bytes of this log left out: it held 5,011 bytes; the first 100 and the last 900" in text
    assert path.stat().st_mode & 0o777 == 0o600 and not list(tmp_path.glob(".*bounded"))


def test_a_short_log_is_written_back_whole_from_a_descriptor_its_file_lost(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    path.write_text("all of it\n")
    fd = os.open(path, os.O_RDONLY)
    path.unlink()  # the script deleted it; preflight's descriptor still reads it
    try:
        assert logs.write_bounded(fd, path) == 10
    finally:
        os.close(fd)
    assert path.read_text() == "all of it\n"
