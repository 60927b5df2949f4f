"""A DeepSpeed config file read as plain data, with key paths and Hugging Face's ``"auto"`` kept.

DeepSpeed itself loads a config path with ``hjson`` and refuses duplicate keys
(deepspeed/runtime/config.py ``DeepSpeedConfig.__init__``, ``dict_raise_error_on_duplicate_keys``);
Hugging Face Trainer and Accelerate load it with ``json``. JSON is the form all of them read, so
that is what this parser accepts: a file that is not JSON, or names a key twice, is bad input.
``"auto"`` is a value like any other here; what it means is the judge's business
(:mod:`preflight.judge.ds_config`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.inputs import UnreadableInput, read_bytes, shown

AUTO = "auto"
MAX_CONFIG_BYTES = 4 * 2**20
"""A DeepSpeed config is a few KiB; anything past 4 MiB is not one."""


class DsConfigError(ValueError):
    """A config that cannot be read; the message is one line naming the file."""


class _Missing:
    """The value of a key that is absent (distinct from JSON ``null``)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True, slots=True)
class DsConfig:
    """The parsed config and where it came from."""

    source: str
    data: Mapping[str, Any]

    def get(self, path: str) -> Any:
        """The value at a dotted key path (``zero_optimization.stage``), or :data:`MISSING`."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return MISSING
            node = node[part]
        return node

    def has(self, path: str) -> bool:
        """True when the key path is present (even with ``null``)."""
        return self.get(path) is not MISSING

    def is_auto(self, path: str) -> bool:
        """True when the value at ``path`` is the string ``"auto"``."""
        return bool(self.get(path) == AUTO)

    def auto_paths(self) -> tuple[str, ...]:
        """Every key path whose value is ``"auto"``, in file order."""
        return tuple(path for path, value in self.items() if value == AUTO)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every (key path, value) pair, depth first in file order, sections included."""
        yield from _walk(self.data, "")


def _walk(node: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        yield path, value
        if isinstance(value, Mapping):
            yield from _walk(value, path)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """DeepSpeed refuses a key given twice in one object; so do we (json keeps the last one)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DsConfigError(f"key {key!r} appears twice in one object (DeepSpeed refuses duplicate keys)")
        seen[key] = value
    return seen


_YAML_KEY = re.compile(r"[A-Za-z_][\w.-]*[ \t]*:(?:[ \t]|$)")


def looks_like_yaml(text: str) -> bool:
    """True when the first line that says something is a YAML document start or a bare ``key: value`` line
    (JSON starts with ``{``): a config written for a YAML-reading launcher, handed to DeepSpeed."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        return stripped == "---" or stripped.startswith("--- ") or bool(_YAML_KEY.match(stripped))
    return False


def parse_ds_config(text: str, source: str = "<config>") -> DsConfig:
    """Parse JSON text into a :class:`DsConfig`; raises :class:`DsConfigError` with one line."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except DsConfigError as exc:
        raise DsConfigError(f"DeepSpeed config {source}: {exc}") from None
    except json.JSONDecodeError as exc:
        if looks_like_yaml(text):
            raise DsConfigError(
                f"DeepSpeed config {source} looks like YAML, not JSON: DeepSpeed reads JSON (its hjson reader turns "
                "nested YAML into strings) and the Hugging Face Trainer JSON only; convert it, e.g. python -c "
                "'import json,sys,yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout, indent=2)' "
                f"{source} > ds_config.json") from None
        raise DsConfigError(
            f"DeepSpeed config {source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise DsConfigError(f"DeepSpeed config {source} is nested too deeply to be a config") from None
    if not isinstance(data, dict):
        raise DsConfigError(f"DeepSpeed config {source} must be a JSON object, got {type(data).__name__}")
    return DsConfig(source=source, data=data)


def read_ds_config(path: str | Path) -> DsConfig:
    """Read and parse a config file; a missing, unreadable or oversized file is a :class:`DsConfigError`."""
    where = Path(path).expanduser()
    name = f"DeepSpeed config {shown(str(where))}"
    try:  # a regular file only (a FIFO, a device, /dev/zero refused without waiting), at most 4 MiB
        data = read_bytes(str(where), limit=MAX_CONFIG_BYTES, what=name)
    except UnreadableInput as exc:
        raise DsConfigError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DsConfigError(f"{name} is not UTF-8 text") from None
    return parse_ds_config(text, shown(str(where)))
