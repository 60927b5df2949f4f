"""Checks are specifications: each check body (after its docstring) is at most 3 lines with exactly one
``record(...)`` call; applicability lives in fixtures and policy in judges (issue 28)."""

from __future__ import annotations

import ast
from pathlib import Path

CHECKS = Path(__file__).resolve().parent.parent / "checks"
MAX_BODY_LINES = 3


def _body(function: ast.FunctionDef) -> list[ast.stmt]:
    """The statements after the docstring."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _record_calls(statements: list[ast.stmt]) -> int:
    return sum(1 for statement in statements for node in ast.walk(statement)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "record")


def shape_problems(source: str, filename: str) -> list[str]:
    """One line per check (``test_*`` function) of ``source`` whose body is too long or records other than once."""
    problems = []
    for function in ast.parse(source, filename).body:
        if not isinstance(function, ast.FunctionDef) or not function.name.startswith("test_"):
            continue
        body = _body(function)
        lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1 if body else 0
        if lines > MAX_BODY_LINES:
            problems.append(f"{filename}::{function.name}: body of {lines} lines (at most {MAX_BODY_LINES})")
        if _record_calls(body) != 1:
            problems.append(f"{filename}::{function.name}: {_record_calls(body)} record(...) calls (exactly 1)")
    return problems


def test_every_check_is_a_short_specification() -> None:
    files = sorted(CHECKS.glob("*.py"))
    assert files
    problems = [p for path in files for p in shape_problems(path.read_text(), path.name)]
    assert problems == []


def test_a_long_check_is_named() -> None:
    source = '''
def test_long(record):
    """Doc."""
    a = 1
    if a:
        record(a)
        return
    record(a)
'''
    assert shape_problems(source, "x.py") == ["x.py::test_long: body of 5 lines (at most 3)",
                                              "x.py::test_long: 2 record(...) calls (exactly 1)"]


def test_a_check_without_record_is_named() -> None:
    assert shape_problems("def test_none(record):\n    pass\n", "y.py") == ["y.py::test_none: 0 record(...) calls (exactly 1)"]
