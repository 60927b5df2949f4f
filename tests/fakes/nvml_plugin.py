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

from preflight.fixtures.gpus import NVML_BACKEND_KEY, TORCH_DEVICES_KEY, gpu_state
from preflight.probe.torch_devices import TorchDevices
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


def pytest_configure(config: pytest.Config) -> None:
    profile = config.getoption("fake_nvml")
    if profile is None:
        return
    faults = _keys_to_int(json.loads(config.getoption("fake_nvml_faults")))
    config.stash[NVML_BACKEND_KEY] = FakeNvml.from_profile(profile, **faults)
    visible = gpu_state(config).visible
    count = config.getoption("fake_torch_count")
    if count is None:
        count = visible.count if visible else 0
    cuda = None if config.getoption("fake_torch_cpu") else "12.4"
    config.stash[TORCH_DEVICES_KEY] = TorchDevices("2.13.0+fake", cuda, 0 if cuda is None else count)
