"""A recording transport for the torch probe: the real child runs once per command and environment in a test
session, and every later preflight run of the session, in this process or a child one, gets its recorded answer.

Every preflight run builds a new node, and the node asks the job's torch once: a child that imports torch (2 CPU-s
here). Run after run it is the same command in the same environment on the same machine, so the answer is the
same; replaying the first real answer for an identical (command, environment) is what the child would print
again. A different environment (a test's ``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES``, ``HOME``, ``--python``) is a
different key, so it runs the real child; only what pytest and xdist set per test or per worker
(:data:`PER_TEST`) is left out of the key. Only answers that exited 0 are kept: a failure, a timeout or a hang
is never replayed.

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
PER_TEST = frozenset({"PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                      "PYTEST_XDIST_TESTRUNUID"})
"""What pytest and xdist set per test or per worker: never read by the torch probe's child."""
_ANSWERS: dict[str, CommandResult] = {}


def answer_key(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The command and its environment (less :data:`PER_TEST`), as one digest."""
    kept = sorted((name, value) for name, value in env.items() if name not in PER_TEST)
    return hashlib.sha256(json.dumps([[str(a) for a in argv], kept]).encode()).hexdigest()


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
        key = answer_key(argv, os.environ if env is None else env)
        recorded = _ANSWERS.get(key) or _stored(key)
        if recorded is not None:
            _ANSWERS[key] = recorded
            return recorded
        result = runner(argv, timeout_s, env)
        if result.ok:
            _ANSWERS[key] = result
            _store(key, result)
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
