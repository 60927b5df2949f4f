"""The job's own files: its training script (and the modules beside it it imports), the DeepSpeed
config its arguments name, the DeepSpeed hostfile, and whether ``python -m MODULE`` has a module.

Read only (never executed or imported). The script's arguments name a DeepSpeed config the way
the usual parsers spell it: DeepSpeed's ``--deepspeed_config`` (``deepspeed.add_config_arguments``;
``--deepscale_config`` is its old name), Hugging Face's ``--deepspeed ds.json`` (DeepSpeed's own
``--deepspeed`` is a flag, so a following ``--option`` is not a path), and the ``--ds-config``
/``--ds_config`` spellings scripts use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from preflight.inputs import UnreadableInput, not_a_file, read_bytes
from preflight.parse.script_imports import MAX_MODULES, neighbour_files
from preflight.probe.command import CommandRunner

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
    problem = not_a_file(str(where))  # a FIFO, a device (/dev/zero), a directory: never opened
    if problem is not None:
        return ScriptSource(str(where), problem != "does not exist", None, problem)
    try:
        data = read_bytes(str(where), limit=MAX_SCRIPT_BYTES, what="the script")
    except UnreadableInput as exc:
        return ScriptSource(str(where), True, None, str(exc).removeprefix("the script "))
    return ScriptSource(str(where), True, data.decode("utf-8", errors="replace"))


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


MAX_HOSTFILE_BYTES = 2**20
"""A hostfile lists a few hundred hosts at most."""
DEEPSPEED_DEFAULT_HOSTFILE = "/job/hostfile"
"""DeepSpeed's runner reads this hostfile when --hostfile is not given (``DLTS_HOSTFILE``)."""


@dataclass(frozen=True, slots=True)
class HostfileFacts:
    """The DeepSpeed hostfile a launch names (or the runner's default one): is it there, its text."""

    path: str
    given: bool
    """True when the launch names it (``--hostfile``), False for DeepSpeed's default path."""
    exists: bool
    text: str | None
    problem: str | None = None


def read_hostfile(path: str | None, cwd: Path | None = None) -> HostfileFacts:
    """The hostfile DeepSpeed's runner will read: ``--hostfile PATH`` or its default ``/job/hostfile``."""
    where = resolve(path or DEEPSPEED_DEFAULT_HOSTFILE, cwd)
    try:
        if not where.is_file():
            return HostfileFacts(str(where), path is not None, False, None)
        if where.stat().st_size > MAX_HOSTFILE_BYTES:
            return HostfileFacts(str(where), path is not None, True, None, "is too large to be a hostfile")
        return HostfileFacts(str(where), path is not None, True, where.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        return HostfileFacts(str(where), path is not None, True, None, exc.strerror or str(exc))


MODULE_TIMEOUT_S = 15.0
_FIND_MODULE = """
import sys
from importlib.machinery import PathFinder
name, cwd = sys.argv[1], sys.argv[2]
path = [cwd] + [p for p in sys.path if p]
parts = name.split(".")
spec = None
for i, part in enumerate(parts):
    spec = PathFinder.find_spec(part, path)
    if spec is None:
        print("missing", ".".join(parts[:i + 1]))
        raise SystemExit(0)
    if i < len(parts) - 1:
        if spec.submodule_search_locations is None:
            print("not-a-package", ".".join(parts[:i + 1]))
            raise SystemExit(0)
        path = list(spec.submodule_search_locations)
if spec.submodule_search_locations is not None and \\
        PathFinder.find_spec("__main__", list(spec.submodule_search_locations)) is None:
    print("no-main", name)
    raise SystemExit(0)
print("found", spec.origin or name)
"""
"""Run in the job's interpreter: finds ``python -m NAME``'s module on its ``sys.path`` (the job's
directory first, as ``-m`` puts it) with ``PathFinder``, which reads directories and imports nothing."""


@dataclass(frozen=True, slots=True)
class ModuleLookup:
    """Where ``python -m NAME`` finds its module in the job's interpreter, or which part is missing."""

    name: str
    state: str
    """``found``, ``missing`` (``part`` is the first dotted prefix not found), ``not-a-package``, ``no-main``
    (a package without ``__main__``), or ``unknown`` (the interpreter did not answer)."""
    part: str | None = None
    detail: str = ""


def find_module(name: str, *, python: str, run: CommandRunner, environ: Mapping[str, str],
                cwd: Path | None = None) -> ModuleLookup:
    """Ask the job's interpreter whether ``python -m name`` has a module to run (nothing is imported)."""
    result = run([python, "-c", _FIND_MODULE, name, str(cwd or Path.cwd())], timeout_s=MODULE_TIMEOUT_S,
                 env=dict(environ))
    words = result.stdout.split(maxsplit=1) if result.ok else []
    if len(words) != 2 or words[0] not in ("found", "missing", "not-a-package", "no-main"):
        why = "timed out" if result.timed_out else "not found" if result.not_found else \
            (result.stderr.strip().splitlines() or ["no answer"])[-1]
        return ModuleLookup(name, "unknown", None, f"{python} {why}")
    state, rest = words[0], words[1].strip()
    return ModuleLookup(name, state, rest if state != "found" else None, rest if state == "found" else "")
