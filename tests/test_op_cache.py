"""preflight's op cache: a library is trusted only when it is whole and the one the build left, and a process
without torch finds its folder only while the files its environment imported are unchanged.

The ELF files are real ones of this machine (the interpreter's own binary and a shared library of the
C library), copied and cut as a full disk or a killed copy cuts them."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from preflight.probe import op_cache


def _real_shared_object() -> Path:
    for candidate in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                      "/lib64/libc.so.6", "/usr/lib64/libc.so.6", os.path.realpath(sys.executable)):
        if Path(candidate).is_file():
            return Path(candidate)
    pytest.skip("no ELF file found on this machine")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A build folder holding one op's library (a real ELF file) as torch leaves it: ``<op>/<op>.so``."""
    library = tmp_path / "build" / "fused_adam" / "fused_adam.so"
    library.parent.mkdir(parents=True)
    shutil.copyfile(_real_shared_object(), library)
    return tmp_path / "build"


def test_a_whole_elf_file_passes_and_a_cut_one_says_where_it_ends(folder: Path) -> None:
    library = folder / "fused_adam" / "fused_adam.so"
    assert op_cache.elf_problem(str(library)) is None
    size = library.stat().st_size
    for cut in (size - 1, size // 2, 4096):
        os.truncate(library, cut)
        found = op_cache.elf_problem(str(library))
        assert found is not None and found.startswith(f"cut short: {cut} bytes"), found
    os.truncate(library, 10)
    assert op_cache.elf_problem(str(library)) == "10 bytes, not an ELF file"
    assert op_cache.elf_problem(str(folder / "missing.so")) is not None


def test_the_manifest_vouches_for_the_library_the_build_left_and_nothing_else(folder: Path) -> None:
    record = op_cache.describe_library(str(folder), "fused_adam")
    assert record["library"] == "fused_adam/fused_adam.so" and len(record["sha256"]) == 64
    op_cache.write_manifest(str(folder), ok=True, ops=[{"name": "fused_adam", **record},
                                                        {"name": "deepspeed_shm_comm", "source": "incompatible"}])
    assert op_cache.trusted_ops(str(folder), op_cache.read_manifest(str(folder))) is not None
    library = folder / "fused_adam" / "fused_adam.so"
    data = bytearray(library.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    library.write_bytes(bytes(data))
    assert "sha256 differs" in (op_cache.library_problem(str(folder), record) or "")
    os.truncate(library, record["size"] // 2)
    assert "the build left" in (op_cache.library_problem(str(folder), record) or "")
    assert op_cache.trusted_ops(str(folder), op_cache.read_manifest(str(folder))) is None
    op_cache.write_manifest(str(folder), ok=False, error="fused_adam: RuntimeError")
    assert op_cache.trusted_ops(str(folder), op_cache.read_manifest(str(folder))) is None


def test_an_environment_finds_its_folder_only_while_what_it_imported_is_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "py311_x_cpu_0123456789").mkdir(parents=True)
    torch_init = tmp_path / "site" / "torch" / "__init__.py"
    torch_init.parent.mkdir(parents=True)
    torch_init.write_text("# torch\n")
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    key = op_cache.identity("/venv/bin/python", env)
    op_cache.write_environment(str(root), key, str(root / "py311_x_cpu_0123456789"), [str(torch_init)])
    assert op_cache.environment_folder(str(root), key) == str(root / "py311_x_cpu_0123456789")
    # another ninja or compiler first on PATH, another interpreter: another environment (it asks once)
    assert op_cache.identity("/venv/bin/python", {**env, "PATH": "/opt/ninja/bin:/usr/bin"}) != key
    assert op_cache.identity("/other/bin/python", env) != key
    assert op_cache.identity("/venv/bin/python", {**env, "TERM": "xterm"}) == key  # what does not matter
    torch_init.write_text("# torch, reinstalled\n")
    assert op_cache.environment_folder(str(root), key) is None


def _known_environment(root: Path, env: dict[str, str]) -> Path:
    """A cache root where ``env`` (this interpreter) built one op: its folder, library, manifest and entry."""
    built = root / "py311_x_cpu_0123456789"
    library = built / "fused_adam" / "fused_adam.so"
    library.parent.mkdir(parents=True)
    shutil.copyfile(_real_shared_object(), library)
    op_cache.write_manifest(str(built), ok=True, ops=[{"name": "fused_adam",
                                                       **op_cache.describe_library(str(built), "fused_adam")}])
    op_cache.write_environment(str(root), op_cache.identity(sys.executable, env), str(built), [])
    (built / "preflight.lock").write_text("")
    return built


def test_a_folder_another_preflight_holds_is_waited_for_then_read_without_a_build_child(tmp_path: Path) -> None:
    """Another environment's build child holds the folder while it re-verifies the ops (its manifest is gone
    meanwhile): the run waits for it to let go and reads the cache, instead of a child of its own that would
    import torch and DeepSpeed to wait for the same lock (issue 27: the op-build child when the ops are built)."""
    import fcntl
    import threading

    from preflight.probe.command import CommandResult
    from preflight.probe.deepspeed_ops import BackgroundOpBuild

    env = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    built = _known_environment(tmp_path / "root", env)
    manifest = (built / op_cache.MANIFEST_NAME).read_text()
    children: list[list[str]] = []

    def runner(argv: Sequence[str], timeout_s: float = 0.0, env: Mapping[str, str] | None = None) -> CommandResult:
        children.append(list(argv))
        return CommandResult(tuple(argv), 1, "", "no child expected")

    holder = os.open(built / "preflight.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # the other preflight's build child
    (built / op_cache.MANIFEST_NAME).unlink()

    def finish() -> None:
        (built / op_cache.MANIFEST_NAME).write_text(manifest)
        os.close(holder)

    release = threading.Timer(0.5, finish)
    release.start()
    try:
        build = BackgroundOpBuild(60.0, root=tmp_path / "root", env=env, runner=runner, python=sys.executable)
        build.start()  # the cache does not answer yet: the build waits in its thread
        result = build.result()
    finally:
        release.join()
    assert children == [] and result.ok and result.directory == str(built), result
    assert [op.source for op in result.ops] == ["verified"]


def test_a_folder_held_past_the_wait_leaves_the_build_to_the_child(tmp_path: Path) -> None:
    """Held for longer than half the budget: the child runs as before, with what is left of the budget."""
    import fcntl

    from preflight.probe.command import CommandResult
    from preflight.probe.deepspeed_ops import BackgroundOpBuild

    env = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    built = _known_environment(tmp_path / "root", env)
    (built / op_cache.MANIFEST_NAME).unlink()
    budgets: list[float] = []

    def runner(argv: Sequence[str], timeout_s: float = 0.0, env: Mapping[str, str] | None = None) -> CommandResult:
        budgets.append(timeout_s)
        return CommandResult(tuple(argv), 3, '{"kind": "busy"}\n', "")

    holder = os.open(built / "preflight.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        build = BackgroundOpBuild(2.0, root=tmp_path / "root", env=env, runner=runner, python=sys.executable)
        build.start()
        result = build.result()
    finally:
        os.close(holder)
    assert len(budgets) == 1 and 0.5 < budgets[0] <= 1.1, budgets  # 2 s budget, about 1 s of it waited
    assert not result.ok
