"""Test-only pytest plugin (``-p tests.fakes.nvml_plugin``): the run's NVML child talks to a fake
NVML C library (``tests/fakes/nvml.py``) instead of the driver's. It never ships with preflight.

    --fake-nvml=8x-h100-sxm                     the machine (tests/fakes/nvml_profiles.py)
    --fake-nvml-faults='{"ecc_volatile": {"3": 2}}'   Faults fields as JSON (GPU keys may be strings)
    --fake-torch-count=7                        what torch.cuda.device_count() answers (default: agree)
    --fake-torch-cpu                            torch is a CPU-only build

It answers ``pytest_preflight_transports`` with an :class:`~preflight.probe.nvml_transport.NvmlTransport`
naming the fake; everything after that (the child, its deadline, pynvml) is what preflight does on a
real node. The job's torch probe is answered as a CUDA torch would on that machine: its
``device_count()`` is what CUDA_VISIBLE_DEVICES leaves of the fake's GPUs (torch reads the variable
the same way, ``torch/cuda/__init__.py`` ``_parse_visible_devices``).
"""

from __future__ import annotations

import json

import pytest

import os

from preflight.node.transports import Transports
from preflight.parse.visible_devices import parse_device_order, parse_visible_devices, resolve_visible_devices
from preflight.probe.nvml_transport import NvmlTransport
from tests.fakes.fake_torch import cuda_answer, real_answer, torch_runner
from preflight.probe.nvml_probe import take_snapshot
from tests.fakes.nvml import FACTORY, Faults, library_argument, spec_for


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight-fakes", "preflight test fakes (never shipped)")
    group.addoption("--fake-nvml", default=None, help="fake NVML machine profile")
    group.addoption("--fake-nvml-faults", default="{}", help="faults as a JSON object of Faults fields")
    group.addoption("--fake-torch-count", type=int, default=None, help="torch.cuda.device_count() answer")
    group.addoption("--fake-torch-cpu", action="store_true", default=False, help="torch is a CPU-only build")


def _transport(config: pytest.Config) -> NvmlTransport | None:
    """The fake machine's NVML transport; None without --fake-nvml."""
    profile = config.getoption("fake_nvml")
    if profile is None:
        return None
    spec_for(profile)  # an unknown profile is a clear error here, not in the child
    faults = Faults.from_json(json.loads(config.getoption("fake_nvml_faults")))
    return NvmlTransport(FACTORY, library_argument(profile, faults), f"fake:{profile}")


def _visible_count(transport: NvmlTransport) -> int:
    """What ``torch.cuda.device_count()`` answers on the fake machine under this environment: the
    fake's GPUs (walked by the real NVML child, bounded) that CUDA_VISIBLE_DEVICES leaves."""
    snapshot = take_snapshot(transport, timeout_s=20)
    identities = [i for i in (g.identity() for g in snapshot.gpus) if i is not None]
    if not identities:
        return 0
    try:
        order = parse_device_order(os.environ.get("CUDA_DEVICE_ORDER"))
    except ValueError:
        order = parse_device_order(None)
    return resolve_visible_devices(parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")), identities,
                                   order).count


def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    """The fake NVML, and the job's torch as the fake machine's driver would have it count."""
    transport = _transport(config)
    if transport is None:
        return None
    if config.getoption("fake_torch_cpu"):
        return Transports(nvml=transport, run=torch_runner(real_answer))
    count = config.getoption("fake_torch_count")
    return Transports(nvml=transport, run=torch_runner(lambda: cuda_answer(_visible_count(transport) if count is None
                                                                           else count)))
