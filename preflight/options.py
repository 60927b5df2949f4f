"""Every command-line option, declared once for both the ``preflight`` CLI and the pytest plugin.

An option ``Option("expect-gpus", ...)`` is ``--expect-gpus`` for ``preflight`` and
``--preflight-expect-gpus`` for pytest; checks read it as ``settings.option("expect_gpus")``.
Areas declare their own options as ``OPTIONS`` in their ``preflight/fixtures/<area>.py``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One option. ``type`` converts the string and raises ``ValueError`` with a clear message."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: Sequence[str] | None = None
    flag: bool = False
    multiple: bool = False
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """Attribute name: ``expect-gpus`` -> ``expect_gpus``."""
        return self.name.replace("-", "_")

    @property
    def pytest_flag(self) -> str:
        """The pytest spelling of the option."""
        return f"--preflight-{self.name}"


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"expected a number >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"expected a finite number > 0, got {text!r}")
    return value


def area_options() -> list[Option]:
    """The ``OPTIONS`` declared by every module in ``preflight.fixtures``."""
    import preflight.fixtures as package

    found: list[Option] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"preflight.fixtures.{info.name}")
        found.extend(getattr(module, "OPTIONS", []))
    return found
