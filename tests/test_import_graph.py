"""No import cycle in preflight: the module graph of ``preflight/`` and ``checks/``, read with ``ast``, has none.

Every import counts, at the top of a module or inside a function (a function-level import hides a cycle,
it does not break it), and so does the package ``__init__`` a submodule import runs, unless that package
encloses the importer (it is being initialised already: ``preflight.node.host`` importing its sibling
``preflight.node.transports`` needs nothing new of ``preflight/node/__init__.py``; taking a name from it,
``from preflight.node import Node``, does). Only imports under ``if TYPE_CHECKING:`` are left out: they
are never executed. A failure names the cycle, module by module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from tests.conftest import REPO_ROOT

PACKAGES = ("preflight", "checks")


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """``preflight.plugin`` -> its file, for every module of ``packages`` under ``root``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the module, but not under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:
                yield from _runtime_imports(ast.Module(body=[branch], type_ignores=[]))
            continue
        yield from _runtime_imports(node)


def _with_packages(name: str, importer: str, modules: Mapping[str, Path]) -> list[str]:
    """``a.b.c`` and the packages whose ``__init__`` importing it runs (``a.b``, ``a``), those that are ours;
    not the packages enclosing ``importer`` (already initialising when it runs)."""
    parts = name.split(".")
    enclosing = {importer.rsplit(".", n)[0] for n in range(1, importer.count(".") + 1)}
    packages = [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]
    return [m for m in (name, *(p for p in packages if p not in enclosing)) if m in modules]


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ours that ``module`` imports (and the packages those imports initialise)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.update(_with_packages(alias.name, module, modules))
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        targets.update(_with_packages(base, module, modules))
        for alias in node.names:  # ``from preflight import plugin``: the submodule itself
            if f"{base}.{alias.name}" in modules:
                targets.add(f"{base}.{alias.name}")
    targets.discard(module)
    return targets


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, a]``) per strongly connected group of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit on a deep graph)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest cycle through the group's first module (breadth first, inside the group)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, set()) & group):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")  # a strongly connected group has one


def test_preflight_has_no_import_cycle() -> None:
    graph = import_graph(REPO_ROOT)
    assert "preflight.plugin" in graph and "checks.test_host" in graph, sorted(graph)[:10]
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_only_the_command_imports_the_plugin() -> None:
    """The plugin imports the rest; the rest reads what it stashes through ``preflight.stash``."""
    graph = import_graph(REPO_ROOT)
    importers = sorted(name for name, targets in graph.items() if "preflight.plugin" in targets)
    assert importers == ["preflight.cli", "preflight.commands.rehearse"]


def _plant(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_planted_cycle_is_found_and_named(tmp_path: Path) -> None:
    """A function-level import that closes a loop is a cycle; the message names it."""
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import value\n",
        "pkg/b.py": "def value():\n    from pkg import c\n    return c\n",
        "pkg/c.py": "from . import a\n",
        "pkg/d.py": "import pkg.a\n",
    })
    cycles = find_cycles(import_graph(tmp_path, ("pkg",)))
    assert cycles == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_type_checking_imports_and_a_tree_are_no_cycle(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "from pkg.a import A\n",
        "pkg/c.py": "import pkg.a, pkg.b\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == set() and graph["pkg.b"] == {"pkg.a"}
    assert find_cycles(graph) == []


def test_a_sibling_import_is_no_cycle_but_a_name_from_the_package_is(tmp_path: Path) -> None:
    """``pkg/__init__`` importing ``pkg.x``, which imports its sibling ``pkg.y``: fine. ``pkg.y`` taking a name
    from ``pkg`` itself (half initialised when ``y`` runs): a cycle."""
    _plant(tmp_path, {"pkg/__init__.py": "from pkg.x import X\n", "pkg/x.py": "from pkg.y import Y\n", "pkg/y.py": ""})
    assert find_cycles(import_graph(tmp_path, ("pkg",))) == []
    _plant(tmp_path, {"pkg/y.py": "def later():\n    from pkg import X\n"})
    assert find_cycles(import_graph(tmp_path, ("pkg",))) == [["pkg", "pkg.x", "pkg.y", "pkg"]]


def test_a_package_init_that_imports_back_is_a_cycle(tmp_path: Path) -> None:
    """``import pkg.sub.x`` runs ``pkg/sub/__init__.py``: an ``__init__`` importing its importer is a loop."""
    _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from pkg.user import thing\n",
        "pkg/sub/x.py": "",
        "pkg/user.py": "def thing():\n    import pkg.sub.x\n",
    })
    assert find_cycles(import_graph(tmp_path, ("pkg",))) == [["pkg.sub", "pkg.user", "pkg.sub"]]
