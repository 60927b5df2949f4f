"""The job's own files: its training script and the DeepSpeed config its arguments name.

Read only (never executed or imported). The script's arguments name a DeepSpeed config the way
the usual parsers spell it: DeepSpeed's ``--deepspeed_config`` (``deepspeed.add_config_arguments``;
``--deepscale_config`` is its old name), Hugging Face's ``--deepspeed ds.json`` (DeepSpeed's own
``--deepspeed`` is a flag, so a following ``--option`` is not a path), and the ``--ds-config``
/``--ds_config`` spellings scripts use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preflight.inputs import UnreadableInput, not_a_file, read_bytes

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
    problem = not_a_file(str(where))  # a FIFO, a device (/dev/zero), a directory: never opened
    if problem is not None:
        return ScriptSource(str(where), problem != "does not exist", None, problem)
    try:
        data = read_bytes(str(where), limit=MAX_SCRIPT_BYTES, what="the script")
    except UnreadableInput as exc:
        return ScriptSource(str(where), True, None, str(exc).removeprefix("the script "))
    return ScriptSource(str(where), True, data.decode("utf-8", errors="replace"))
