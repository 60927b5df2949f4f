"""The config keys one DeepSpeed release knows, shipped as data (``preflight/data/deepspeed_config_keys.json``).

The file is generated from DeepSpeed's own source by ``tools/deepspeed_config_keys.py`` (it lists
the files it reads); preflight never imports DeepSpeed. Two kinds of section, as DeepSpeed treats
unknown keys: ``ignored`` (read with ``dict.get``: an unknown key is silently dropped) and
``rejected`` (a pydantic ``DeepSpeedConfigModel`` with ``extra="forbid"``: an unknown key fails
``deepspeed.initialize``). ``removed`` keys make 0.19.8 raise ``DeepSpeedConfigError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

DATA_FILE = "deepspeed_config_keys.json"


@dataclass(frozen=True, slots=True)
class KeySection:
    """The keys of one section (``""`` is the top level, ``zero_optimization.offload_param`` ...)."""

    path: str
    keys: frozenset[str]
    rejects_unknown: bool
    aliases: Mapping[str, str] = field(default_factory=dict)
    deprecated: Mapping[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True, slots=True)
class KnownKeys:
    """What one DeepSpeed version reads from its config."""

    deepspeed_version: str
    sections: Mapping[str, KeySection]
    free_form: frozenset[str]
    removed: Mapping[str, str]

    def section(self, path: str) -> KeySection | None:
        """The section at ``path``; None for free-form or unknown places."""
        return self.sections.get(path)


def known_keys_from(data: Mapping[str, Any]) -> KnownKeys:
    """Build :class:`KnownKeys` from the JSON document the generator writes."""
    sections = {
        path: KeySection(
            path=path,
            keys=frozenset(entry["keys"]),
            rejects_unknown=entry["unknown"] == "rejected",
            aliases=dict(entry.get("aliases", {})),
            deprecated=dict(entry.get("deprecated", {})),
            source=str(entry.get("source", "")),
        )
        for path, entry in data["sections"].items()
    }
    return KnownKeys(
        deepspeed_version=str(data["deepspeed_version"]),
        sections=sections,
        free_form=frozenset(data.get("free_form", ())),
        removed=dict(data.get("removed", {})),
    )


@lru_cache(maxsize=1)
def load_known_keys() -> KnownKeys:
    """The shipped key list (read once)."""
    text = resources.files("preflight").joinpath("data").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return known_keys_from(json.loads(text))
