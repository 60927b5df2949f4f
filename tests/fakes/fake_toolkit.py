"""Test-only pytest plugin (``-p tests.fakes.fake_toolkit``): the CUDA toolkit checks see a fake
node described by the JSON file named in ``PREFLIGHT_FAKE_TOOLKIT``. It never ships.

The JSON has ``torch`` (``version``, ``cuda``, ``arch``), ``env`` (the environment the toolkit probe
sees: PATH of fake nvcc folders, CUDA_HOME, DS_SKIP_CUDA_CHECK), ``toolkit_glob``, ``driver``
(``version``, ``cuda`` as ``[major, minor]``), ``gpus`` (``index``, ``name``, ``capability``) and
optionally ``deepspeed`` (``version``). The probes themselves run for real on those inputs: fake
``nvcc`` scripts are executed and parsed, CUDA_HOME is resolved, ninja and the compiler are asked.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from preflight.fixtures.toolkit import CUDA_NODE_KEY, TOOLKIT_FACTS_KEY
from preflight.judge.cuda_runtime import DriverFacts, GpuCapability
from preflight.probe.cuda_node import CudaNode
from preflight.probe.deepspeed import DeepSpeedFacts
from preflight.probe.toolkit import probe_toolkit
from tests.toolkit_fakes import fake_torch

SPEC_ENV = "PREFLIGHT_FAKE_TOOLKIT"
NOWHERE = "/nonexistent/preflight/cuda"


def _node(spec: dict[str, Any]) -> CudaNode:
    driver = spec.get("driver") or {}
    cuda = tuple(driver["cuda"]) if driver.get("cuda") else None
    gpus = tuple(GpuCapability(g["index"], g["name"], tuple(g["capability"])) for g in spec.get("gpus", []))
    problem = None if driver else "fake node without an NVIDIA driver"
    return CudaNode(DriverFacts(driver.get("version"), cuda, problem), gpus, problem or "")


def pytest_configure(config: pytest.Config) -> None:
    spec = json.loads(Path(os.environ[SPEC_ENV]).read_text())
    torch = spec["torch"]
    facts = probe_toolkit(
        spec["env"],
        torch_module=fake_torch(torch["version"], torch.get("cuda"), arch=torch.get("arch", "")),
        toolkit_glob=spec.get("toolkit_glob", NOWHERE),
        default_cuda_home=NOWHERE,
    )
    if spec.get("deepspeed"):
        skip = spec["env"].get("DS_SKIP_CUDA_CHECK")
        facts = dataclasses.replace(facts, deepspeed=DeepSpeedFacts(spec["deepspeed"]["version"], skip))
    config.stash[TOOLKIT_FACTS_KEY] = facts
    config.stash[CUDA_NODE_KEY] = _node(spec)
