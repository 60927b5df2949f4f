"""A recording transport for the torch probe: the real child runs once per command and environment in a test
session, and every later preflight run of the session, in this process or a child one, gets its recorded answer.

Every preflight run builds a new node, and the node asks the job's torch once: a child that imports torch (2 CPU-s
here). Run after run it is the same command in the same environment on the same machine, so the answer is the
same; replaying the first real answer for an identical (command, environment) is what the child would print
again. The key keeps every variable the child could read, and leaves out only what it cannot (:func:`answer_key`):

- what pytest, xdist, preflight and the suite's fakes set (``PYTEST_*``, ``PREFLIGHT_*``, ``PY_COLORS``,
  ``COLUMNS``): the child is a standalone script (the standard library, then torch) that imports neither
  pytest nor preflight nor ``tests``;
- ``HOME`` (pytester gives every test its own) where the interpreter is a virtual environment without the
  system site: CPython's ``site.venv()`` then turns the user site off, so ``HOME`` cannot reach ``sys.path``;
- repeats in ``PYTHONPATH``: a folder already on the path adds nothing the second time;
- ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` once a CPU build of torch has answered for the rest of the
  environment: the child counts devices only where ``torch.version.cuda`` is set, and a CPU build never starts
  the CUDA runtime that reads them.

Only answers that exited 0 are kept: a failure, a timeout or a hang is never replayed.

``tests/conftest.py`` names this module in ``PYTEST_PLUGINS`` and a folder of answers in :data:`STORE_ENV` for
the whole session, so pytester's in-process runs and every child ``preflight`` or ``pytest`` that inherits the
environment load it and share the answers. It wraps only the real command runner: a test plugin's fake torch
answers the probe itself, every time. The fakes' own real answer (``tests/fakes/fake_torch.py: real_answer``,
which they edit) comes through :func:`replaying` too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path

import pytest

from preflight.node.torch import CHILD
from preflight.node.transports import Transports
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner, run_command

STORE_ENV = "PREFLIGHT_TEST_TORCH_ANSWERS"
"""A folder of recorded answers shared by the session's processes; without it, answers last one process."""
UNREAD_PREFIXES = ("PYTEST_", "PREFLIGHT_")
"""Set by pytest, xdist, preflight's users and the suite's fakes; read by none of what the child imports."""
UNREAD = frozenset({"PY_COLORS", "COLUMNS", "LINES"})
"""pytest's colour switch and the terminal's size: the child prints JSON to a pipe."""
USER_SITE = frozenset({"HOME", "USERPROFILE", "PYTHONUSERBASE"})
"""Where the user site is: on ``sys.path`` only where the user site is on."""
DEVICE_SELECTION = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
"""Read by the CUDA runtime, which a CPU build of torch never loads."""
_ANSWERS: dict[str, CommandResult] = {}


def user_site_off(python: str, env: Mapping[str, str]) -> bool:
    """True where ``python`` cannot put the user site on ``sys.path``: ``PYTHONNOUSERSITE``, or a
    ``pyvenv.cfg`` beside it or one folder up (where ``site.venv()`` looks) without
    ``include-system-site-packages = true`` (its default, when the key is absent, is true)."""
    if env.get("PYTHONNOUSERSITE"):
        return True
    if not os.path.isabs(python):
        return False  # found on PATH: which interpreter, and so which pyvenv.cfg, is not known here
    folder = Path(os.path.abspath(python)).parent
    config = next((c for c in (folder / "pyvenv.cfg", folder.parent / "pyvenv.cfg") if c.is_file()), None)
    if config is None:
        return False
    system_site = "true"
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == "include-system-site-packages":
            system_site = value.strip().lower()
    return system_site != "true"


def answer_key(argv: Sequence[str], env: Mapping[str, str], *, cpu_build: bool = False) -> str:
    """The command and what of its environment the child can read, as one digest; with ``cpu_build``, the
    key of a CPU build's answer, which :data:`DEVICE_SELECTION` cannot change."""
    unread = set(UNREAD) | (set(USER_SITE) if argv and user_site_off(str(argv[0]), env) else set())
    if cpu_build:
        unread |= DEVICE_SELECTION
    kept = {name: value for name, value in env.items()
            if name not in unread and not name.startswith(UNREAD_PREFIXES)}
    if "PYTHONPATH" in kept:
        kept["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(kept["PYTHONPATH"].split(os.pathsep)))
    return hashlib.sha256(json.dumps([cpu_build, [str(a) for a in argv], sorted(kept.items())]).encode()).hexdigest()


def is_cpu_build(result: CommandResult) -> bool:
    """The child's answer is a CPU build of torch's: imported, no CUDA or ROCm, no device."""
    try:
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False
    return (isinstance(facts, dict) and "version" in facts and "import_error" not in facts
            and facts.get("cuda") is None and facts.get("hip") is None and facts.get("device_count") == 0)


def _stored(key: str) -> CommandResult | None:
    folder = os.environ.get(STORE_ENV)
    path = Path(folder) / f"{key}.json" if folder else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    return CommandResult(tuple(data["argv"]), data["returncode"], data["stdout"], data["stderr"],
                         duration_s=data["duration_s"])


def _store(key: str, result: CommandResult) -> None:
    folder = os.environ.get(STORE_ENV)
    if not folder or not Path(folder).is_dir():
        return
    path = Path(folder) / f"{key}.json"
    partial = path.with_suffix(f".{os.getpid()}.part")  # whole or absent for a reader in another process
    partial.write_text(json.dumps({"argv": list(result.argv), "returncode": result.returncode,
                                   "stdout": result.stdout, "stderr": result.stderr,
                                   "duration_s": result.duration_s}))
    os.replace(partial, path)


def replaying(runner: CommandRunner) -> CommandRunner:
    """``runner``, with the torch probe's successful answers recorded and replayed per command and environment."""

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if not argv or str(argv[-1]) != str(CHILD):
            return runner(argv, timeout_s, env)
        environ = os.environ if env is None else env
        key, cpu_key = answer_key(argv, environ), answer_key(argv, environ, cpu_build=True)
        recorded = _ANSWERS.get(key) or _stored(key) or _ANSWERS.get(cpu_key) or _stored(cpu_key)
        if recorded is not None:
            _ANSWERS[key] = recorded
            return recorded
        result = runner(argv, timeout_s, env)
        if result.ok:
            for kept in (key, cpu_key) if is_cpu_build(result) else (key,):
                _ANSWERS[kept] = result
                _store(kept, result)
        return result

    return run


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_preflight_transports(config: pytest.Config) -> Generator[None, Transports | None, Transports | None]:
    """The run's transports, their command runner wrapped with :func:`replaying` where it is the real one: a
    test plugin's runner answers the probe itself, and its answer must never be replayed to a run of the real
    one with the same command and environment (optional: a session without preflight's plugin, such as the
    suite's own, has no such hook)."""
    transports = yield
    if transports is None or transports.run is not run_command:
        return transports
    return dataclasses.replace(transports, run=replaying(run_command))
