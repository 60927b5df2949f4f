"""Test-only pytest plugin (``-p tests.fakes.nvml_plugin``): the GPU checks run against a fake
NVML machine instead of the real library. It never ships with preflight.

    --fake-nvml=8x-h100-sxm                     the machine (tests/fakes/nvml_profiles.py)
    --fake-nvml-faults='{"ecc_volatile": {"3": 2}}'   Faults fields as JSON (GPU keys may be strings)
    --fake-torch-count=7                        what torch.cuda.device_count() answers (default: agree)
    --fake-torch-cpu                            torch is a CPU-only build
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from preflight.fixtures.gpus import NVML_BACKEND_KEY, gpu_state
from preflight.node.transports import Transports
from tests.fakes.fake_torch import cuda_answer, real_answer, torch_runner
from tests.fakes.nvml import FakeNvml


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight-fakes", "preflight test fakes (never shipped)")
    group.addoption("--fake-nvml", default=None, help="fake NVML machine profile")
    group.addoption("--fake-nvml-faults", default="{}", help="faults as a JSON object of Faults fields")
    group.addoption("--fake-torch-count", type=int, default=None, help="torch.cuda.device_count() answer")
    group.addoption("--fake-torch-cpu", action="store_true", default=False, help="torch is a CPU-only build")


def _keys_to_int(value: Any) -> Any:
    """JSON object keys are strings; GPU numbers in Faults are ints. Lists become tuples."""
    if isinstance(value, dict):
        return {int(k) if isinstance(k, str) and k.isdigit() else k: _keys_to_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_keys_to_int(v) for v in value)
    return value


def _install(config: pytest.Config) -> bool:
    """Put the fake machine in the stash (once); False without --fake-nvml."""
    profile = config.getoption("fake_nvml")
    if profile is None:
        return False
    if NVML_BACKEND_KEY not in config.stash:
        faults = _keys_to_int(json.loads(config.getoption("fake_nvml_faults")))
        config.stash[NVML_BACKEND_KEY] = FakeNvml.from_profile(profile, **faults)
    return True


def pytest_configure(config: pytest.Config) -> None:
    _install(config)


def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    """The job's torch as the fake machine's driver would have it count (the torch probe's answer)."""
    if not _install(config):
        return None
    if config.getoption("fake_torch_cpu"):
        return Transports(run=torch_runner(real_answer()))
    count = config.getoption("fake_torch_count")
    if count is None:
        visible = gpu_state(config).visible
        count = visible.count if visible else 0
    return Transports(run=torch_runner(cuda_answer(count)))
