"""The job's own files: its training script and the DeepSpeed config its arguments name.

Read only (never executed or imported). The script's arguments name a DeepSpeed config the way
the usual parsers spell it: DeepSpeed's ``--deepspeed_config`` (``deepspeed.add_config_arguments``;
``--deepscale_config`` is its old name), Hugging Face's ``--deepspeed ds.json`` (DeepSpeed's own
``--deepspeed`` is a flag, so a following ``--option`` is not a path), and the ``--ds-config``
/``--ds_config`` spellings scripts use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from preflight.parse.script_imports import MAX_MODULES, neighbour_files

DS_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--ds-config", "--ds_config", "--ds-config-file",
                   "--deepscale_config", "--deepspeed")
MAX_SCRIPT_BYTES = 8 * 2**20
"""A training script is at most a few hundred KiB; larger files are not scanned."""


@dataclass(frozen=True, slots=True)
class ScriptSource:
    """A script's text, or why it could not be read."""

    path: str
    exists: bool
    text: str | None
    problem: str | None = None
    neighbours: dict[str, str] = field(default_factory=dict)
    """The modules beside the script that its imports load, by path relative to its directory."""


def find_ds_config_arg(args: Sequence[str]) -> str | None:
    """The DeepSpeed config path named in a script's arguments, or None."""
    for index, word in enumerate(args):
        flag, sep, attached = word.partition("=")
        if flag not in DS_CONFIG_FLAGS:
            continue
        value = attached if sep else (args[index + 1] if index + 1 < len(args) else "")
        if not value or value.startswith("-"):
            continue  # DeepSpeed's bare --deepspeed flag
        if flag == "--deepspeed" and not value.endswith((".json", ".hjson")):
            continue  # --deepspeed followed by a positional of the script, not a config
        return value
    return None


def resolve(path: str, cwd: Path | None = None) -> Path:
    """``path`` as the job sees it: relative to the job's working directory."""
    where = Path(path).expanduser()
    return where if where.is_absolute() else (cwd or Path.cwd()) / where


def read_script(path: str, cwd: Path | None = None) -> ScriptSource:
    """The script's text (UTF-8, as Python reads source by default)."""
    where = resolve(path, cwd)
    try:
        if not where.exists():
            return ScriptSource(str(where), False, None, "does not exist")
        if where.is_dir():
            return ScriptSource(str(where), True, None, "is a directory")
        if where.stat().st_size > MAX_SCRIPT_BYTES:
            return ScriptSource(str(where), True, None, "is too large to be a training script")
        return ScriptSource(str(where), True, where.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        return ScriptSource(str(where), where.exists(), None, exc.strerror or str(exc))


def read_program(path: str, cwd: Path | None = None) -> ScriptSource:
    """The script and the modules beside it that it imports (each read like the script, at most
    ``MAX_MODULES`` of them): Python puts the script's directory first on ``sys.path``."""
    source = read_script(path, cwd)
    if source.text is None:
        return source
    base = Path(source.path).parent

    def read(relative: str) -> str | None:
        where = base / relative
        try:
            if not where.is_file() or where.stat().st_size > MAX_SCRIPT_BYTES:
                return None
            return where.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    neighbours = neighbour_files(source.text, read, MAX_MODULES)
    return ScriptSource(source.path, source.exists, source.text, source.problem, neighbours)
