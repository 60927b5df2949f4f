"""Scrubbing the files a launch's ranks wrote raw, and the private modes of everything under a report directory."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from preflight.report import redact
from preflight.report.redact import redact_files
from preflight.report.writer import private_tree
from tests.fakes import planted


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _launch_dir(tmp_path: Path) -> Path:
    """A launch directory as the ranks leave it: raw text, umask modes."""
    run = tmp_path / "logs" / "rehearsal"
    run.mkdir(parents=True)
    (run / "rank0.log").write_text(f"[rank0]: fetching {planted.URL_WITH_PASSWORD}\nNCCL INFO comm 0x55d5 rank 0\n")
    (run / "rank0.ddp.error.json").write_text(json.dumps({"error": f"RuntimeError: {planted.GITHUB_TOKEN}",
                                                          "traceback": f"HF_TOKEN={planted.HF_TOKEN}"}))
    (run / "torchrun.log").write_bytes(b"exitcode 1 \xff\xfe not utf-8 " + planted.MASTER_ADDR.encode() + b"\n")
    (run / "rank0.pid").write_text('{"pid": 1}')
    for path in run.iterdir():
        path.chmod(0o644)
    run.chmod(0o755)
    return run


def test_secrets_go_and_everything_else_stays(tmp_path: Path) -> None:
    run = _launch_dir(tmp_path)
    changed = redact_files(run)
    assert sorted(p.name for p in changed) == ["rank0.ddp.error.json", "rank0.log", "torchrun.log"]
    log = (run / "rank0.log").read_text()
    assert log == "[rank0]: fetching https://deploy:[REDACTED]@artifacts.example/simple\nNCCL INFO comm 0x55d5 rank 0\n"
    error = json.loads((run / "rank0.ddp.error.json").read_text())  # still valid JSON
    assert error == {"error": "RuntimeError: ghp_[REDACTED]", "traceback": "HF_TOKEN=hf_[REDACTED]"}
    assert (run / "torchrun.log").read_bytes() == b"exitcode 1 \xff\xfe not utf-8 admin:[REDACTED]@10.0.0.5\n"
    assert (run / "rank0.pid").read_text() == '{"pid": 1}'
    for path in run.iterdir():
        assert _mode(path) == 0o600, path
    assert _mode(run) == 0o700
    assert redact_files(run) == []  # idempotent


def test_binary_files_are_scrubbed_and_links_left_alone(tmp_path: Path) -> None:
    """A rank log with one NUL byte (a progress bar, a C extension's stray write) is scrubbed like any other:
    issue 25 found an HF token left in such a ``rank0.log``."""
    run = _launch_dir(tmp_path)
    (run / "rank1.log").write_bytes(b"step 1\0\r\x1b[2K HF_TOKEN=" + planted.HF_TOKEN.encode() + b"\n\xff\0end\n")
    shard = run / "checkpoint" / "__0_0.distcp"
    shard.parent.mkdir()
    shard.write_bytes(b"\0\x01" + planted.GITHUB_TOKEN.encode())
    outside = tmp_path / "outside.txt"
    outside.write_text(f"token {planted.GITHUB_TOKEN}")
    outside.chmod(0o644)
    (run / "link.txt").symlink_to(outside)
    package = tmp_path / "package"  # the launcher stages preflight's workers as a link to the package
    package.mkdir()
    (package / "source.py").write_text(f'TOKEN = "{planted.GITHUB_TOKEN}"\n')
    (run / ".import").mkdir()
    (run / ".import" / "preflight").symlink_to(package, target_is_directory=True)
    redact_files(run)
    assert (run / "rank1.log").read_bytes() == b"step 1\0\r\x1b[2K HF_TOKEN=hf_[REDACTED]\n\xff\0end\n"
    assert shard.read_bytes() == b"\0\x01ghp_[REDACTED]"  # scratch of a launch: no secret survives in it either
    assert outside.read_text() == f"token {planted.GITHUB_TOKEN}" and _mode(outside) == 0o644
    assert (package / "source.py").read_text() == f'TOKEN = "{planted.GITHUB_TOKEN}"\n'
    assert _mode(shard.parent) == 0o700


def test_a_file_whose_scrubbed_copy_cannot_be_written_is_removed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk must not leave the raw secrets behind: the file goes, its text is lost."""
    run = _launch_dir(tmp_path)

    def full(out: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(redact, "_write_block", full)
    redact_files(run)
    assert sorted(p.name for p in run.iterdir()) == ["rank0.pid"]  # no temporary copy left either


def test_a_block_never_cuts_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks end at a line end, or a blank, and never inside a private key block: a 64-byte block still
    scrubs a token on a long line and a PEM key spread over many lines."""
    monkeypatch.setattr(redact, "BLOCK_BYTES", 64)
    key = "-----BEGIN PRIVATE KEY-----\n" + "".join("A" * 60 + "\n" for _ in range(3)) + "-----END PRIVATE KEY-----\n"
    path = tmp_path / "rank0.log"
    text = "x" * 50 + " " + "y" * 40 + f" HF_TOKEN={planted.HF_TOKEN} done\n" + key + "NCCL INFO ok\n"
    path.write_text(text)
    assert redact.redact_file(path)
    assert path.read_text() == redact.redact_text(text)
    assert planted.HF_TOKEN not in path.read_text() and "AAAA" not in path.read_text()


def test_private_tree_keeps_the_root_and_the_kept_file(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "logs" / "a").mkdir(parents=True)
    for name in ("preflight-junit.xml", "node.prom", "logs/a/rank0.log"):
        (tmp_path / name).write_text("x")
        (tmp_path / name).chmod(0o644)
    private_tree(tmp_path, keep=[tmp_path / "node.prom"])
    assert _mode(tmp_path) == 0o755
    assert _mode(tmp_path / "node.prom") == 0o644
    assert {_mode(tmp_path / n) for n in ("preflight-junit.xml", "logs/a/rank0.log")} == {0o600}
    assert {_mode(tmp_path / n) for n in ("logs", "logs/a")} == {0o700}
