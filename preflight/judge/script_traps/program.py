"""The training script as the job runs it: the script and the modules beside it that it imports.

The probe reads the files :func:`preflight.parse.script_imports.neighbour_files` names;
:class:`Program` parses them and indexes their functions and classes, so a call like
``train(...)`` or ``self._run_epoch(epoch)`` can be followed into the function it runs. Modules
installed elsewhere (``torch``, ``transformers``, ``litgpt``) are not followed: their calls are
judged by name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from preflight.judge.script_traps.names import Names
from preflight.parse.script_imports import MAX_MODULES, dotted_of, module_files, resolve_relative

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef



@dataclass(eq=False)
class Module:
    """One parsed file of the program: its path relative to the script's directory, its names."""

    path: str
    """``train.py`` for the script itself, ``utils/train_utils.py`` for a module beside it."""
    dotted: str
    tree: ast.Module
    lines: list[str]
    names: Names
    functions: dict[str, FunctionNode] = field(default_factory=dict)
    """Functions defined at module level (and nested ones, by name, when no top-level one has it)."""
    classes: dict[str, dict[str, FunctionNode]] = field(default_factory=dict)
    """Methods of each class defined in the module."""
    owner: dict[int, str] = field(default_factory=dict)
    """``id(function)`` -> its class name, for methods."""
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Local name -> (module file it comes from, name in that module or None for the module itself)."""

    @property
    def is_script(self) -> bool:
        return self.dotted == "__main__"


class Program:
    """The script and the local modules it imports, with a function index for following calls."""

    def __init__(self, script: ast.Module, source: str, path: str, neighbours: Mapping[str, str]) -> None:
        self.script = self._module(path, "__main__", script, source)
        self.modules: dict[str, Module] = {}
        """Local modules by relative file path."""
        self.unparsed: list[str] = []
        self._sources = dict(neighbours)
        self._load_imports(self.script)

    @staticmethod
    def _module(path: str, dotted: str, tree: ast.Module, source: str) -> Module:
        module = Module(path, dotted, tree, source.splitlines(), Names(tree))
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                methods: dict[str, FunctionNode] = {}
                for item in stmt.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods[item.name] = item
                        module.owner[id(item)] = stmt.name
                module.classes[stmt.name] = methods
        for node in ast.walk(tree):  # nested functions, found by name
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in module.owner:
                module.functions.setdefault(node.name, node)
        return module

    def _load(self, candidates: tuple[str, ...]) -> Module | None:
        for path in candidates:
            if path in self.modules:
                return self.modules[path]
            text = self._sources.get(path)
            if text is None or len(self.modules) >= MAX_MODULES:
                continue
            try:
                tree = ast.parse(text, filename=path)
            except (SyntaxError, ValueError, RecursionError):
                self.unparsed.append(path)
                return None
            dotted = dotted_of(path)
            module = self._module(path, dotted, tree, text)
            self.modules[path] = module
            self._load_imports(module)
            return module
        return None

    def _load_imports(self, module: Module) -> None:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for item in node.names:
                    target = self._load(module_files(item.name))
                    if target is not None:
                        local = item.asname or item.name.split(".")[0]
                        if item.asname or "." not in item.name:
                            module.imported[local] = (target.path, None)
            elif isinstance(node, ast.ImportFrom):
                base = resolve_relative(node.module, node.level, module.dotted)
                source = self._load(module_files(base)) if base else None
                for item in node.names:
                    if item.name == "*":
                        if source is not None:
                            for name in (*source.functions, *source.classes, *source.imported):
                                module.imported.setdefault(name, (source.path, name))
                        continue
                    submodule = self._load(module_files(f"{base}.{item.name}" if base else item.name))
                    local = item.asname or item.name
                    if submodule is not None and (source is None or item.name not in source.functions):
                        module.imported[local] = (submodule.path, None)
                    elif source is not None:
                        module.imported[local] = (source.path, item.name)

    def all_modules(self) -> Iterator[Module]:
        """The script first, then the local modules in the order they were imported."""
        yield self.script
        yield from self.modules.values()

    def module(self, path: str) -> Module:
        """A module by its relative path (the script included)."""
        return self.script if path == self.script.path else self.modules[path]

    def function(self, module: Module, name: str, depth: int = 0) -> tuple[Module, FunctionNode] | None:
        """The function ``name`` refers to in ``module``: defined there, or imported from a local module."""
        if name in module.functions:
            return module, module.functions[name]
        if name in module.imported and depth < 5:
            path, inner = module.imported[name]
            target = self.module(path)
            if inner is not None:
                return self.function(target, inner, depth + 1)
        return None

    def local_class(self, module: Module, name: str, depth: int = 0) -> tuple[Module, str] | None:
        """The local class ``name`` refers to in ``module`` (defined there or imported from a local module)."""
        if name in module.classes:
            return module, name
        if name in module.imported and depth < 5:
            path, inner = module.imported[name]
            if inner is not None:
                return self.local_class(self.module(path), inner, depth + 1)
        return None

    def module_alias(self, module: Module, name: str) -> Module | None:
        """The local module a name is bound to (``import utils`` -> utils.py)."""
        if name in module.imported:
            path, inner = module.imported[name]
            if inner is None:
                return self.module(path)
        return None

    def calls_named(self, *names: str) -> Iterator[tuple[Module, ast.Call]]:
        """Every call in the program whose callee's last name is one of ``names``."""
        wanted = set(names)
        for module in self.all_modules():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) \
                        else ""
                    if last in wanted:
                        yield module, node
