"""preflight's cache of built DeepSpeed ops: what a finished build leaves, and how a later run trusts it.

A build folder (``<root>/<key>``, :func:`preflight.probe.op_build_child.cache_key`) ends with
``preflight-build.json``, its **manifest**: ``ok``, and for every op the library it loaded, with its
size and sha256. A later run loads a library straight from the manifest once it verifies
(:func:`library_problem`), without asking torch's ``cpp_extension.load``: that call runs ninja,
and ninja starts over whenever its log was written by another ninja version ("ninja: warning:
build log version is too old; starting over" between 1.13 and 1.11), so a second environment
with another ninja on PATH rebuilt everything; and a library cut short on disk (a full disk, a
killed copy) passed ninja's timestamp test and killed the loading process with SIGBUS.

The parent process (which never imports torch) finds a folder through an **environment entry**
(``<root>/environments/<identity>.json``): the job's interpreter and the variables that decide what
it imports and compiles with (:data:`IDENTITY_VARS`), mapped to the folder its last build used,
with the size and mtime of the torch and DeepSpeed files that build saw. When they still match and
the manifest verifies, no build child is started at all.

Standard library only: the build child (run as a plain file in the job's interpreter) loads this
file by path; the ranks and the parent import it as ``preflight.probe.op_cache``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

MANIFEST_NAME = "preflight-build.json"
ENVIRONMENTS_DIR = "environments"
LIBRARY_SUFFIX = ".so"
IDENTITY_VARS = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "HOME", "CXX", "CC",
                 "CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "DS_ACCELERATOR", "TORCH_CUDA_ARCH_LIST", "VIRTUAL_ENV",
                 "CONDA_PREFIX", "LD_LIBRARY_PATH")
"""What decides which torch and DeepSpeed the job's interpreter imports and which compiler a build uses."""


def library_path(folder: str, name: str) -> str:
    """Where torch's ``cpp_extension.load(name=...)`` leaves an op's library in ``folder``."""
    return os.path.join(folder, name, name + LIBRARY_SUFFIX)


def sha256_of(path: str) -> str:
    """The file's sha256 (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def elf_problem(path: str) -> str | None:
    """Why ``path`` is not a whole ELF shared object (cut short, empty, not ELF), or None.

    The ELF header says where the section header table ends (``e_shoff + e_shnum * e_shentsize``)
    and where each program segment's bytes end (``p_offset + p_filesz``); a file shorter than either
    was cut short, and mapping it faults (SIGBUS) when the loader touches the missing pages."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            header = handle.read(64)
            if len(header) < 16 or header[:4] != b"\x7fELF":
                return f"{size} bytes, not an ELF file"
            wide, order = header[4] == 2, "<" if header[5] == 1 else ">"
            fields = struct.Struct(order + ("QQIHHHHHH" if wide else "IIIHHHHHH"))
            start = 32 if wide else 28
            if len(header) < start + fields.size:
                return f"{size} bytes, shorter than an ELF header"
            phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = fields.unpack_from(header, start)
            if shoff + shnum * shentsize > size:
                return f"cut short: {size} bytes, its section table ends at byte {shoff + shnum * shentsize}"
            segment = struct.Struct(order + ("IIQQQQQQ" if wide else "IIIIIIII"))
            handle.seek(phoff)
            table = handle.read(phnum * phentsize)
            for index in range(phnum):
                entry = table[index * phentsize:index * phentsize + segment.size]
                if len(entry) < segment.size:
                    return f"cut short: {size} bytes, inside its program headers"
                values = segment.unpack(entry)
                offset, filesz = (values[2], values[5]) if wide else (values[1], values[4])
                if offset + filesz > size:
                    return f"cut short: {size} bytes, a segment ends at byte {offset + filesz}"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return None


def describe_library(folder: str, name: str) -> dict[str, Any]:
    """The manifest's record of an op's library: its path in the folder, size and sha256."""
    path = library_path(folder, name)
    return {"library": os.path.relpath(path, folder), "size": os.path.getsize(path), "sha256": sha256_of(path)}


def library_problem(folder: str, entry: Mapping[str, Any]) -> str | None:
    """Why the library the manifest ``entry`` names cannot be trusted (missing, another size, another
    sha256, a damaged ELF), or None when it is the one the build left."""
    path = os.path.join(folder, str(entry.get("library") or ""))
    try:
        size = os.path.getsize(path)
    except OSError:
        return f"{path} is missing"
    if size != entry.get("size"):
        return f"{path} is {size} bytes, the build left {entry.get('size')}"
    damaged = elf_problem(path)
    if damaged is not None:
        return f"{path}: {damaged}"
    try:
        if sha256_of(path) != entry.get("sha256"):
            return f"{path} changed since the build (sha256 differs)"
    except OSError as exc:
        return f"{path} is unreadable: {exc.strerror or exc}"
    return None


def read_manifest(folder: str) -> dict[str, Any] | None:
    """The folder's manifest, or None when there is none (or it is not JSON)."""
    try:
        with open(os.path.join(folder, MANIFEST_NAME), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: str, data: Mapping[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(dict(data), handle)
    os.replace(tmp, path)


def write_manifest(folder: str, **data: Any) -> None:
    """Write the manifest whole (readers never see half of it)."""
    _write_json(os.path.join(folder, MANIFEST_NAME), {**data, "time": time.time()})


def trusted_ops(folder: str, manifest: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The manifest's op records when the build was ok and every library it names verifies, else None."""
    if manifest is None or not manifest.get("ok") or not isinstance(manifest.get("ops"), list):
        return None
    ops = [dict(op) for op in manifest["ops"] if isinstance(op, Mapping)]
    if any(op.get("library") and library_problem(folder, op) is not None for op in ops):
        return None
    return ops


# -- environments: how a process without torch finds its folder ---------------------------------------


def identity(python: str, env: Mapping[str, str]) -> str:
    """A name for "this interpreter with these variables" (what decides what it imports and builds with)."""
    text = json.dumps({"python": python, "env": {name: env.get(name) for name in IDENTITY_VARS}}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def stamp(path: str) -> list[int] | None:
    """``[size, mtime_ns]`` of a file, None when it is gone."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns]


def write_environment(root: str, key: str, folder: str, watched: Sequence[str]) -> None:
    """Remember that the environment ``key`` builds in ``folder``, with the stamps of ``watched`` files."""
    where = os.path.join(root, ENVIRONMENTS_DIR)
    with contextlib.suppress(OSError):
        os.makedirs(where, exist_ok=True)
        _write_json(os.path.join(where, f"{key}.json"),
                    {"folder": os.path.basename(folder), "stamps": {path: stamp(path) for path in watched}})


def environment_folder(root: str, key: str) -> str | None:
    """The folder environment ``key`` built in last, while the files it saw are unchanged; else None."""
    try:
        with open(os.path.join(root, ENVIRONMENTS_DIR, f"{key}.json"), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("stamps"), dict) or not data.get("folder"):
        return None
    if any(stamp(str(path)) != value for path, value in data["stamps"].items()):
        return None
    folder = os.path.join(root, os.path.basename(str(data["folder"])))
    return folder if os.path.isdir(folder) else None
