"""Node facts that fixtures add to the report's ``node`` block while the run goes on, and whole
sections a sub-command's session adds at the report's top level (``rehearsal``)."""

from __future__ import annotations

from typing import Any

import pytest

FACTS_KEY = pytest.StashKey[dict[str, Any]]()
SECTIONS_KEY = pytest.StashKey[dict[str, Any]]()


def add_fact(config: pytest.Config, name: str, data: Any) -> None:
    """Add (or replace) the section ``name`` of the report's node facts; ``data`` must be plain JSON."""
    config.stash.setdefault(FACTS_KEY, {})[name] = data


def gathered_facts(config: pytest.Config) -> dict[str, Any]:
    """Every section added so far."""
    facts: dict[str, Any] = config.stash.get(FACTS_KEY, {})
    return dict(facts)


def add_section(config: pytest.Config, name: str, data: Any) -> None:
    """Add (or replace) the top-level report section ``name`` (plain JSON, declared in schema.json)."""
    config.stash.setdefault(SECTIONS_KEY, {})[name] = data


def gathered_sections(config: pytest.Config) -> dict[str, Any]:
    """Every top-level section added so far."""
    sections: dict[str, Any] = config.stash.get(SECTIONS_KEY, {})
    return dict(sections)


def note_host_fact(config: pytest.Config, key: str, value: Any) -> None:
    """Merge one entry into the report's ``host`` node section."""
    section = dict(gathered_facts(config).get("host", {}))
    section[key] = value
    add_fact(config, "host", section)
