"""Test-only pytest plugin (``-p tests.fakes.topology_plugin``): the topology checks see a fake NVML
built from a ``nvidia-smi topo -m`` capture. It never ships with preflight.

    --fake-topology=CAPTURE          the matrix the fake NVML is wired after
    --fake-topology-faults=JSON      {"missing": [3], "down": [[1, 0]], "links_per_gpu": 12,
                                     "unavailable": "...", "failing": ["p2p_status"]}

The fake ``nvidia-smi`` itself is a script on PATH (see tests/test_topology_checks.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.parse.topo import parse_topo_matrix
from tests.fakes.topology_nvml import FakeTopologyNvml

_BACKEND_KEY = pytest.StashKey[FakeTopologyNvml]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight-topology-fakes", "preflight topology test fakes (never shipped)")
    group.addoption("--fake-topology", default=None, help="nvidia-smi topo -m capture the fake NVML follows")
    group.addoption("--fake-topology-faults", default="{}", help="faults as JSON")


class _FakeBackend:
    @pytest.fixture(scope="session")
    @classmethod
    def nvml_backend(cls, pytestconfig: pytest.Config) -> FakeTopologyNvml:
        """The fake NVML of this run."""
        return pytestconfig.stash[_BACKEND_KEY]


def pytest_configure(config: pytest.Config) -> None:
    capture = config.getoption("fake_topology")
    if capture is None:
        return
    faults = json.loads(config.getoption("fake_topology_faults"))
    matrix = parse_topo_matrix(Path(capture).read_text())
    config.stash[_BACKEND_KEY] = FakeTopologyNvml.build(
        matrix,
        missing=faults.get("missing", ()),
        down=[tuple(pair) for pair in faults.get("down", ())],
        unavailable=faults.get("unavailable"),
        failing=frozenset(faults.get("failing", ())),
        **({"links_per_gpu": faults["links_per_gpu"]} if "links_per_gpu" in faults else {}),
    )
    # Registered after preflight's plugin, so this fixture definition wins.
    config.pluginmanager.register(_FakeBackend(), "preflight-test-fake-topology")
