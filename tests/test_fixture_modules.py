"""``preflight/fixtures/`` holds fixtures and pytest hooks only (issue 28): a helper there is found by no one
looking for the module whose job it is, so it lives in that module and the fixture imports it.

Read with ``ast``: every top-level function must be a ``@pytest.fixture`` (bare, called, or
``pytest.fixture``'s other spellings) or a ``pytest_*`` hook, and no class may be defined there.
"""

from __future__ import annotations

import ast
from tests.conftest import REPO_ROOT

FIXTURES = REPO_ROOT / "preflight" / "fixtures"


def _is_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture``, ``@pytest.fixture(...)``, ``@fixture`` or ``@fixture(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "fixture"
    return isinstance(target, ast.Name) and target.id == "fixture"


def helpers_in(source: str) -> list[str]:
    """Top-level functions that are neither fixtures nor ``pytest_*`` hooks, and classes, by name."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            found.append(f"class {node.name}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("pytest_") or any(_is_fixture(d) for d in node.decorator_list):
                continue
            found.append(node.name)
    return found


def test_the_fixture_modules_hold_only_fixtures_and_hooks() -> None:
    modules = sorted(FIXTURES.glob("*.py"))
    assert len(modules) > 5, modules  # the walk found the folder
    stray = {path.name: names for path in modules if (names := helpers_in(path.read_text(encoding="utf-8")))}
    assert not stray, f"helpers in preflight/fixtures/ (move each to the module whose job it is): {stray}"


def test_a_planted_helper_and_class_are_named() -> None:
    source = '''
import pytest
from pytest import fixture

class Sweeps:
    pass

def job_for(config):
    return config

@pytest.fixture(scope="session")
def nproc(node):
    return 2

@fixture
def plain():
    return 1

@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    def inner():  # nested: the fixture's own business
        return session
    return inner

@pytest.hookimpl(trylast=True)
def start_rehearsal(config):
    return config
'''
    assert helpers_in(source) == ["class Sweeps", "job_for", "start_rehearsal"]

