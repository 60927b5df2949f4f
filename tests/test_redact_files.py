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


def test_binary_files_and_links_are_left_alone(tmp_path: Path) -> None:
    run = _launch_dir(tmp_path)
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
    assert shard.read_bytes() == b"\0\x01" + planted.GITHUB_TOKEN.encode()
    assert outside.read_text() == f"token {planted.GITHUB_TOKEN}" and _mode(outside) == 0o644
    assert (package / "source.py").read_text() == f'TOKEN = "{planted.GITHUB_TOKEN}"\n'
    assert _mode(shard.parent) == 0o700


def test_a_file_whose_scrubbed_copy_cannot_be_written_is_removed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk must not leave the raw secrets behind: the file goes, its text is lost."""
    run = _launch_dir(tmp_path)

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(redact, "write_bytes_atomic", full)
    redact_files(run)
    assert sorted(p.name for p in run.iterdir()) == ["rank0.pid"]


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
