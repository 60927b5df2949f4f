"""What an option is, the generic converters, and the argparse glue shared by every parser.

An option ``Option("expect-gpus", ...)`` is ``--expect-gpus`` for ``preflight`` and
``--preflight-expect-gpus`` for pytest; checks read it as the typed field ``settings.expect_gpus``.
Every run option is declared once, in :data:`preflight.settings.OPTIONS`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypedDict

from preflight.errors import UsageError


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One option. ``type`` converts the string and raises ``ValueError`` with a clear message."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: Sequence[str] | None = None
    flag: bool = False
    multiple: bool = False
    metavar: str | None = None
    attr: str | None = None
    """The :class:`~preflight.settings.Settings` field, when it is not :attr:`dest` (``timeout_s``)."""

    @property
    def dest(self) -> str:
        """Attribute name: ``expect-gpus`` -> ``expect_gpus``."""
        return self.name.replace("-", "_")

    @property
    def attribute(self) -> str:
        """The field of :class:`~preflight.settings.Settings` that holds the value."""
        return self.attr or self.dest

    @property
    def pytest_flag(self) -> str:
        """The pytest spelling of the option."""
        return f"--preflight-{self.name}"


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text) if len(text) <= 30 else int("x")  # a 5000-digit number is not a count
    except ValueError:
        raise ValueError(f"expected a whole number, got {text[:40]!r}") from None
    if value < 1:
        raise ValueError(f"expected a number >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"expected a finite number > 0, got {text!r}")
    return value


MAX_SECONDS = 7 * 24 * 3600.0
"""The longest deadline an option may give: a week (a larger one overflows the platform's timers and
a watchdog thread would die silently)."""
MAX_RANKS = 1024
"""The most ranks one node's job can have (GPUs are 1-16 a node; gloo ranks one per core at most)."""


def seconds(text: str) -> float:
    """A deadline: a finite number of seconds > 0, at most :data:`MAX_SECONDS` (a week)."""
    value = positive_float(text)
    if value > MAX_SECONDS:
        raise ValueError(f"expected at most {MAX_SECONDS:.0f} seconds (a week), got {text!r}")
    return value


def rank_count(text: str) -> int:
    """A number of ranks on this node: 1 to :data:`MAX_RANKS`."""
    value = positive_int(text)
    if value > MAX_RANKS:
        raise ValueError(f"expected at most {MAX_RANKS} ranks on one node, got {value}")
    return value


def python_interpreter(text: str) -> str:
    """An executable file (the job's interpreter); its absolute path."""
    path = shutil.which(text) if os.sep not in text else text
    if not path or not os.path.isfile(path):
        raise ValueError(f"no such interpreter: {text!r}")
    if not os.access(path, os.X_OK):
        raise ValueError(f"not executable: {text!r}")
    return os.path.abspath(path)


class UsageParser(argparse.ArgumentParser):
    """argparse whose errors become one-line :class:`UsageError` (exit code 2), never a usage dump. An
    unknown option gets the closest known ones (``--nprocs``: did you mean --nproc?); ``suggest`` names
    further words a mistyped first argument may have meant (the sub-commands)."""

    def __init__(self, *args: Any, suggest: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.suggest = tuple(suggest)

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message += did_you_mean(message[len(prefix):].split(), self.known_options(), self.suggest)
        raise UsageError(message)

    def known_options(self) -> list[str]:
        """Every option string this parser takes (``--nproc``, ``-k``, ...)."""
        return [flag for action in self._actions for flag in action.option_strings]


def did_you_mean(unknown: Sequence[str], options: Sequence[str], words: Sequence[str] = ()) -> str:
    """``"; did you mean --nproc?"`` for the first unknown argument that resembles an option (or, when it is
    the first argument and not an option, one of ``words``): the closest one, else ``""``."""
    for position, token in enumerate(unknown):
        if token.startswith("--"):
            near = difflib.get_close_matches(token.split("=", 1)[0], [o for o in options if o.startswith("--")],
                                             n=1, cutoff=0.6)
        elif position == 0 and not token.startswith("-"):
            near = difflib.get_close_matches(token, list(words), n=1, cutoff=0.6)
        else:
            continue
        if near:
            return f"; did you mean {near[0]}?"
    return ""


def argparse_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap a converter so its ValueError message reaches the user verbatim."""

    def wrapped(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    wrapped.__name__ = getattr(convert, "__name__", "value")
    return wrapped


class _FlagKeywords(TypedDict):
    """The keywords every option has (a flag has only these)."""

    dest: str
    action: str
    default: object  # None (False for a flag): a value not given; the default is the settings'
    help: str


class ArgumentKeywords(_FlagKeywords, total=False):
    """``add_argument`` keywords of one option (:func:`argparse_kwargs`): a flag has only the four above."""

    metavar: str | None
    choices: Sequence[str] | None
    type: Callable[[str], Any]


def argparse_kwargs(option: Option) -> ArgumentKeywords:
    """``add_argument`` keywords for ``option`` (its dest, help, converter, choices): the same for the CLI's
    parser and pytest's ``addoption``; a value not given is None (a flag False), its default is the settings'."""
    if option.flag:
        return {"dest": option.dest, "action": "store_true", "default": False, "help": option.help}
    kwargs: ArgumentKeywords = {"dest": option.dest, "help": option.help, "metavar": option.metavar,
                                "choices": option.choices, "default": None,
                                "action": "append" if option.multiple else "store"}
    if option.type is not None:
        kwargs["type"] = argparse_type(option.type)
    return kwargs


def join_negative_values(argv: Sequence[str], value_options: Collection[str]) -> list[str]:
    """``--model-params -3B`` -> ``--model-params=-3B`` so the value reaches its converter.

    argparse takes ``-3B`` for an option and would only say "expected one argument"; joining
    lets the converter give the real reason ("must be greater than zero").
    """
    joined: list[str] = []
    index = 0
    while index < len(argv):
        item = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if item in value_options and following is not None and following[:1] == "-" and following[1:2].isdigit():
            joined.append(f"{item}={following}")
            index += 2
            continue
        joined.append(item)
        index += 1
    return joined
