"""preflight touches only its own files (issue 25 item 2) and writes only where it can (item 1): a report
directory that is the user's project keeps the user's files and modes; preflight's own folder carries its
mark; a cache location that cannot be written falls back to a private folder of this user's."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from preflight.locations import UnusableLocation, cache_folder, private_scratch, unwritable
from preflight.probe.deepspeed_ops import extensions_root
from preflight.report.ownership import (
    LOGS,
    OUTPUTS,
    OWNED_MARK,
    NotPreflights,
    ReportDirectory,
    logs_dir,
    make_private,
    remove_if_owned,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _project(root: Path) -> Path:
    (root / "logs" / "tb").mkdir(parents=True)
    (root / "logs" / "tb" / "events.out.tfevents.1").write_bytes(b"events")
    (root / "bin").mkdir()
    (root / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (root / "bin" / "run.sh").chmod(0o755)
    (root / "logs").chmod(0o755)
    return root


def test_a_run_in_a_project_directory_leaves_the_users_files_alone(tmp_path: Path) -> None:
    project = _project(tmp_path)
    for name in OUTPUTS:
        (project / name).write_text("an earlier run's")
    directory = ReportDirectory(project)
    directory.acquire()
    try:
        removed = directory.clear_previous()
        assert sorted(p.name for p in removed) == sorted(OUTPUTS)
        (project / LOGS / "rehearsal").mkdir()
        (project / LOGS / "rehearsal" / "rank0.log").write_text("x")
        (project / "preflight.json").write_text("{}")
        make_private(project)
    finally:
        directory.release()
    assert (project / "logs" / "tb" / "events.out.tfevents.1").read_bytes() == b"events"
    assert _mode(project / "bin" / "run.sh") == 0o755 and _mode(project / "logs") == 0o755
    assert _mode(project / "preflight.json") == 0o600
    assert _mode(project / LOGS) == 0o700 and _mode(project / LOGS / "rehearsal" / "rank0.log") == 0o600


def test_the_next_run_empties_preflights_folder_and_keeps_its_mark(tmp_path: Path) -> None:
    own = logs_dir(tmp_path)
    (own / "rehearsal").mkdir()
    (own / "rehearsal" / "rank0.json").write_text("{}")
    (own / "cpu-info.json").write_text("{}")
    ReportDirectory(tmp_path).clear_previous()
    assert sorted(p.name for p in own.iterdir()) == [OWNED_MARK]


@pytest.mark.parametrize("taken", ["folder", "file", "link"])
def test_a_name_preflight_did_not_make_is_refused_never_emptied(tmp_path: Path, taken: str) -> None:
    path = tmp_path / LOGS
    if taken == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("mine")
    elif taken == "file":
        path.write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / OWNED_MARK).write_text("")  # even a marked folder, reached through a link
        path.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(NotPreflights, match="was not made by preflight"):
        ReportDirectory(tmp_path).clear_previous()
    kept = {"folder": path / "notes.txt", "file": path, "link": tmp_path / "elsewhere" / OWNED_MARK}[taken]
    assert kept.read_text() == ("" if taken == "link" else "mine")


def test_only_a_launch_folder_of_preflights_is_removed(tmp_path: Path) -> None:
    users = tmp_path / "users" / "rehearsal"
    users.mkdir(parents=True)
    assert remove_if_owned(users) is False and users.exists()
    own = logs_dir(tmp_path / "reports") / "rehearsal"
    own.mkdir()
    assert remove_if_owned(own) is True and not own.exists()
    assert remove_if_owned(tmp_path / "never-there") is True


# -- locations preflight writes besides the report directory ---------------------------------------------


def test_unwritable_names_why_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("")  # HOME a regular file
    assert unwritable(tmp_path / "home" / ".cache" / "preflight") == f"{tmp_path / 'home'} is not a directory"
    assert unwritable(tmp_path / "new" / "deeper") is None and not (tmp_path / "new").exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "home"]  # the probe file went again
    sysfs = unwritable(Path("/sys/fs/preflight-test"))  # refused to root too (a chmod would not be)
    assert sysfs is not None and "not writable" in sysfs


def test_the_op_cache_falls_back_when_home_cannot_take_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "home-file").write_text("")
    fallback = tmp_path / "tmp" / f"preflight-{os.getuid()}" / "torch_extensions"
    for home in (str(tmp_path / "home-file"), "/sys/fs"):  # HOME a file; HOME read-only (sysfs: even for root)
        assert extensions_root({"HOME": home}) == fallback
    assert _mode(fallback.parent) == 0o700
    writable = tmp_path / "home"
    writable.mkdir()
    assert extensions_root({"HOME": str(writable)}) == writable / ".cache" / "preflight" / "torch_extensions"
    assert extensions_root({"PREFLIGHT_TORCH_EXTENSIONS_DIR": "/sys/fs/x"}) == Path("/sys/fs/x")  # as asked:
    # the CLI refuses an unwritable one in one line (tests/bad_inputs.py: torch-extensions-dir-unwritable)


@pytest.mark.parametrize("kind", ["open to others", "a link"])
def test_a_private_scratch_folder_must_be_this_users_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           kind: str) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    top = tmp_path / f"preflight-{os.getuid()}"
    if kind == "a link":
        (tmp_path / "planted").mkdir(mode=0o700)
        top.symlink_to(tmp_path / "planted", target_is_directory=True)
    else:
        top.mkdir()
        top.chmod(0o777)
    with pytest.raises(UnusableLocation, match="is not a private folder of this user"):
        private_scratch("torch_extensions")
    with pytest.raises(UnusableLocation):
        cache_folder(Path("/sys/fs/x"), "torch_extensions")
