"""A recording transport for the torch probe in in-process test runs: the real child runs once per command
and environment, and later runs in the same test session get its recorded answer.

Every in-process preflight run (``pytester.runpytest``) builds a new node, and the node asks the job's
torch once: a child that imports torch (2-3 CPU-s here). Run after run it is the same command in the same
environment on the same machine, so the answer is the same; replaying the first real answer for an
identical (command, environment) is what the child would print again. A different environment (a test's
``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES``, ``--python``) is a different key, so it runs the real child. Only
answers that exited 0 are kept: a failure, a timeout or a hang is never replayed. Subprocess runs (the
``e2e`` tests) never use it: they run the real child every time.

The ``pytester`` fixture of ``tests/conftest.py`` adds :class:`ReplayTorchProbe` to every in-process run; it
wraps whatever transports the run ends with (the real ones or a test plugin's fakes), so a fake torch
answer still wins and is only ever replayed from itself.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Generator, Mapping, Sequence

import pytest

from preflight.node.torch import CHILD
from preflight.node.transports import Transports
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner

_ANSWERS: dict[tuple[tuple[str, ...], frozenset[tuple[str, str]]], CommandResult] = {}


def replaying(runner: CommandRunner) -> CommandRunner:
    """``runner``, with the torch probe's successful answers recorded and replayed per command and environment."""

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if not argv or str(argv[-1]) != str(CHILD):
            return runner(argv, timeout_s, env)
        key = (tuple(map(str, argv)), frozenset((os.environ if env is None else env).items()))
        recorded = _ANSWERS.get(key)
        if recorded is not None:
            return recorded
        result = runner(argv, timeout_s, env)
        if result.ok:
            _ANSWERS[key] = result
        return result

    return run


class ReplayTorchProbe:
    """The pytest plugin object: wraps the run's transports' command runner with :func:`replaying`."""

    @pytest.hookimpl(wrapper=True)
    def pytest_preflight_transports(self, config: pytest.Config) -> Generator[None, Transports | None, Transports | None]:
        transports = yield
        if transports is None:
            return None
        return dataclasses.replace(transports, run=replaying(transports.run))
