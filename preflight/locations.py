"""Where the shipped checks live, in a wheel and in a checkout alike."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def checks_dir() -> Path:
    """``preflight.checks`` as installed (the wheel maps ``checks/`` there), else ``checks/`` of a checkout."""
    try:
        spec = importlib.util.find_spec("preflight.checks")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return PACKAGE_DIR.parent / "checks"
