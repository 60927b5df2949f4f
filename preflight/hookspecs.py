"""Hooks preflight declares for its own areas and for test-only plugins.

Areas (the modules of ``preflight.fixtures``) contribute the phases of the rehearsal launch. A
test-only plugin selects fakes here and nowhere else: it returns fake transports (how the node is
reached) or replaces one phase's entry to inject a fault (a crash, a hang) at the lowest layer, the
code a rank runs, without any switch in the shipped tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy
import pytest

if TYPE_CHECKING:
    from preflight.launch.plan import Phase
    from preflight.node.transports import Transports

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_preflight_phases(config: pytest.Config, wanted: frozenset[str]) -> list[Phase]:
    """Return the phases this area owns among ``wanted`` (names the selected checks need) that can
    run on this node, in any order; the rehearsal orders them."""
    return []


@hookspec(firstresult=True)
def pytest_preflight_phase(config: pytest.Config, phase: Phase) -> Phase | None:
    """Return a replacement for ``phase`` (tests: a faulty entry), or None to keep it."""
    return None


@hookspec(firstresult=True)
def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    """Return the transports of this run (tests: fakes); preflight's own implementation returns the real ones."""
    return None
