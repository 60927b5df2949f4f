"""The job's launch command line, read the way its launcher reads it (``shlex``, no execution).

Three launchers: ``torchrun`` (also ``python -m torch.distributed.run`` and the deprecated
``python -m torch.distributed.launch``), DeepSpeed's ``deepspeed`` runner, and a plain ``python
script.py`` (one process). Options and their spellings are those of torch 2.13's
``torch/distributed/run.py`` ``get_args_parser`` (each ``--a-b`` also as ``--a_b``; ``-m``,
``-r``, ``-t``) and DeepSpeed 0.19.8's ``deepspeed/launcher/runner.py`` ``parse_args``. As with
argparse, the first argument that is not an option is the training script and everything after
it belongs to the script; ``--opt=value`` and ``--opt value`` both work, and a unique prefix of a
long option is that option. ``VAR=value`` words before the launcher set the job's environment.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TORCHRUN_VALUES = (
    "nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "max-restarts",
    "monitor-interval", "start-method", "event-log-handler", "role", "log-dir", "redirects", "tee",
    "local-ranks-filter", "duplicate-stdout-filters", "duplicate-stderr-filters", "node-rank", "master-addr",
    "master-port", "local-addr", "logs-specs", "numa-binding", "signals-to-handle", "shutdown-timeout",
)
TORCHRUN_FLAGS = ("standalone", "module", "no-python", "run-path", "virtual-local-rank")
TORCHRUN_SHORT = {"-m": "module", "-r": "redirects", "-t": "tee"}
LEGACY_LAUNCH_FLAGS = ("use-env",)
"""``torch.distributed.launch`` adds ``--use-env`` (it passes ``--local-rank`` to the script otherwise)."""

DEEPSPEED_VALUES = (
    "hostfile", "include", "exclude", "num_nodes", "num_gpus", "num_accelerators", "master_port", "master_addr",
    "node_rank", "launcher", "launcher_args", "enable_each_rank_log", "autotuning", "bind_core_list", "ssh_port",
    "venv_script", "log_level",
)
DEEPSPEED_FLAGS = ("module", "no_python", "no_local_rank", "no_ssh", "no_ssh_check", "force_multi", "save_pid",
                   "bind_cores_to_rank", "quiet")
DEEPSPEED_SHORT = {"-H": "hostfile", "-i": "include", "-e": "exclude", "-q": "quiet"}
DEEPSPEED_ALIASES = {"num_accelerators": "num_gpus"}

WRAPPERS = ("nohup", "exec", "time", "nice", "stdbuf", "setsid")
"""Words in front of the launcher that change nothing preflight judges."""

_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


class LaunchCommandError(ValueError):
    """A command line that cannot be read; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """The launcher, its options (canonical names), the script and the script's arguments."""

    text: str
    launcher: str
    """``torchrun``, ``deepspeed`` or ``python``."""
    options: Mapping[str, str | bool]
    script: str
    script_args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    legacy_launch: bool = False
    """``python -m torch.distributed.launch`` (deprecated; passes ``--local-rank`` to the script)."""

    def option(self, name: str) -> str | bool | None:
        """An option's value by canonical name (``nproc-per-node``, ``num_gpus``); None when not given."""
        return self.options.get(name)

    @property
    def runs_module(self) -> bool:
        """True when the script is a module name (``-m``/``--module``)."""
        return bool(self.options.get("module"))


def parse_launch_command(text: str) -> LaunchCommand:
    """Read a launch command; raises :class:`LaunchCommandError` for anything its launcher would refuse."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise LaunchCommandError(f"launch command does not parse as a shell line: {exc}") from None
    env: dict[str, str] = {}
    while words and (_ENV_WORD.match(words[0]) or words[0] in WRAPPERS or words[0] == "env"):
        word = words.pop(0)
        if _ENV_WORD.match(word):
            name, _, value = word.partition("=")
            env[name] = value
    if not words:
        raise LaunchCommandError("launch command is empty: expected torchrun, deepspeed or python")
    program = os.path.basename(words[0])
    rest = words[1:]
    if program == "torchrun":
        return _torchrun(text, rest, env, legacy=False)
    if program == "deepspeed":
        return _deepspeed(text, rest, env)
    if _PYTHON.match(program):
        return _python(text, rest, env)
    raise LaunchCommandError(
        f"launch command starts with {words[0]!r}: preflight reads torchrun, python -m torch.distributed.run, "
        "deepspeed and python commands"
    )


def _python(text: str, rest: list[str], env: dict[str, str]) -> LaunchCommand:
    """``python [-u] [-X opt] -m torch.distributed.run ...`` or ``python script.py ...``."""
    index = 0
    while index < len(rest) and rest[index].startswith("-") and rest[index] != "-m":
        index += 2 if rest[index] in ("-X", "-W") else 1
    if index < len(rest) and rest[index] == "-m":
        if index + 1 >= len(rest):
            raise LaunchCommandError("launch command: python -m needs a module name")
        module = rest[index + 1]
        after = rest[index + 2:]
        if module == "torch.distributed.run":
            return _torchrun(text, after, env, legacy=False)
        if module == "torch.distributed.launch":
            return _torchrun(text, after, env, legacy=True)
        return LaunchCommand(text, "python", {"module": True}, module, tuple(after), env)
    if index >= len(rest):
        raise LaunchCommandError("launch command: python without a script")
    return LaunchCommand(text, "python", {}, rest[index], tuple(rest[index + 1:]), env)


def _torchrun(text: str, rest: list[str], env: dict[str, str], *, legacy: bool) -> LaunchCommand:
    flags = TORCHRUN_FLAGS + (LEGACY_LAUNCH_FLAGS if legacy else ())
    longs = {f"--{name}": name for name in (*TORCHRUN_VALUES, *flags)}
    longs.update({f"--{name.replace('-', '_')}": name for name in (*TORCHRUN_VALUES, *flags)})
    options, script, args = _options(rest, longs, TORCHRUN_SHORT, set(flags), "torchrun")
    return LaunchCommand(text, "torchrun", options, script, args, env, legacy_launch=legacy)


def _deepspeed(text: str, rest: list[str], env: dict[str, str]) -> LaunchCommand:
    longs = {f"--{name}": DEEPSPEED_ALIASES.get(name, name) for name in (*DEEPSPEED_VALUES, *DEEPSPEED_FLAGS)}
    options, script, args = _options(rest, longs, DEEPSPEED_SHORT, set(DEEPSPEED_FLAGS), "deepspeed")
    return LaunchCommand(text, "deepspeed", options, script, args, env)


def _options(
    words: Sequence[str], longs: Mapping[str, str], shorts: Mapping[str, str], flags: set[str], program: str
) -> tuple[dict[str, str | bool], str, tuple[str, ...]]:
    """argparse's reading: options until the first positional (the script), the rest to the script."""
    options: dict[str, str | bool] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, value = _one_option(word, longs, shorts, program)
        if name in flags:
            if value is not None:
                raise LaunchCommandError(f"{program}: {word} takes no value")
            options[name] = True
            index += 1
            continue
        if value is None:
            if index + 1 >= len(words) or (words[index + 1].startswith("-") and not _number(words[index + 1])):
                raise LaunchCommandError(f"{program}: {word} expects a value")
            value = words[index + 1]
            index += 1
        options[name] = value
        index += 1
    if index >= len(words):
        raise LaunchCommandError(f"{program}: no training script in the launch command")
    return options, words[index], tuple(words[index + 1:])


def _one_option(word: str, longs: Mapping[str, str], shorts: Mapping[str, str], program: str) -> tuple[str, str | None]:
    """(canonical name, attached value or None) for one option word."""
    if word.startswith("--"):
        spelled, sep, attached = word.partition("=")
        value = attached if sep else None
        if spelled in longs:
            return longs[spelled], value
        matches = {canonical for option, canonical in longs.items() if option.startswith(spelled)}
        if len(matches) == 1:
            return matches.pop(), value
        if matches:
            raise LaunchCommandError(f"{program}: ambiguous option {spelled} ({', '.join(sorted(matches))})")
        raise LaunchCommandError(f"{program}: unrecognized option {spelled}")
    short, attached = word[:2], word[2:]
    if short not in shorts:
        raise LaunchCommandError(f"{program}: unrecognized option {word}")
    return shorts[short], (attached.removeprefix("=") or None) if attached else None


def _number(word: str) -> bool:
    """``-1`` is a value (argparse takes negative numbers as values when no option looks like one)."""
    try:
        float(word)
    except ValueError:
        return False
    return True
