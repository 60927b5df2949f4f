"""Every verdict code the source of preflight can emit, read from its ``ast`` (test-only).

A code reaches a report through a few constructors: the helpers of ``preflight/outcome.py``
(``warn``/``fail`` first argument, ``error(..., code=)``), ``Verdict(code=)``, the plan findings
(``problem``/``note``/``Finding``), the script traps (``Trap``) and the NVML failures
(``NvmlUnavailableError``/``SnapshotError``, whose code a judge passes on as ``problem.code``). The
expression in that position is followed back: string constants, ``a if c else b``, a local or
module-level name (its assignments, a dict's values, a ``dict.get`` default), a name imported from
another preflight module, ``*tuple`` arguments; so is every module-level ``NAME_CODE = "..."``. An f-string is kept as a template
(``{what.upper()}_RANK_HUNG``); :func:`expand` turns it into concrete codes. Attribute reads such
as ``problem.code`` are skipped: the constructor that made ``problem`` is scanned itself.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("preflight", "checks")

# callable name -> (index of the positional code argument or None, keyword name)
CODE_POSITIONS: dict[str, tuple[int | None, str]] = {
    "warn": (0, "code"), "fail": (0, "code"), "error": (1, "code"), "Verdict": (None, "code"),
    "problem": (1, "code"), "note": (0, "code"), "Finding": (1, "code"), "Trap": (1, "code"),
    "NvmlUnavailableError": (0, "code"), "SnapshotError": (0, "code"),
}
# Where the helpers are defined their parameter is the code itself, not a code used.
DEFINITIONS = {"preflight/outcome.py", "preflight/judge/findings.py"}


def _error_default() -> str:
    """The code ``error(summary)`` gets when none is given (the default in ``outcome.error``)."""
    tree = ast.parse((ROOT / "preflight/outcome.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "error":
            names = [a.arg for a in node.args.args]
            default = node.args.defaults[names.index("code") - (len(names) - len(node.args.defaults))]
            assert isinstance(default, ast.Constant)
            return str(default.value)
    raise LookupError("preflight/outcome.py has no error()")


ERROR_DEFAULT = _error_default()


@dataclass(frozen=True, slots=True)
class Use:
    """One code (or f-string template) in a code position."""

    code: str
    path: str
    line: int
    template: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        """The concrete codes a template can stand for."""
        parts = re.split(r"\{[^{}]*\}", self.code)
        return re.compile("^" + "[A-Z0-9_]+".join(re.escape(p) for p in parts) + "$")


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _template(node: ast.JoinedStr) -> str:
    out = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            out.append(str(value.value))
        elif isinstance(value, ast.FormattedValue):
            out.append("{" + ast.unparse(value.value) + "}")
    return "".join(out)


def _element(value: ast.expr, index: int) -> list[ast.expr]:
    """Element ``index`` of a tuple value, through ``a if c else b`` (``verdict, why = (fail, "..") if x else ...``)."""
    if isinstance(value, ast.Tuple) and index < len(value.elts):
        return [value.elts[index]]
    if isinstance(value, ast.IfExp):
        return _element(value.body, index) + _element(value.orelse, index)
    return []


class _Module:
    def __init__(self, path: Path, root: Path) -> None:
        self.path = path
        self.root = root
        self.rel = path.relative_to(root).as_posix()
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        # Per scope, built on first use: a name's assignments, and the functions defined there by name (one
        # walk a scope, not one a lookup: a lookup a call made the scan quadratic, minutes on a loaded machine).
        self._assigned: dict[int, dict[str, list[ast.expr]]] = {}
        self._defined: dict[int, dict[str, ast.FunctionDef]] = {}

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def assignments(self, scope: ast.AST, name: str) -> list[ast.expr]:
        """Values assigned to ``name`` directly in ``scope`` (a function or the module)."""
        if id(scope) not in self._assigned:
            self._assigned[id(scope)] = self._assignments_in(scope)
        return self._assigned[id(scope)].get(name, [])

    def _assignments_in(self, scope: ast.AST) -> dict[str, list[ast.expr]]:
        """Every name's assigned values in ``scope``, in ``ast.walk`` order; the module's leave out function bodies."""
        values: dict[str, list[ast.expr]] = {}
        for node in self._walk(scope, into_functions=scope is not self.tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        values.setdefault(target.id, []).append(node.value)
                    elif isinstance(target, ast.Tuple):
                        for i, part in enumerate(target.elts):
                            if isinstance(part, ast.Name):
                                values.setdefault(part.id, []).extend(_element(node.value, i))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                values.setdefault(node.target.id, []).append(node.value)
        return values

    @staticmethod
    def _walk(scope: ast.AST, into_functions: bool) -> list[ast.AST]:
        """``ast.walk(scope)`` (breadth first), without what lies inside a function unless ``into_functions``."""
        nodes: list[ast.AST] = [scope]
        for node in nodes:  # grows while read: breadth first, as ast.walk
            if into_functions or node is scope or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nodes.extend(ast.iter_child_nodes(node))
        return nodes

    def definition(self, function: ast.AST | None, name: str | None) -> ast.FunctionDef | None:
        """The function ``name`` defined in ``function`` (first in walk order), else at module level."""
        if name is None:
            return None
        for scope, nodes in ((function, None), (self.tree, self.tree.body)):
            if scope is None:
                continue
            if id(scope) not in self._defined:
                defined: dict[str, ast.FunctionDef] = {}
                for node in nodes if nodes is not None else ast.walk(scope):
                    if isinstance(node, ast.FunctionDef):
                        defined.setdefault(node.name, node)
                self._defined[id(scope)] = defined
            if name in self._defined[id(scope)]:
                return self._defined[id(scope)][name]
        return None

    def imported_from(self, name: str) -> Path | None:
        for node in self.tree.body:
            if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("preflight")
                    and any((alias.asname or alias.name) == name for alias in node.names)):
                base = self.root / Path(*node.module.split("."))
                return base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        return None


class Scanner:
    """Finds the code uses of every module under ``SOURCES``."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._modules: dict[Path, _Module] = {}
        self._wrappers: dict[int, tuple[int | None, str]] = {}

    def module(self, path: Path) -> _Module:
        if path not in self._modules:
            self._modules[path] = _Module(path, self.root)
        return self._modules[path]

    def uses(self) -> list[Use]:
        found: list[Use] = []
        for top in SOURCES:
            for path in sorted((self.root / top).rglob("*.py")):
                module = self.module(path)
                if module.rel in DEFINITIONS:
                    continue
                found += self._named_constants(module)
                for node in ast.walk(module.tree):
                    if isinstance(node, ast.Call):
                        for expr in self._code_arguments(module, node):
                            found += self._resolve(module, expr, node, depth=0)
        return found

    @staticmethod
    def _named_constants(module: _Module) -> list[Use]:
        """Module-level ``SOMETHING_CODE = "X"``: a code kept apart for a report reader (``RUN_INTERRUPTED``)."""
        found = []
        for node in module.tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                    and any(isinstance(t, ast.Name) and t.id.endswith("_CODE") for t in node.targets)):
                found.append(Use(node.value.value, module.rel, node.lineno))
        return found

    def _wrapper(self, module: _Module, node: ast.Call) -> tuple[int | None, str] | None:
        """A function of this module (nested or not) named like the call: where its code parameter is, when
        its body passes a parameter on as a code (``def problem(code, summary): ... fail(code, ...)``)."""
        name = _call_name(node) if isinstance(node.func, ast.Name) else None
        definition = module.definition(module.enclosing_function(node), name)  # in this function, else the module
        if definition is None:
            return None
        if id(definition) not in self._wrappers:
            self._wrappers[id(definition)] = (None, "")  # while its own body is read: no recursion
            self._wrappers[id(definition)] = self._code_parameter(module, definition)
        return self._wrappers[id(definition)]

    def _code_parameter(self, module: _Module, definition: ast.FunctionDef) -> tuple[int | None, str]:
        params = [a.arg for a in (*definition.args.posonlyargs, *definition.args.args)]
        keywords = [a.arg for a in definition.args.kwonlyargs]
        for inner in ast.walk(definition):
            if not isinstance(inner, ast.Call):
                continue
            for expr in self._code_arguments(module, inner):
                if isinstance(expr, ast.Name) and expr.id in params:
                    return params.index(expr.id), expr.id
                if isinstance(expr, ast.Name) and expr.id in keywords:
                    return None, expr.id
        return None, ""

    def _helper(self, module: _Module, node: ast.Call) -> str | None:
        """The helper a call reaches: its own name, or one a local alias names (``act = fail if x else warn``)."""
        name = _call_name(node)
        if name in CODE_POSITIONS:
            return name
        if isinstance(node.func, ast.Name):
            for value in self._values_of(module, node.func.id, node):
                names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & set(CODE_POSITIONS)
                if names:
                    return sorted(names)[0]
        return None

    def _code_arguments(self, module: _Module, node: ast.Call) -> list[ast.expr]:
        wrapper = self._wrapper(module, node)
        name = None if wrapper is not None else self._helper(module, node)
        if wrapper is None and name is None:
            return []
        index, keyword = wrapper if wrapper is not None else CODE_POSITIONS[str(name)]
        if not keyword:
            return []
        out = [kw.value for kw in node.keywords if kw.arg == keyword]
        if wrapper is None and name == "error" and not out and len(node.args) <= 1:
            out.append(ast.Constant(ERROR_DEFAULT, lineno=node.lineno))
        starred = [arg for arg in node.args if isinstance(arg, ast.Starred)]
        if starred:
            out += [ast.Subscript(value=s.value, slice=ast.Constant(0), ctx=ast.Load()) for s in starred[:1]]
        elif index is not None and len(node.args) > index:
            out.append(node.args[index])
        return out

    def _resolve(self, module: _Module, expr: ast.expr, at: ast.AST, depth: int) -> list[Use]:
        if depth > 6:
            return []
        line = getattr(expr, "lineno", getattr(at, "lineno", 0))
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [Use(expr.value, module.rel, line)]
        if isinstance(expr, ast.JoinedStr):
            return [Use(_template(expr), module.rel, line, template=True)]
        if isinstance(expr, ast.IfExp):
            return self._resolve(module, expr.body, at, depth + 1) + self._resolve(module, expr.orelse, at, depth + 1)
        if isinstance(expr, ast.BoolOp):
            return [use for value in expr.values for use in self._resolve(module, value, at, depth + 1)]
        if isinstance(expr, ast.Dict):
            return [use for value in expr.values for use in self._resolve(module, value, at, depth + 1)]
        if isinstance(expr, (ast.Tuple, ast.List)):
            return self._resolve(module, expr.elts[0], at, depth + 1) if expr.elts else []
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.slice, ast.Constant) and expr.slice.value == 0:
                return self._resolve_first(module, expr.value, at, depth + 1)
            return self._resolve(module, expr.value, at, depth + 1)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
            uses = self._resolve(module, expr.func.value, at, depth + 1)
            for default in expr.args[1:]:
                uses += self._resolve(module, default, at, depth + 1)
            return uses
        if isinstance(expr, ast.Name):
            return self._resolve_name(module, expr.id, at, depth + 1)
        return []

    def _resolve_first(self, module: _Module, expr: ast.expr, at: ast.AST, depth: int) -> list[Use]:
        """``known[0]`` where ``known`` comes from a dict of tuples: the first element of each."""
        if isinstance(expr, ast.Name):
            values = self._values_of(module, expr.id, at)
            return [use for value in values for use in self._resolve_first(module, value, at, depth + 1)]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
            return self._resolve_first(module, expr.func.value, at, depth + 1)
        if isinstance(expr, ast.Dict):
            return [use for value in expr.values for use in self._resolve(module, value, at, depth + 1)]
        if isinstance(expr, ast.IfExp):
            return self._resolve_first(module, expr.body, at, depth) + self._resolve_first(module, expr.orelse, at,
                                                                                          depth)
        return self._resolve(module, expr, at, depth)

    def _values_of(self, module: _Module, name: str, at: ast.AST) -> list[ast.expr]:
        function = module.enclosing_function(at)
        values = module.assignments(function, name) if function is not None else []
        return values or module.assignments(module.tree, name)

    def _resolve_name(self, module: _Module, name: str, at: ast.AST, depth: int) -> list[Use]:
        values = self._values_of(module, name, at)
        if values:
            return [use for value in values for use in self._resolve(module, value, at, depth)]
        source = module.imported_from(name)
        if source is not None and source.exists():
            other = self.module(source)
            return [use for value in other.assignments(other.tree, name)
                    for use in self._resolve(other, value, other.tree, depth)]
        return []


def code_uses(root: Path = ROOT) -> list[Use]:
    """Every code use in the source under ``root`` (parameters of the helpers themselves excluded)."""
    return Scanner(root).uses()
