"""Child process: load DeepSpeed ops the way a job's first step does (building them when needed).

Run as ``python op_build_child.py SPEC_JSON`` by :mod:`preflight.probe.deepspeed_ops`, never imported
by preflight itself: it imports torch and DeepSpeed, and only the standard library besides, so it
runs in the job's environment as a plain file. Every fact is printed as one line ``MARK {json}`` on
stdout; the build's own output (ninja, the compilers) goes to stdout and stderr as it comes.

What it follows in DeepSpeed 0.19.8 (``op_builder/builder.py``): ``OpBuilder.load`` (line 549) imports an op
pre-built into the wheel when ``installed_ops[name]`` is set and the wheel's ``accelerator_name`` is
the running accelerator's (after ``validate_torch_version``, and ``validate_torch_op_version`` for
CUDA ops with CUDA available), otherwise it calls ``jit_load`` (line 568), which calls
``torch.utils.cpp_extension.load`` with ``with_cuda`` only for a ``CUDAOpBuilder`` whose
``build_for_cpu`` is False (``not torch.cuda.is_available()`` makes it True, line 580). The builder comes from
``get_accelerator().create_op_builder(name)``, as ``deepspeed.ops.op_builder.<Name>`` resolves it,
so on a node without CUDA devices the CPU accelerator's builders (C++ only) are the ones built.
An op DeepSpeed loads only when compatible (the shared-memory all-reduce of the CPU accelerator,
``deepspeed/comm/torch.py: build_shm_op``, line 47) is skipped the way DeepSpeed skips it.

Locking (the extensions root is preflight's own): a build holds an exclusive ``flock`` on its
folder's ``<dir>/preflight.lock``; the ranks of a rehearsal hold it shared while they load, so a
build waits for loads in its folder and they for it, and builds in other folders (other
environments, other preflight runs) never wait on each other. Held exclusively, any torch build lock
``<dir>/<op>/lock`` is stale: torch's ``FileBaton`` (torch 2.4-2.13: a file created with
``O_EXCL``, waited on while it exists) is left behind when its holder is killed, and every later
build of that op would wait for it for ever (``_jit_compile``:
``FileBaton(os.path.join(build_directory, 'lock'))``, ``cpp_extension.py`` line 1697 in 2.4.1, 2345
in 2.13.0). torch 2.14.1 holds an OS advisory lock on the same path instead (``with FileLock(...)``,
line 2362), which the kernel releases; its file may stay, and removing it while nobody holds it is
harmless. The build ends by writing ``<dir>/preflight-build.json`` (ok or the error, and every op's
library with its size and sha256: :mod:`preflight.probe.op_cache`), which the ranks read before loading.

The cache: one folder per Python, torch build, DeepSpeed build, accelerator and compiler
(:func:`cache_key`), not per install location, so two environments with the same torch and
DeepSpeed share one build. An op whose library the manifest vouches for is imported straight from
it (:func:`import_library`), as torch's ``_import_module_from_library`` does after a build, without
``cpp_extension.load``: that call runs ninja, which rebuilds everything when its log was written by
another ninja version, or when another install's paths are in ``build.ninja``. A library that does
not verify (cut short: mapping it killed this child with SIGBUS while ninja said "no work to do")
is removed first, so ninja links it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _sibling(name: str) -> ModuleType:
    """A standard-library module next to this file, loaded by path (this file runs as a plain script)."""
    spec = importlib.util.spec_from_file_location(f"_preflight_{name}", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING or __package__:
    from preflight.probe import op_cache
else:  # run as a file in the job's interpreter, which may not have preflight installed
    op_cache = _sibling("op_cache")

MARK = "PREFLIGHT_OP_BUILD"
LOCK_NAME = "preflight.lock"
STATUS_NAME = op_cache.MANIFEST_NAME
COMPILER_TIMEOUT_S = 10.0


def emit(kind: str, **data: Any) -> None:
    """One fact for the parent, on one line."""
    print(f"{MARK} {json.dumps({'kind': kind, **data}, default=str)}", flush=True)


def cache_key(torch_version: str, deepspeed_version: str, accelerator: str, inputs: Mapping[str, Any]) -> str:
    """One folder per Python, torch, DeepSpeed, accelerator and what else decides the compiled code
    (``inputs``: :func:`build_inputs`): an op built for one never loads in another. The install
    location is not part of it: the same torch build in two environments shares one folder."""
    digest = hashlib.sha256(json.dumps(dict(inputs), sort_keys=True, default=str).encode()).hexdigest()[:10]
    return (f"py{sys.version_info[0]}{sys.version_info[1]}_torch{torch_version}_deepspeed{deepspeed_version}_"
            f"{accelerator}_{digest}")


def compiler_identity() -> list[str]:
    """The C++ compiler torch's JIT build runs (``$CXX``, else ``c++``: ``cpp_extension.get_cxx_compiler``
    on Linux): where it resolves to and its first ``--version`` line."""
    name = os.environ.get("CXX", "c++")
    found = shutil.which(name.split()[0]) if name.strip() else None
    if found is None:
        return [name, "not found"]
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=COMPILER_TIMEOUT_S)
        first = (out.stdout.strip().splitlines() or [""])[0]
    except (OSError, subprocess.SubprocessError) as exc:
        first = f"--version failed: {exc}"
    return [name, os.path.realpath(found), first]


def build_inputs() -> dict[str, Any]:
    """What decides the code a build produces besides the versions in the folder's name: torch's and
    DeepSpeed's exact builds, the compiler, and for CUDA ops the toolkit and the architectures."""
    import torch
    import torch.utils.cpp_extension as cpp

    from deepspeed.git_version_info import git_hash

    inputs: dict[str, Any] = {"torch_git": getattr(torch.version, "git_version", None), "cuda": torch.version.cuda,
                              "hip": getattr(torch.version, "hip", None), "deepspeed_git": git_hash,
                              "compiler": compiler_identity()}
    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        home = getattr(cpp, "CUDA_HOME", None) or getattr(cpp, "ROCM_HOME", None)
        inputs["toolkit"] = os.path.realpath(home) if home else None
        inputs["arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if torch.cuda.is_available():  # torch builds for the visible GPUs when no arch list is given
            inputs["capabilities"] = sorted({".".join(map(str, torch.cuda.get_device_capability(i)))
                                             for i in range(torch.cuda.device_count())})
    return inputs


def extensions_directory(root: str) -> str:
    """The folder of ``root`` for this interpreter's torch, DeepSpeed, accelerator and compiler (imports
    both: the ranks of a rehearsal call it too, and find the folder the build used)."""
    import torch

    import deepspeed
    from deepspeed.accelerator import get_accelerator

    return os.path.join(root, cache_key(torch.__version__, deepspeed.__version__, get_accelerator()._name,
                                        build_inputs()))


def watched_files() -> list[str]:
    """Files whose change means another torch, DeepSpeed, interpreter or compiler (an environment entry
    is trusted only while they are unchanged)."""
    import torch

    import deepspeed

    found = [os.path.realpath(sys.executable), torch.__file__ or "", deepspeed.__file__ or ""]
    found += [os.path.join(os.path.dirname(torch.__file__ or ""), "version.py"),
              os.path.join(os.path.dirname(deepspeed.__file__ or ""), "git_version_info_installed.py")]
    compiler = compiler_identity()
    if len(compiler) == 3:
        found.append(compiler[1])
    return [path for path in found if path and os.path.exists(path)]


def write_status(directory: str, **status: Any) -> None:
    """``<dir>/preflight-build.json``, written whole (the ranks read it)."""
    op_cache.write_manifest(directory, **status)


def hold_lock(folder: str, wait_s: float) -> int | None:
    """An exclusive flock on the folder's preflight lock, waiting at most ``wait_s``; None if busy."""
    fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not announced:
                emit("waiting", reason="another preflight process is building or loading ops in this folder")
                announced = True
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.2)


def remove_stale_locks(directory: str) -> list[dict[str, Any]]:
    """Remove torch build locks left in ``directory`` (stale: the exclusive preflight lock is held)."""
    removed = []
    for path in sorted(glob.glob(os.path.join(directory, "*", "lock"))):
        try:
            age = time.time() - os.stat(path).st_mtime
            os.remove(path)
        except OSError:
            continue
        removed.append({"path": path, "age_s": round(age, 1)})
    return removed


def import_library(builder: Any, directory: str) -> ModuleType:
    """Import an op's library from ``directory`` as torch does after building it
    (``cpp_extension._import_module_from_library``) and hand it to DeepSpeed's own cache of loaded
    ops (``OpBuilder._loaded_ops``, which ``builder.load()`` answers from first)."""
    from deepspeed.ops.op_builder.builder import OpBuilder

    path = op_cache.library_path(directory, builder.name)
    spec = importlib.util.spec_from_file_location(builder.name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    OpBuilder._loaded_ops[builder.name] = module
    return module


def _vouched(previous: Mapping[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The previous manifest's record of op ``name`` when that build was ok."""
    if not previous or not previous.get("ok"):
        return None
    return next((dict(op) for op in previous.get("ops") or () if isinstance(op, Mapping) and op.get("name") == name
                 and op.get("library")), None)


def _damaged(directory: str, name: str, record: Mapping[str, Any] | None) -> str | None:
    """Why the library left in ``directory`` for ``name`` cannot be loaded, or None (also when there is none)."""
    path = op_cache.library_path(directory, name)
    if not os.path.exists(path):
        return None
    if record is not None:
        return op_cache.library_problem(directory, record)
    return op_cache.elf_problem(path)


def load_one(entry: dict[str, Any], accelerator: Any, directory: str, jit: bool,
             previous: Mapping[str, Any] | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """Load (or build) one op; emit what happened. Returns (the error when it failed, the op's record
    for the manifest)."""
    import torch
    import torch.utils.cpp_extension as cpp

    from deepspeed.git_version_info import accelerator_name as wheel_accelerator
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import CUDAOpBuilder

    wanted = entry["builder"]
    builder = accelerator.create_op_builder(wanted)
    facts: dict[str, Any] = {"builder": wanted, "accelerator": accelerator._name}
    if builder is None:
        reason = f"the {accelerator._name} accelerator has no {wanted}"
        emit("op", **facts, source="absent", reason=reason)
        return None, {**facts, "source": "absent", "reason": reason}
    facts.update(name=builder.name, builder_class=f"{type(builder).__module__}.{type(builder).__name__}")
    if entry.get("optional"):
        import deepspeed.ops

        if not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            reason = builder.error_log or "not compatible here"
            emit("op", **facts, source="incompatible", reason=reason)
            return None, {**facts, "source": "incompatible", "reason": reason}
    prebuilt = bool(installed_ops.get(builder.name, False)) and wheel_accelerator == accelerator._name and not jit
    cuda = isinstance(builder, CUDAOpBuilder) and not getattr(builder, "build_for_cpu", False)
    record = None if jit or prebuilt else _vouched(previous, builder.name)
    damaged = None if jit or prebuilt else _damaged(directory, builder.name, record)
    if damaged is not None:
        with contextlib.suppress(OSError):
            os.remove(op_cache.library_path(directory, builder.name))  # ninja links it again
        emit("damaged", name=builder.name, problem=damaged)
        record = None
    library = op_cache.library_path(directory, builder.name)
    before = _mtime(library)
    start = time.monotonic()
    try:
        if record is not None:
            module: Any = import_library(builder, directory)
            source = "cached"
        else:
            module = builder.jit_load(verbose=True) if jit else builder.load(verbose=True)
            source = "prebuilt" if prebuilt else "built"
    except BaseException as exc:  # noqa: BLE001 - any failure of the build is the fact to report
        error = f"{type(exc).__name__}: {exc}"
        emit("op", **facts, source="failed", seconds=round(time.monotonic() - start, 3), error=error,
             traceback=traceback.format_exc(limit=4))
        return f"{builder.name}: {error}", None
    seconds = time.monotonic() - start
    if source == "built" and before is not None and _mtime(library) == before:
        source = "cached"  # a cache without a manifest (an older preflight's): ninja found it built
    compilers = [os.environ.get("CXX", "c++")]
    if cuda:
        compilers.append(os.path.join(cpp.CUDA_HOME or "<no CUDA_HOME>", "bin", "nvcc"))
    emit("op", **facts, source=source, seconds=round(seconds, 3), device="cuda" if cuda else "cpu",
         compilers=compilers, module=getattr(module, "__file__", None), torch_cuda=torch.version.cuda,
         repaired=damaged)
    kept = {**facts, "source": source, "device": "cuda" if cuda else "cpu", "compilers": compilers,
            "module": getattr(module, "__file__", None)}
    if source != "prebuilt" and os.path.exists(library):
        kept.update(op_cache.describe_library(directory, builder.name))
    return None, kept


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def share_cpu_info(path: str) -> None:
    """Make py-cpuinfo's ``get_cpu_info()`` answer once per run, from ``path`` when it holds an answer.

    DeepSpeed's CPU op builders ask it twice per load (``OpBuilder.cpu_arch`` and ``simd_width``,
    op_builder/builder.py lines 427 and 483 in 0.19.8), and py-cpuinfo runs a fresh Python child each
    time (``get_cpu_info_json``: ``Popen([sys.executable, __file__, '--json'])``), 1.3 s each on a small
    VM, in every rank. The answer is this machine's and this run's (the file lives in the run's report
    folder and is removed when the run starts its build), so the flags DeepSpeed derives are the same."""
    try:
        import cpuinfo  # type: ignore[import-untyped,import-not-found,unused-ignore]  # py-cpuinfo, a DeepSpeed dependency
    except ImportError:
        return
    ask = cpuinfo.get_cpu_info
    if getattr(ask, "preflight_shared", False):
        return

    def once() -> Any:
        try:
            with open(path, encoding="utf-8") as handle:
                found = json.load(handle)
            if isinstance(found, dict) and found:
                return found
        except (OSError, ValueError):
            pass
        info = ask()
        if isinstance(info, dict) and info:
            tmp = f"{path}.{os.getpid()}.tmp"
            with contextlib.suppress(OSError):
                with open(tmp, "w", encoding="utf-8") as handle:
                    json.dump(info, handle)
                os.replace(tmp, path)
        return info

    once.preflight_shared = True  # type: ignore[attr-defined]  # a mark: patched once per process
    cpuinfo.get_cpu_info = once


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    start = time.monotonic()
    if spec.get("cpu_info"):
        share_cpu_info(str(spec["cpu_info"]))
    import torch

    import deepspeed
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    root = str(spec["root"])
    directory = spec.get("directory") or extensions_directory(root)
    os.makedirs(directory, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = directory
    emit("start", directory=directory, accelerator=accelerator._name, torch=torch.__version__,
         deepspeed=deepspeed.__version__, import_s=round(time.monotonic() - start, 3),
         ds_accelerator_env=os.environ.get("DS_ACCELERATOR"))
    fd = hold_lock(directory, float(spec.get("lock_wait_s", 60.0)))
    if fd is None:
        emit("busy", directory=directory)
        return 3
    try:
        previous = op_cache.read_manifest(directory)
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, STATUS_NAME))
        emit("stale", removed=remove_stale_locks(directory))
        records = []
        for entry in spec["builders"]:
            error, record = load_one(entry, accelerator, directory, bool(spec.get("jit")), previous)
            if error is not None:
                write_status(directory, ok=False, error=error)
                return 1
            records.append(record)
        write_status(directory, ok=True, ops=records, torch=torch.__version__, deepspeed=deepspeed.__version__,
                     accelerator=accelerator._name)
        if spec.get("identity") and not spec.get("jit"):
            op_cache.write_environment(root, str(spec["identity"]), directory, watched_files())
    finally:
        if fd is not None:
            os.close(fd)
    emit("done", seconds=round(time.monotonic() - start, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
