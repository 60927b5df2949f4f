"""Shared helpers for the project's own tests."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch  # noqa: F401 - loaded before pytester snapshots sys.modules: unloading torch mid-run crashes the GC

import tests.fakes.fake_torch  # noqa: F401 - kept across pytester's inline runs (which unload what they import): its
# cache of this machine's real torch answer (a child that imports torch, seconds) then lasts the session
from tests.fakes.replayed_torch import STORE_ENV
from xdist.scheduler import LoadFileScheduling

REPO_ROOT = Path(__file__).resolve().parent.parent
# Ranks start in their launch's own directory (a stray ./numpy must not shadow the job's): test-only
# workers (tests.workers.*) and plugins (tests.fakes.*) are importable in every child by path.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
# Every pytest session of the suite (pytester's in-process runs, each child preflight or pytest that inherits
# this environment) replays the torch probe's answer for a command and environment already asked: the same
# answer, without a child importing torch in every run (tests/fakes/replayed_torch.py). The first process to
# load this file (xdist's controller, before its workers start) makes the folder the session shares.
REPLAY_PLUGIN = "tests.fakes.replayed_torch"
_PLUGINS = [name for name in os.environ.get("PYTEST_PLUGINS", "").split(",") if name.strip()]
os.environ["PYTEST_PLUGINS"] = ",".join([*_PLUGINS, *([] if REPLAY_PLUGIN in _PLUGINS else [REPLAY_PLUGIN])])
_OWN_STORE = None if os.environ.get(STORE_ENV) else tempfile.mkdtemp(prefix="preflight-torch-answers-")
if _OWN_STORE is not None:
    os.environ[STORE_ENV] = _OWN_STORE
TEST_DATA = Path(__file__).resolve().parent / "data"


def as_foreground_job() -> None:
    """``preexec_fn`` for a preflight the test will Ctrl-C: SIGINT back to its default, as in a
    terminal. A shell that runs the suite as a background job leaves SIGINT ignored, and Python then
    never turns it into KeyboardInterrupt (nor does preflight, which keeps what it inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def shared_fixtures_dir() -> Path:
    """Where the captured real outputs live: ``../shared/fixtures`` next to the checkout."""
    override = os.environ.get("PREFLIGHT_SHARED_FIXTURES")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "fixtures"


def corpus_dir() -> Path:
    """Where the real public training scripts, launch lines and DeepSpeed configs of the plan corpus live.

    They are third-party code, so they are never committed: ``tests/data/corpus/manifest.json`` (ours)
    records each one's repository, path, commit and truth, and the files sit in ``../corpus`` next to
    the checkout (``PREFLIGHT_CORPUS=DIR`` points elsewhere); the tests that read them skip without it."""
    override = os.environ.get("PREFLIGHT_CORPUS")
    return Path(override) if override else REPO_ROOT.parent / "corpus"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """Path to ``../shared/fixtures``; skips the test cleanly when it is absent."""
    path = shared_fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"shared fixtures not found at {path}")
    return path


@pytest.fixture(scope="session")
def test_data() -> Path:
    """Path to ``tests/data`` (fixtures written for this project)."""
    return TEST_DATA


pytest_plugins = ["pytester"]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that made the session's folder of torch answers removes it when the session ends."""
    if _OWN_STORE is not None and not hasattr(config, "workerinput"):
        shutil.rmtree(_OWN_STORE, ignore_errors=True)

SCHEMA_PATH = REPO_ROOT / "preflight" / "report" / "schema.json"


def validate_report(report: Mapping[str, Any]) -> None:
    """Assert ``report`` conforms to the shipped JSON Schema."""
    import json

    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(report)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The test layers as markers: everything under ``tests/gpu/`` is ``gpu`` and ``e2e``. ``subprocess``, the
    old name of ``e2e``, is an alias both ways, so ``-m "not e2e"`` and ``-m "not subprocess"`` are the same
    fast lane of in-process tests. The end-to-end tests run first (in their order): under ``-n auto`` the
    long ones then start while the short in-process ones are left to even out the workers' ends."""
    gpu_dir = Path(__file__).resolve().parent / "gpu"
    for item in items:
        if gpu_dir in item.path.parents:
            item.add_marker(pytest.mark.gpu)
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("subprocess") is not None and item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") is not None and item.get_closest_marker("subprocess") is None:
            item.add_marker(pytest.mark.subprocess)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: the long ones start first


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``-n N`` (``auto`` or any count) hands each worker whole test files, in collection order (the
    end-to-end files first), one file after another as workers free up. xdist's default hands the first
    quarter of the tests to one worker as a block, which here is every end-to-end test: one worker then ran
    13 minutes while the other idled after 6. Whole files also keep a module's shared real run on one
    worker, made once. An explicit ``--dist`` other than ``load`` is left as asked."""
    if config.getoption("dist") != "load":
        return None
    config.option.loadscopereorder = False  # xdist would put the files with the most tests first
    return LoadFileScheduling(config, log)
