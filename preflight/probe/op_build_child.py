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

Locking (the extensions root is preflight's own): a build holds an exclusive ``flock`` on
``<root>/preflight.lock`` (the parent takes it before starting this child when a rehearsal launch
starts with the build, so the launch's ranks, which take it shared to load their ops, wait for the
build; ``{"locked": true}`` in the spec then). Held exclusively, any torch build lock
``<dir>/<op>/lock`` is stale: torch's ``FileBaton`` (torch 2.4-2.13: a file created with
``O_EXCL``, waited on while it exists) is left behind when its holder is killed, and every later
build of that op would wait for it for ever (``_jit_compile``:
``FileBaton(os.path.join(build_directory, 'lock'))``, ``cpp_extension.py`` line 1697 in 2.4.1, 2345
in 2.13.0). torch 2.14.1 holds an OS advisory lock on the same path instead (``with FileLock(...)``,
line 2362), which the kernel releases; its file may stay, and removing it while nobody holds it is
harmless. The build ends by writing ``<dir>/preflight-build.json`` (ok or the error), which the
ranks read before loading.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import sys
import time
import traceback
from typing import Any

MARK = "PREFLIGHT_OP_BUILD"
LOCK_NAME = "preflight.lock"
STATUS_NAME = "preflight-build.json"


def emit(kind: str, **data: Any) -> None:
    """One fact for the parent, on one line."""
    print(f"{MARK} {json.dumps({'kind': kind, **data}, default=str)}", flush=True)


def cache_key(torch_version: str, deepspeed_version: str, accelerator: str, installs: list[str]) -> str:
    """One folder per Python, torch, DeepSpeed, accelerator and install location: an op built for one
    never loads in another, and two environments never take turns rebuilding one folder (torch writes
    the absolute include and source paths of the install into build.ninja, and ninja rebuilds when a
    command or an input's time changes: a fresh install always rebuilds, a kept one never does)."""
    where = hashlib.sha256("\0".join(os.path.realpath(path) for path in installs).encode()).hexdigest()[:10]
    return (f"py{sys.version_info[0]}{sys.version_info[1]}_torch{torch_version}_deepspeed{deepspeed_version}_"
            f"{accelerator}_{where}")


def extensions_directory(root: str) -> str:
    """The folder of ``root`` for this interpreter's torch, DeepSpeed and accelerator (imports both:
    the ranks of a rehearsal call it too, and find the folder the build used)."""
    import torch

    import deepspeed
    from deepspeed.accelerator import get_accelerator

    installs = [os.path.dirname(torch.__file__), os.path.dirname(deepspeed.__file__)]
    return os.path.join(root, cache_key(torch.__version__, deepspeed.__version__, get_accelerator()._name, installs))


def write_status(directory: str, **status: Any) -> None:
    """``<dir>/preflight-build.json``, written whole (the ranks read it)."""
    path = os.path.join(directory, STATUS_NAME)
    with open(path + ".tmp", "w") as out:
        json.dump({**status, "time": time.time()}, out)
    os.replace(path + ".tmp", path)


def hold_lock(root: str, wait_s: float) -> int | None:
    """An exclusive flock on the root's preflight lock, waiting at most ``wait_s``; None if busy."""
    fd = os.open(os.path.join(root, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not announced:
                emit("waiting", reason="another preflight process is building or loading ops in this directory")
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


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def load_one(entry: dict[str, Any], accelerator: Any, directory: str, jit: bool) -> str | None:
    """Load (or build) one op; emit what happened. Returns the error when it failed."""
    import torch
    import torch.utils.cpp_extension as cpp

    from deepspeed.git_version_info import accelerator_name as wheel_accelerator
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import CUDAOpBuilder

    wanted = entry["builder"]
    builder = accelerator.create_op_builder(wanted)
    facts: dict[str, Any] = {"builder": wanted, "accelerator": accelerator._name}
    if builder is None:
        emit("op", **facts, source="absent", reason=f"the {accelerator._name} accelerator has no {wanted}")
        return None
    facts.update(name=builder.name, builder_class=f"{type(builder).__module__}.{type(builder).__name__}")
    if entry.get("optional"):
        import deepspeed.ops

        if not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            emit("op", **facts, source="incompatible", reason=builder.error_log or "not compatible here")
            return None
    prebuilt = bool(installed_ops.get(builder.name, False)) and wheel_accelerator == accelerator._name and not jit
    library = os.path.join(directory, builder.name, f"{builder.name}.so")
    before = _mtime(library)
    start = time.monotonic()
    try:
        module = builder.jit_load(verbose=True) if jit else builder.load(verbose=True)
    except BaseException as exc:  # noqa: BLE001 - any failure of the build is the fact to report
        error = f"{type(exc).__name__}: {exc}"
        emit("op", **facts, source="failed", seconds=round(time.monotonic() - start, 3), error=error,
             traceback=traceback.format_exc(limit=4))
        return f"{builder.name}: {error}"
    seconds = time.monotonic() - start
    cuda = isinstance(builder, CUDAOpBuilder) and not getattr(builder, "build_for_cpu", False)
    compilers = [os.environ.get("CXX", "c++")]
    if cuda:
        compilers.append(os.path.join(cpp.CUDA_HOME or "<no CUDA_HOME>", "bin", "nvcc"))
    after = _mtime(library)
    source = "prebuilt" if prebuilt else ("cached" if before is not None and after == before else "built")
    emit("op", **facts, source=source, seconds=round(seconds, 3), device="cuda" if cuda else "cpu",
         compilers=compilers, module=getattr(module, "__file__", None), torch_cuda=torch.version.cuda)
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
    fd = None if spec.get("locked") else hold_lock(root, float(spec.get("lock_wait_s", 60.0)))
    if fd is None and not spec.get("locked"):
        emit("busy", directory=directory)
        return 3
    try:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, STATUS_NAME))
        emit("stale", removed=remove_stale_locks(directory))
        for entry in spec["builders"]:
            error = load_one(entry, accelerator, directory, bool(spec.get("jit")))
            if error is not None:
                write_status(directory, ok=False, error=error)
                return 1
        write_status(directory, ok=True)
    finally:
        if fd is not None:
            os.close(fd)
    emit("done", seconds=round(time.monotonic() - start, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
