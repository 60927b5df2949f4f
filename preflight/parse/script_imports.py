"""Which files beside a training script its imports load (read as text, never imported).

Python puts the script's directory first on ``sys.path``, so ``from utils import train`` in
``train.py`` loads ``utils.py`` or ``utils/__init__.py`` beside it, and ``from .x import y``
inside that package loads ``utils/x.py``. :func:`neighbour_files` follows imports of imports
with a reader the caller supplies (the probe's bounded file read).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import PurePosixPath

MAX_MODULES = 40
"""Modules beside the script read at most (a training script imports a handful)."""


def module_files(dotted: str, package: str = "") -> tuple[str, ...]:
    """Files ``import dotted`` may load, relative to the script's directory (``a.b`` -> ``a/b.py``, ...)."""
    parts = [p for p in (package.split(".") if package else []) + dotted.split(".") if p]
    if not parts:
        return ()
    base = "/".join(parts)
    return (f"{base}.py", f"{base}/__init__.py")


def resolve_relative(module: str | None, level: int, current: str) -> str:
    """The dotted name of ``from .. module import x`` inside module ``current`` (a dotted name)."""
    if not level:
        return module or ""
    package = current.split(".")[:-1]
    package = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*package, *(module.split(".") if module else [])])


def local_imports(tree: ast.Module, dotted: str = "__main__") -> list[tuple[str, ...]]:
    """For every import of ``tree``: the candidate files (relative paths) it may load, first match wins."""
    found: list[tuple[str, ...]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for item in node.names:
                found.append(module_files(item.name))
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative(node.module, node.level, dotted)
            if base:
                found.append(module_files(base))
            for item in node.names:
                if item.name != "*":
                    found.append(module_files(f"{base}.{item.name}" if base else item.name))
    return [f for f in found if f]


def neighbour_files(source: str, read: Callable[[str], str | None], limit: int = MAX_MODULES) -> dict[str, str]:
    """The text of every module beside the script that its imports may load, following imports of imports.

    ``read(relative_path)`` returns a file's text, or None when there is no such file (the probe's
    bounded read); at most ``limit`` files are read.
    """
    found: dict[str, str] = {}
    tried: set[str] = set()
    pending: list[tuple[str, str]] = [(source, "__main__")]
    while pending and len(found) < limit:
        text, dotted = pending.pop(0)
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for candidates in local_imports(tree, dotted):
            for path in candidates:
                if path in found:
                    break
                if path in tried:
                    continue
                tried.add(path)
                content = read(path)
                if content is not None:
                    found[path] = content
                    pending.append((content, dotted_of(path)))
                    break
            if len(found) >= limit:
                break
    return found


def dotted_of(path: str) -> str:
    pure = PurePosixPath(path)
    parts = list(pure.with_suffix("").parts)
    return ".".join(parts)
