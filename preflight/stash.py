"""What the plugin keeps on pytest's ``config.stash`` for one run, and how the rest of preflight reads it.

The plugin (:mod:`preflight.plugin`) puts the settings, the report collector and the node model here;
fixtures, the collector and the terminal read them through this module, so none of them imports the
plugin back (the plugin imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from preflight.node import Node
from preflight.settings import Settings

if TYPE_CHECKING:  # the collector reads this module: a type only, never an import at run time
    from preflight.report.collector import ReportCollector

SETTINGS_KEY = pytest.StashKey[Settings]()
NODE_KEY = pytest.StashKey[Node]()
COLLECTOR_KEY = pytest.StashKey["ReportCollector"]()


def settings_of(config: pytest.Config) -> Settings:
    """The run's settings (the plugin stashes them in its ``pytest_configure``)."""
    return config.stash[SETTINGS_KEY]


def collector_of(config: pytest.Config) -> ReportCollector | None:
    """The report collector of a preflight run, None for an ordinary test run (or an xdist worker)."""
    return config.stash.get(COLLECTOR_KEY, None)


def node_for(config: pytest.Config) -> Node:
    """The run's one node model, built on first use from the run's transports (the
    ``pytest_preflight_transports`` hook: a test plugin's fakes, else the real machine)."""
    node = config.stash.get(NODE_KEY, None)
    if node is None:
        transports = config.hook.pytest_preflight_transports(config=config)
        settings = config.stash[SETTINGS_KEY]
        node = Node(transports, nproc=settings.nproc, cpu=settings.cpu, nvml_timeout_s=settings.nvml_deadline_s)
        config.stash[NODE_KEY] = node
    return node


def is_check(item: pytest.Item) -> bool:
    """Verdict handling applies to a preflight run, or to any test that uses ``record``."""
    return COLLECTOR_KEY in item.config.stash or "record" in getattr(item, "fixturenames", ())
