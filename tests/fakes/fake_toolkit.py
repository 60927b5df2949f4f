"""Test-only pytest plugin (``-p tests.fakes.fake_toolkit``): the CUDA toolkit checks see a fake
torch build and toolkit described by the JSON file named in ``PREFLIGHT_FAKE_TOOLKIT``. It never
ships. Combine it with ``-p tests.fakes.nvml_plugin --fake-nvml=<machine>`` for the driver and GPUs.

The JSON has ``torch`` (``version``, ``cuda``, ``arch``), ``env`` (the environment the toolkit probe
sees: PATH of fake nvcc folders, CUDA_HOME, DS_SKIP_CUDA_CHECK, DS_ACCELERATOR), ``toolkit_glob`` and
optionally ``deepspeed`` (``version``; without it the fake node has no DeepSpeed, whatever the test
environment has installed). The probe itself runs for real on those inputs: fake ``nvcc`` scripts
are executed and parsed, CUDA_HOME is resolved, ninja and the compiler are asked.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from preflight.fixtures.toolkit import TOOLKIT_FACTS_KEY
from preflight.probe.command import run_command
from preflight.probe.deepspeed import DeepSpeedFacts
from preflight.probe.toolkit import probe_toolkit
from tests.toolkit_fakes import fake_torch

SPEC_ENV = "PREFLIGHT_FAKE_TOOLKIT"
NOWHERE = "/nonexistent/preflight/cuda"


def pytest_configure(config: pytest.Config) -> None:
    spec = json.loads(Path(os.environ[SPEC_ENV]).read_text())
    torch = spec["torch"]
    facts = probe_toolkit(
        spec["env"],
        runner=run_command,
        torch_module=fake_torch(torch["version"], torch.get("cuda"), arch=torch.get("arch", "")),
        toolkit_glob=spec.get("toolkit_glob", NOWHERE),
        default_cuda_home=NOWHERE,
    )
    skip = spec["env"].get("DS_SKIP_CUDA_CHECK")
    version = spec["deepspeed"]["version"] if spec.get("deepspeed") else None
    facts = dataclasses.replace(facts, deepspeed=DeepSpeedFacts(version, skip,
                                                                accelerator_env=spec["env"].get("DS_ACCELERATOR")))
    config.stash[TOOLKIT_FACTS_KEY] = facts
