"""Test-only pytest plugin (``-p tests.fakes.fake_toolkit``): the CUDA toolkit checks see a fake torch
build and toolkit described by the JSON file named in ``PREFLIGHT_FAKE_TOOLKIT``, through the run's
transports only (the shipped ``node.toolkit`` and fixtures run unchanged). It never ships. Combine it
with ``-p tests.fakes.nvml_plugin --fake-nvml=<machine>`` for the driver and GPUs: it wraps whichever
transports the run would have had (that fake's, else the real ones) and changes three of them.

The JSON has ``torch`` (``version``, ``cuda``, ``arch``), ``env`` (the environment the job inherits:
PATH of fake nvcc folders, CUDA_HOME, DS_SKIP_CUDA_CHECK, DS_ACCELERATOR), ``toolkit_glob`` and
optionally ``deepspeed`` (``version``; without it the fake node has no DeepSpeed, whatever the test
environment has installed). Where each comes from:

- the environment: ``env``, as the job's (``Transports.environ``);
- the filesystem root: a fresh folder whose top-level entries link to the wrapped root's, plus
  ``usr/local/<name>`` linking to each folder ``toolkit_glob`` matches (a toolkit installed where
  ``/usr/local/cuda*`` is looked for); nothing at ``usr/local/cuda`` itself;
- the command runner: the torch probe (``torch_child.py``) answers as the wrapped runner's answer with
  the spec's build (``version``, ``cuda``, ``arch_list``; no NCCL, no HIP) and DeepSpeed (``deepspeed``:
  the version, no files of its own), and the probe's ``deepspeed`` mode answers the same DeepSpeed; every
  other command (the fake ``nvcc`` scripts, ninja, the compiler) runs for real, so they are executed and
  parsed as on a node.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Generator, Mapping, Sequence
from glob import glob
from pathlib import Path
from typing import Any

import pytest

from preflight.node.torch import CHILD
from preflight.node.transports import Transports
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner

SPEC_ENV = "PREFLIGHT_FAKE_TOOLKIT"
ROOT_KEY = pytest.StashKey[Path]()


def _spec() -> dict[str, Any]:
    return dict(json.loads(Path(os.environ[SPEC_ENV]).read_text()))


def lay_out_root(under: Path, toolkit_glob: str | None, root: Path) -> Path:
    """``root`` with ``under``'s top-level entries linked in and the matched toolkits under ``usr/local``."""
    for entry in under.iterdir() if under.is_dir() else ():
        if entry.name != "usr":
            (root / entry.name).symlink_to(entry)
    local = root / "usr" / "local"
    local.mkdir(parents=True)
    for folder in sorted(glob(toolkit_glob)) if toolkit_glob else ():
        (local / Path(folder).name).symlink_to(folder)
    return root


def _deepspeed(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    found = spec.get("deepspeed")
    return {"version": str(found["version"]), "roots": []} if found else None


def _torch_answer(spec: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    torch = spec["torch"]
    arch = str(torch.get("arch") or "")
    return {**base, "version": torch["version"], "cuda": torch.get("cuda"), "hip": None,
            "arch_list": arch.split() if torch.get("cuda") else [], "nccl": None, "nccl_suffix": "",
            "deepspeed": _deepspeed(spec)}


def runner(spec: Mapping[str, Any], wrapped: CommandRunner) -> CommandRunner:
    """The torch probe answers with the spec's torch and DeepSpeed; every other command runs as ``wrapped`` runs it."""

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if len(argv) >= 2 and str(argv[-2]) == str(CHILD) and argv[-1] == "deepspeed":
            return CommandResult(tuple(argv), 0, json.dumps(_deepspeed(spec)) + "\n", "")
        if argv and str(argv[-1]) == str(CHILD):
            result = wrapped(argv, timeout_s, env)
            lines = result.stdout.strip().splitlines()
            base = json.loads(lines[-1]) if result.ok and lines else {}
            return CommandResult(tuple(argv), 0, json.dumps(_torch_answer(spec, base)) + "\n", "")
        return wrapped(argv, timeout_s, env)

    return run


@pytest.hookimpl(wrapper=True)
def pytest_preflight_transports(config: pytest.Config) -> Generator[None, Transports | None, Transports | None]:
    wrapped = yield
    if wrapped is None:
        return None
    spec = _spec()
    root = config.stash[ROOT_KEY] = lay_out_root(wrapped.root, spec.get("toolkit_glob"),
                                                 Path(tempfile.mkdtemp(prefix="preflight-fake-toolkit-")))
    return Transports(nvml=wrapped.nvml, run=runner(spec, wrapped.run), environ=dict(spec["env"]),
                      python=wrapped.python, root=root, statvfs=wrapped.statvfs)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(ROOT_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
